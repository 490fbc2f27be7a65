// Package pace holds what the waits of package ratelimit (Wait) and of
// package outbound share: a sleep on a real timer that ends with its
// context, and a random jitter. Its functions are safe for concurrent use.
package pace

import (
	"context"
	"math/rand/v2"
	"time"
)

// Sleep sleeps for d on a real timer. It returns nil when d has passed, or
// ctx.Err() as soon as ctx is done.
func Sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// Jitter returns a uniformly random duration in [0, bound]; 0 for a bound
// <= 0.
func Jitter(bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(bound) + 1))
}
