package ratelimit

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGuardedCompositeNeverExceedsItsLimitInFlight(t *testing.T) {
	const (
		limit      = 3
		goroutines = 16
		calls      = 300
	)
	ctx := context.Background()
	// The clock stands still: no lease expires, so only releases free
	// units, and the counter sees every unit held.
	clock := ratelimittest.NewClock(epoch)
	slots, err := NewConcurrency(limit, time.Minute, WithClock(clock))
	require.NoError(t, err)
	rate, err := NewTokenBucket(PerSecond(1), goroutines*calls, WithClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "inflight", Limiter: slots}, Part{Name: "rate", Limiter: rate})
	require.NoError(t, err)
	g, err := NewGuard(c, GuardConfig{Timeout: time.Second, Clock: clock})
	require.NoError(t, err)

	var inFlight, most, allowed atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range calls {
				lease, d, err := g.Acquire(ctx, "k", 1)
				if err != nil || !d.Allowed {
					assert.NoError(t, err)
					runtime.Gosched()
					continue
				}
				now := inFlight.Add(1)
				for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
				}
				allowed.Add(1)
				runtime.Gosched()
				inFlight.Add(-1)
				assert.NoError(t, lease.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(limit), "never more than the limit in flight")
	assert.Positive(t, allowed.Load())
	assert.Equal(t, limit, peek(t, slots, "k").Remaining, "every unit came back")
	assert.Equal(t, goroutines*calls-int(allowed.Load()), peek(t, rate, "k").Remaining, "a rate unit per slot taken, none per denial")
}
