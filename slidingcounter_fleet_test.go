package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFallbackMirrorsARedisSlidingCounterOnTheShare(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	fleets := []*Fleet{newTestFleet(t, m, "a"), newTestFleet(t, m, "b")}
	for _, f := range append(fleets, fleets[0]) {
		require.NoError(t, f.Beat(ctx))
	}
	require.Equal(t, 2, fleets[0].Live())
	backend, err := NewRedisSlidingCounter(client, 10, time.Second)
	require.NoError(t, err)
	clock := ratelimittest.NewClock(epoch)
	fb, err := fleets[0].Fallback(backend, WithClock(clock))
	require.NoError(t, err)
	require.IsType(t, &SlidingCounter{}, fb)
	ps, err := fb.(Decider).Policies(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, Policy{Limit: 5, Window: time.Second}, ps[0].Policy, "half of 10 a second")
	res, err := fb.Allow(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 0, 2*time.Second), res)
	clock.Advance(1500 * ms)
	res, err = fb.Allow(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 0, 1500*ms), res, "the share slides: 5 weigh ⌈2.5⌉ = 3 half a window on, and 2 fit")
}
