package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Seed 001's run: a bucket of 5 tokens refilling at 2 per second, asked for one
// token every 0.3 s. Eleven requests pass on the initial burst plus the
// refill, then the bucket alternates between empty and one token.
func ExampleTokenBucket() {
	clock := ratelimit.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewTokenBucket(5, 2, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 15; i++ {
		res, err := limiter.Allow(context.Background(), "user:42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("[%02d] allowed=%-5v remaining=%d retry=%v\n", i, res.Allowed, res.Remaining, res.RetryAfter)
		clock.Advance(300 * time.Millisecond)
	}
	// Output:
	// [00] allowed=true  remaining=4 retry=0s
	// [01] allowed=true  remaining=3 retry=0s
	// [02] allowed=true  remaining=3 retry=0s
	// [03] allowed=true  remaining=2 retry=0s
	// [04] allowed=true  remaining=2 retry=0s
	// [05] allowed=true  remaining=2 retry=0s
	// [06] allowed=true  remaining=1 retry=0s
	// [07] allowed=true  remaining=1 retry=0s
	// [08] allowed=true  remaining=0 retry=0s
	// [09] allowed=true  remaining=0 retry=0s
	// [10] allowed=true  remaining=0 retry=0s
	// [11] allowed=false remaining=0 retry=200ms
	// [12] allowed=true  remaining=0 retry=0s
	// [13] allowed=false remaining=0 retry=100ms
	// [14] allowed=true  remaining=0 retry=0s
}

// A GCRA of 10 requests a minute lets a burst of 10 through, then one every
// 6 seconds.
func ExampleGCRA() {
	clock := ratelimit.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	allowed := 0
	for i := 0; i < 12; i++ {
		if res, _ := limiter.Allow(ctx, "api-key", 1); res.Allowed {
			allowed++
		}
	}
	res, _ := limiter.Allow(ctx, "api-key", 1)
	fmt.Printf("burst: %d allowed, next in %v\n", allowed, res.RetryAfter)
	clock.Advance(res.RetryAfter)
	res, _ = limiter.Allow(ctx, "api-key", 1)
	fmt.Printf("after the wait: allowed=%v, full again in %v\n", res.Allowed, res.ResetAfter)
	// Output:
	// burst: 10 allowed, next in 6s
	// after the wait: allowed=true, full again in 1m0s
}

// Asking for more than the capacity can never succeed, so it is an error
// rather than a denial.
func ExampleLimiter_errors() {
	limiter, err := ratelimit.NewTokenBucket(3, 1)
	if err != nil {
		panic(err)
	}
	_, err = limiter.Allow(context.Background(), "k", 4)
	fmt.Println(err)
	_, err = ratelimit.NewTokenBucket(0, 1)
	fmt.Println(err)
	// Output:
	// ratelimit: cost exceeds limit: n = 4, limit = 3
	// ratelimit: invalid configuration: NewTokenBucket: capacity 0 must be > 0
}
