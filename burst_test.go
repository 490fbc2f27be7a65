package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A burst against a fixed window and against a per-minute GCRA, on every
// limiter each applies to.

func TestFixedWindowBurstOf25Against20Per30sWaitsForTheWindowEnd(t *testing.T) {
	// 25 requests at once against 20 per 30 s: the first 20 pass, the rest
	// are limited until the window ends.
	for _, sub := range windowSubjects {
		t.Run(sub.name, func(t *testing.T) {
			l, advance := sub.newLimiter(t, 20, 30*time.Second)
			ctx := context.Background()
			allowed := 0
			for i := 0; i < 25; i++ {
				res, err := l.Allow(ctx, "admin", 1)
				require.NoError(t, err)
				if res.Allowed {
					allowed++
				} else {
					assert.Equal(t, 30*time.Second, res.RetryAfter)
				}
			}
			assert.Equal(t, 20, allowed)

			advance(30*time.Second - time.Millisecond)
			res, err := l.Allow(ctx, "admin", 1)
			require.NoError(t, err)
			assert.False(t, res.Allowed, "limited until the window ends")
			assert.Equal(t, time.Millisecond, res.RetryAfter)

			advance(time.Millisecond)
			res, err = l.Allow(ctx, "admin", 1)
			require.NoError(t, err)
			assert.Equal(t, Result{Allowed: true, Limit: 20, Remaining: 19, ResetAfter: 30 * time.Second}, res)
		})
	}
}

func TestGCRA10PerMinuteAllowsABurstOf10ThenOneEvery6s(t *testing.T) {
	// 10 per minute: a burst of 10, then one every 6 s.
	for _, sub := range bucketSubjects {
		t.Run(sub.name, func(t *testing.T) {
			l, advance := sub.newLimiter(t, 10, time.Minute)
			ctx := context.Background()
			for i := 0; i < 10; i++ {
				res, err := l.Allow(ctx, "api", 1)
				require.NoError(t, err)
				require.True(t, res.Allowed, "request %d of the burst", i)
			}
			for i := 0; i < 5; i++ {
				res, err := l.Allow(ctx, "api", 1)
				require.NoError(t, err)
				assert.False(t, res.Allowed)
				assert.Equal(t, 6*time.Second, res.RetryAfter)
				advance(6 * time.Second)
				res, err = l.Allow(ctx, "api", 1)
				require.NoError(t, err)
				assert.True(t, res.Allowed, "one more every 6 s")
			}
		})
	}
}
