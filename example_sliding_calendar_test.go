package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// A sliding log of 3 per 10 s: a call is let through again exactly when
// the unit 10 s before it leaves the span, never at a window's boundary.
func ExampleSlidingLog() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewSlidingLog(3, 10*time.Second, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for _, step := range []time.Duration{0, 4 * time.Second, time.Second, time.Second} {
		clock.Advance(step)
		res, _ := limiter.Allow(ctx, "user", 1)
		fmt.Printf("allowed=%v remaining=%d retry after %v\n", res.Allowed, res.Remaining, res.RetryAfter)
	}
	clock.Advance(4 * time.Second) // 10 s after the first unit
	res, _ := limiter.Allow(ctx, "user", 1)
	fmt.Printf("when the first unit leaves: allowed=%v\n", res.Allowed)
	// Output:
	// allowed=true remaining=2 retry after 0s
	// allowed=true remaining=1 retry after 0s
	// allowed=true remaining=0 retry after 0s
	// allowed=false remaining=0 retry after 4s
	// when the first unit leaves: allowed=true
}

// A sliding counter of 4 per 10 s weighs the previous window's count by
// the share of it still in the span: half way into a window, 2 counted
// before weigh 1.
func ExampleSlidingCounter() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewSlidingCounter(4, 10*time.Second, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, _ := limiter.Allow(ctx, "user", 2)
	fmt.Printf("window 1: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	clock.Advance(10 * time.Second)
	res, _ = limiter.Allow(ctx, "user", 2)
	fmt.Printf("window 2 opens, the 2 before weigh 2: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	res, _ = limiter.Allow(ctx, "user", 1)
	fmt.Printf("full: allowed=%v retry after %v\n", res.Allowed, res.RetryAfter)
	clock.Advance(res.RetryAfter)
	res, _ = limiter.Allow(ctx, "user", 1)
	fmt.Printf("half way, they weigh 1: allowed=%v\n", res.Allowed)
	// Output:
	// window 1: allowed=true remaining=2
	// window 2 opens, the 2 before weigh 2: allowed=true remaining=0
	// full: allowed=false retry after 5s
	// half way, they weigh 1: allowed=true
}

// A quota of 2 calls per day of New York's wall clock: it resets at
// midnight there, whatever time the first call came, and the day the
// clocks fall back lasts 25 hours.
func ExampleCalendarWindow() {
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	clock := ratelimittest.NewClock(time.Date(2026, time.November, 1, 22, 0, 0, 0, newYork))
	limiter, err := ratelimit.NewCalendarWindow(2, ratelimit.Calendar{Period: ratelimit.CalendarDay, Location: newYork},
		ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for range 3 {
		d, _ := limiter.Decide(ctx, "customer", 1)
		fmt.Printf("allowed=%v remaining=%d day of %v, resets in %v\n", d.Allowed, d.Remaining, d.Policy.Window, d.ResetAfter)
	}
	clock.Advance(2 * time.Hour) // past midnight
	d, _ := limiter.Decide(ctx, "customer", 1)
	fmt.Printf("the next day: allowed=%v remaining=%d day of %v\n", d.Allowed, d.Remaining, d.Policy.Window)
	p := limiter.Policy()
	fmt.Printf("its Policy: %d per %v\n", p.Limit, p.Window)
	// Output:
	// allowed=true remaining=1 day of 25h0m0s, resets in 2h0m0s
	// allowed=true remaining=0 day of 25h0m0s, resets in 2h0m0s
	// allowed=false remaining=0 day of 25h0m0s, resets in 2h0m0s
	// the next day: allowed=true remaining=1 day of 24h0m0s
	// its Policy: 2 per 24h0m0s
}
