package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// Rates as a call site writes them, and as they print.
func ExampleRate() {
	for _, r := range []ratelimit.Rate{
		ratelimit.PerSecond(10),
		ratelimit.PerMinute(60),
		ratelimit.PerHour(1000),
		ratelimit.Every(2 * time.Second), // half a unit a second
		ratelimit.Per(5, 2*time.Second),  // two and a half a second
	} {
		fmt.Println(r)
	}
	// Output:
	// 10/s
	// 60/min
	// 1000/h
	// 1/2s
	// 5/2s
}

// A bucket refilling 10 tokens a second, with bursts of 20: the rate comes
// first, as a Rate, so it cannot be swapped with the burst.
func ExampleNewTokenBucket() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 20, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	burst, _ := limiter.Allow(ctx, "user:42", 20)
	next, _ := limiter.Allow(ctx, "user:42", 1)
	fmt.Println(burst.Allowed, next.Allowed, next.RetryAfter)
	fmt.Println(limiter.Policy().Window) // 20 tokens at 100 ms each

	_, err = ratelimit.NewTokenBucket(ratelimit.PerSecond(0), 20)
	fmt.Println(err)
	// Output:
	// true false 100ms
	// 2s
	// ratelimit: invalid configuration: NewTokenBucket: rate 0/s: units 0 must be > 0
}

// A rate read from a configuration file, and one that is refused.
func ExampleParseRate() {
	r, err := ratelimit.ParseRate("100/min")
	fmt.Println(r, err)
	_, err = ratelimit.ParseRate("100/m")
	fmt.Println(err)
	// Output:
	// 100/min <nil>
	// ratelimit: invalid configuration: ParseRate("100/m"): period "m" must be "s", "min", "h" or a duration such as "2s" or "1m30s"
}
