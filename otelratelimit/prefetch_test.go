package otelratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// TestAPrefetchRecordsEachCallOnceAndItsBackendRecordsTheTakes gives one
// Hooks to a Prefetch (PrefetchConfig.Hooks, named "prefetch") and to its
// backend (WithHooks, named "shared"), and checks what each series holds:
// the Prefetch records one decision per call, whether spent from a block or
// forwarded, and every Refund, Settle and Reset made through it, whether
// its block absorbed it or it forwarded it; the backend records the calls
// it decided (the forwarded call and the take, one decision of the block's
// size), the adjustments the Prefetch forwarded, and the Prefetch's
// give-back on Close as a Refund of the units given back, which the
// Prefetch does not record. No lease is counted held: a Prefetch's Acquire
// holds nothing.
func TestAPrefetchRecordsEachCallOnceAndItsBackendRecordsTheTakes(t *testing.T) {
	for _, c := range []struct {
		name string
		// build returns the backend, reporting to h as "shared".
		build func(c ratelimit.Clock, h ratelimit.Hooks) (ratelimit.Limiter, error)
		// givenBack is what Close gives back of the block of 4: a
		// bucket's loses its first unit to the give-back's grace (50 ms),
		// a window's holds until the window ends.
		givenBack int64
	}{
		{"TokenBucket", func(c ratelimit.Clock, h ratelimit.Hooks) (ratelimit.Limiter, error) {
			return ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 16, ratelimit.WithClock(c), ratelimit.WithHooks(h), ratelimit.WithName("shared"))
		}, 3},
		{"GCRA", func(c ratelimit.Clock, h ratelimit.Hooks) (ratelimit.Limiter, error) {
			return ratelimit.NewGCRA(16, 16*time.Second, ratelimit.WithClock(c), ratelimit.WithHooks(h), ratelimit.WithName("shared"))
		}, 3},
		{"FixedWindow", func(c ratelimit.Clock, h ratelimit.Hooks) (ratelimit.Limiter, error) {
			return ratelimit.NewFixedWindow(16, time.Minute, ratelimit.WithClock(c), ratelimit.WithHooks(h), ratelimit.WithName("shared"))
		}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, reader := newHooks(t)
			ctx := context.Background()
			backend, err := c.build(ratelimittest.NewClock(epoch), h)
			require.NoError(t, err)
			l, err := ratelimit.NewPrefetch(backend, ratelimit.PrefetchConfig{
				HotCalls: 1, MinBlock: 4, MaxShare: 2, Hooks: h, Name: "prefetch",
			})
			require.NoError(t, err)

			// The first call is forwarded (the Prefetch learns the key's
			// policy), the second takes a block of 4 and spends 1, the
			// next three spend the rest.
			for range 5 {
				d, err := l.Decide(ctx, "user:1", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			_, err = l.Refund(ctx, "user:1", 1) // the block takes it back
			require.NoError(t, err)
			_, err = l.Settle(ctx, "user:1", 1, 2) // spent from the block
			require.NoError(t, err)
			_, err = l.Refund(ctx, "user:1", 10) // 4 to the block, 6 forwarded
			require.NoError(t, err)
			require.NoError(t, l.Close(ctx)) // gives the block back
			require.NoError(t, l.Reset(ctx, "user:1"))

			got := collect(t, reader)
			assert.Equal(t, map[string]int64{
				"ratelimit.limiter=prefetch,ratelimit.outcome=allowed,ratelimit.source=backend": 5,
				"ratelimit.limiter=shared,ratelimit.outcome=allowed,ratelimit.source=backend":   2,
			}, sums(t, got[otelratelimit.DecisionsName]), "one decision per call; the backend's: the forwarded call and the take")
			assert.Equal(t, map[string]uint64{
				"ratelimit.limiter=prefetch,ratelimit.outcome=allowed,ratelimit.source=backend": 5,
				"ratelimit.limiter=shared,ratelimit.outcome=allowed,ratelimit.source=backend":   2,
			}, counts(t, got[otelratelimit.DurationName]))
			assert.Equal(t, map[string]int64{
				"ratelimit.limiter=prefetch,ratelimit.operation=refund,ratelimit.outcome=ok": 2,
				"ratelimit.limiter=prefetch,ratelimit.operation=settle,ratelimit.outcome=ok": 1,
				"ratelimit.limiter=prefetch,ratelimit.operation=reset,ratelimit.outcome=ok":  1,
				"ratelimit.limiter=shared,ratelimit.operation=refund,ratelimit.outcome=ok":   2,
				"ratelimit.limiter=shared,ratelimit.operation=reset,ratelimit.outcome=ok":    1,
			}, sums(t, got[otelratelimit.AdjustmentsName]), "the backend's: the forwarded Refund, the give-back and the Reset")
			assert.Equal(t, map[string]int64{
				"ratelimit.limiter=prefetch,ratelimit.operation=refund,ratelimit.units=taken": 1 + 10,
				"ratelimit.limiter=prefetch,ratelimit.operation=settle,ratelimit.units=taken": 1,
				"ratelimit.limiter=prefetch,ratelimit.operation=settle,ratelimit.units=cost":  2,
				"ratelimit.limiter=shared,ratelimit.operation=refund,ratelimit.units=taken":   6 + c.givenBack,
			}, sums(t, got[otelratelimit.AdjustmentUnitsName]))
			assert.NotContains(t, got, otelratelimit.LeasesHeldName, "a Prefetch's Acquire holds nothing")
		})
	}
}

// TestADeniedTakeIsADenialOfTheBackendOnly: a take the backend denies is
// recorded as a denial by the backend's Hooks, although the call that
// needed the block is then decided by the backend, and allowed: the
// callers' denials are the Prefetch's series, not the backend's.
func TestADeniedTakeIsADenialOfTheBackendOnly(t *testing.T) {
	h, reader := newHooks(t)
	ctx := context.Background()
	backend, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 4, ratelimit.WithClock(ratelimittest.NewClock(epoch)),
		ratelimit.WithHooks(h), ratelimit.WithName("shared"))
	require.NoError(t, err)
	l, err := ratelimit.NewPrefetch(backend, ratelimit.PrefetchConfig{HotCalls: 1, MinBlock: 2, MaxShare: 2, Hooks: h, Name: "prefetch"})
	require.NoError(t, err)

	// Forwarded (3 left); a take of 2 (1 left) spent by two calls; a take
	// of 2 denied, then the call forwarded and allowed (0 left); the last
	// forwarded and denied.
	var allowed []bool
	for range 5 {
		d, err := l.Decide(ctx, "user:1", 1)
		require.NoError(t, err)
		allowed = append(allowed, d.Allowed)
	}
	assert.Equal(t, []bool{true, true, true, true, false}, allowed)

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=prefetch,ratelimit.outcome=allowed,ratelimit.source=backend": 4,
		"ratelimit.limiter=prefetch,ratelimit.outcome=denied,ratelimit.source=backend":  1,
		"ratelimit.limiter=shared,ratelimit.outcome=allowed,ratelimit.source=backend":   3,
		"ratelimit.limiter=shared,ratelimit.outcome=denied,ratelimit.source=backend":    2,
	}, sums(t, got[otelratelimit.DecisionsName]))
}
