package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// maxJitter caps the random time Wait adds to a sleep.
const maxJitter = 250 * time.Millisecond

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
// Wait uses the system clock for its sleeps; l may use any clock.
func Wait(ctx context.Context, l Limiter, key string, n int) (Result, error) {
	if l == nil {
		return Result{}, errors.New("ratelimit: Wait: nil limiter")
	}
	for {
		res, err := l.Allow(ctx, key, n)
		if err != nil || res.Allowed {
			return res, err
		}
		wait := res.RetryAfter
		if wait <= 0 {
			// A denial always names a positive wait; guard a limiter that
			// does not, so this loop cannot spin.
			wait = time.Millisecond
		}
		sleep := wait + jitter(wait)
		if deadline, ok := ctx.Deadline(); ok {
			left := time.Until(deadline)
			if left < wait {
				return res, fmt.Errorf("ratelimit: Wait: %s until allowed is past the deadline: %w", wait, context.DeadlineExceeded)
			}
			sleep = min(sleep, left)
		}
		timer := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			timer.Stop()
			return res, fmt.Errorf("ratelimit: Wait: %w", ctx.Err())
		case <-timer.C:
		}
	}
}

// jitter returns a random duration in [0, min(wait/10, maxJitter)].
func jitter(wait time.Duration) time.Duration {
	return time.Duration(rand.Int64N(int64(min(wait/10, maxJitter)) + 1))
}
