package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fleet.Fallback of a RedisConcurrency, alone or as a Composite's part: a
// Concurrency of this replica's share of each key's limit, with the same
// lease TTL.

// threeReplicas returns the first of three replicas of one fleet on m,
// each counted.
func threeReplicas(t *testing.T) (*Fleet, func(time.Duration)) {
	t.Helper()
	m, _, step := miniredisClock(t)
	ctx := context.Background()
	a, b, c := newTestFleet(t, m, "a"), newTestFleet(t, m, "b"), newTestFleet(t, m, "c")
	for _, f := range []*Fleet{a, b, c, a} {
		require.NoError(t, f.Beat(ctx))
	}
	require.Equal(t, 3, a.Live())
	return a, step
}

func TestFallbackOfARedisConcurrencyHoldsTheShareWithTheSameTTL(t *testing.T) {
	ctx := context.Background()
	fleet, _ := threeReplicas(t)
	_, client, _ := miniredisClock(t)
	plans := func(_ context.Context, key string) (Policy, error) {
		switch key {
		case "pro":
			return Policy{Limit: 20, Window: 5 * time.Second}, nil
		case "basic":
			return Policy{Limit: 2, Window: 2 * time.Second}, nil
		}
		return Policy{}, nil
	}
	backend, err := NewRedisConcurrency(client, 10, 30*time.Second, WithPolicyFunc(plans))
	require.NoError(t, err)
	clock := ratelimittest.NewClock(epoch)
	h := &recordingHooks{}
	fb, err := fleet.Fallback(backend, WithClock(clock), WithHooks(h), WithName("fallback"))
	require.NoError(t, err)
	slots, ok := fb.(*Concurrency)
	require.True(t, ok, "%T", fb)

	for key, want := range map[string]Policy{
		"free":  {Limit: 3, Window: 30 * time.Second}, // 10 ÷ 3, rounded down
		"pro":   {Limit: 6, Window: 5 * time.Second},  // 20 ÷ 3
		"basic": {Limit: 1, Window: 2 * time.Second},  // 2 ÷ 3, at least 1
	} {
		ps, err := slots.Policies(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, []NamedPolicy{{Name: "default", Policy: want, InFlight: true}}, ps, key)
		var leases []Lease
		for range want.Limit {
			lease, d, err := slots.Acquire(ctx, key, 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, key)
			assert.Equal(t, want.Window, lease.TTL(), "%s: the backend's TTL, not stretched", key)
			leases = append(leases, lease)
		}
		_, d, err := slots.Acquire(ctx, key, 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "%s: the share is held", key)
		require.NoError(t, leases[0].Release(ctx))
		lease, d, err := slots.Acquire(ctx, key, 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "%s: a release frees a slot of the share", key)
		assert.Equal(t, "fallback", h.last().Limiter)
		assert.Equal(t, lease, h.last().Lease)
	}
}

func TestFallbackOfACompositeWithARedisConcurrencyPartHoldsTheShare(t *testing.T) {
	ctx := context.Background()
	fleet, _ := threeReplicas(t)
	_, client, _ := miniredisClock(t)
	slots, err := NewRedisConcurrency(client, 6, time.Minute)
	require.NoError(t, err)
	rate, err := NewRedisGCRA(client, 60, time.Minute, WithMaxDebt(0))
	require.NoError(t, err)
	backend, err := NewComposite(Part{Name: "inflight", Limiter: slots}, Part{Name: "rpm", Limiter: rate})
	require.NoError(t, err)

	fb, err := fleet.Fallback(backend, WithClock(ratelimittest.NewClock(epoch)), WithMaxDebt(2))
	require.NoError(t, err, "WithMaxDebt applies to the rate parts, not to the concurrency part")
	c, ok := fb.(*Composite)
	require.True(t, ok, "%T", fb)
	assert.IsType(t, &Concurrency{}, c.parts[0].Limiter)
	assert.Equal(t, debtCap(2), (*schedule)(c.parts[1].Limiter.(*GCRA)).debt, "the rate part's bound on debt")
	ps, err := c.Policies(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []NamedPolicy{
		{Name: "inflight", Policy: Policy{Limit: 2, Window: time.Minute}, InFlight: true},
		{Name: "rpm", Policy: Policy{Limit: 20, Window: time.Minute}},
	}, ps)

	first, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, time.Minute, first.TTL())
	_, d, err = c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, d, err = c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "2 in flight, a third of 6")
	assert.Equal(t, "inflight", d.Policy.Name)
	require.NoError(t, first.Release(ctx))
	_, d, err = c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)

	_, err = fleet.Fallback(slots, WithMaxDebt(2))
	require.ErrorIs(t, err, ErrInvalidConfig, "a concurrency mirror alone has no debt")
	_, err = fleet.Fallback(&RedisConcurrency{})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestGuardFailsOverARedisCompositeWithUnitsInFlightToTheFleetsShare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fleet, _ := threeReplicas(t)
	m, client, _ := miniredisClock(t)
	slots, err := NewRedisConcurrency(client, 6, time.Minute)
	require.NoError(t, err)
	rate, err := NewRedisFixedWindow(client, 90, time.Minute)
	require.NoError(t, err)
	backend, err := NewComposite(Part{Name: "inflight", Limiter: slots}, Part{Name: "rpm", Limiter: rate})
	require.NoError(t, err)
	fb, err := fleet.Fallback(backend, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailOver, Fallback: fb})
	require.NoError(t, err)

	held, d, err := g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, FromBackend, d.Source)

	m.SetError("LOADING the server is away")
	var leases []Lease
	for range 2 {
		lease, d, err := g.Acquire(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, FromFallback, d.Source)
		leases = append(leases, lease)
	}
	_, d, err = g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "this replica's share: 2 of 6 in flight")
	assert.Equal(t, FromFallback, d.Source)

	m.SetError("")
	require.NoError(t, leases[0].Release(ctx), "the fallback's lease, released by the fallback")
	require.NoError(t, held.Release(ctx), "the backend's lease, released by the backend")
	assert.Equal(t, 6, peek(t, slots, "k").Remaining)
}
