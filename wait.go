package ratelimit

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// maxJitter caps the random time Wait adds to a sleep.
const maxJitter = 250 * time.Millisecond

// minWait is the shortest time Wait sleeps after a denial, so that a limiter
// whose denial names no positive RetryAfter cannot make it spin.
const minWait = time.Millisecond

// errNilLimiter is returned by Wait for a nil Limiter, or an interface holding
// a nil pointer such as (*TokenBucket)(nil).
var errNilLimiter = fmt.Errorf("%w: Wait: nil limiter", ErrInvalidConfig)

// Wait blocks until l allows n for key, sleeping RetryAfter between tries.
// Each sleep is lengthened by a random jitter of up to a tenth of it (at most
// 250 ms), so that many waiters denied together do not all come back at the
// same instant.
//
// It returns at once with the error of a call that fails, such as one wrapping
// ErrCostExceedsLimit or ErrInvalidCost, and with an error wrapping
// context.DeadlineExceeded when ctx's deadline comes before the wait would
// end, without sleeping in vain. When ctx is cancelled during a sleep it
// returns an error wrapping ctx.Err(). The Result is that of the last try.
// A nil ctx or a nil l (an interface holding a nil pointer too) is an error,
// and l is not called. Wait uses the system clock for its sleeps; l may use
// any clock.
func Wait(ctx context.Context, l Limiter, key string, n int) (Result, error) {
	return waitWith(ctx, l, key, n, systemWaitTime)
}

// waitTime is the time Wait depends on: its clock, its sleeps and its jitter.
// Wait uses systemWaitTime; tests give waitWith a fake one.
type waitTime struct {
	// now returns the current time, read against ctx's deadline.
	now func() time.Time
	// sleep returns nil after d, or ctx.Err() as soon as ctx is done.
	sleep func(ctx context.Context, d time.Duration) error
	// jitter returns a random duration in [0, bound].
	jitter func(bound time.Duration) time.Duration
}

// systemWaitTime is the waitTime of the system clock and real timers.
var systemWaitTime = waitTime{now: time.Now, sleep: sleepContext, jitter: randomJitter}

// waitWith is Wait with its time taken from wt.
func waitWith(ctx context.Context, l Limiter, key string, n int, wt waitTime) (Result, error) {
	if ctx == nil {
		return Result{}, fmt.Errorf("ratelimit: Wait: %w", errNilContext)
	}
	if isNil(l) {
		return Result{}, errNilLimiter
	}
	for {
		res, err := l.Allow(ctx, key, n)
		if err != nil || res.Allowed {
			return res, err
		}
		wait := max(res.RetryAfter, minWait)
		// Saturated, so that a wait near the largest Duration cannot wrap
		// around into a busy loop.
		sleep := wait + min(wt.jitter(min(wait/10, maxJitter)), math.MaxInt64-wait)
		if deadline, ok := ctx.Deadline(); ok {
			left := deadline.Sub(wt.now())
			if left < wait {
				return res, callerErr(fmt.Errorf("ratelimit: Wait: %s until allowed is past the deadline: %w", wait, context.DeadlineExceeded))
			}
			sleep = min(sleep, left)
		}
		if err := wt.sleep(ctx, sleep); err != nil {
			return res, callerErr(fmt.Errorf("ratelimit: Wait: %w", err))
		}
	}
}

// sleepContext sleeps for d on a real timer. It returns nil when d has
// passed, or ctx.Err() as soon as ctx is done.
func sleepContext(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// randomJitter returns a uniformly random duration in [0, bound]; 0 for a
// bound <= 0.
func randomJitter(bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(bound) + 1))
}
