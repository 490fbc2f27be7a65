package ratelimittest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// A limiter on a Clock moves only when the test moves the clock: no sleeps.
func ExampleClock() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewFixedWindow(1, time.Minute, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	first, _ := limiter.Allow(ctx, "k", 1)
	second, _ := limiter.Allow(ctx, "k", 1)
	clock.Advance(second.RetryAfter)
	third, _ := limiter.Allow(ctx, "k", 1)
	fmt.Println(first.Allowed, second.Allowed, second.RetryAfter, third.Allowed)
	// Output: true false 1m0s true
}
