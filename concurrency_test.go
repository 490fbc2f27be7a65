package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConcurrencyHoldsAtMostItsLimitUntilReleased(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	c, err := NewConcurrency(2, 10*time.Second, WithClock(clock))
	require.NoError(t, err)

	a, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 1, 10*time.Second), d.Result)
	assert.True(t, a.Held())
	assert.True(t, d.Policy.InFlight)
	clock.Advance(time.Second)
	b, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, 10*time.Second), d.Result)
	clock.Advance(time.Second)
	none, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, no(2, 0, 8*time.Second, 9*time.Second), d.Result, "waits for the earliest lease to expire")
	assert.False(t, none.Held())
	_, d, _ = c.Acquire(ctx, "k", 2)
	assert.Equal(t, no(2, 0, 9*time.Second, 9*time.Second), d.Result, "two units wait for both leases")

	require.NoError(t, a.Release(ctx))
	require.NoError(t, a.Release(ctx), "a second release changes nothing")
	_, d, _ = c.Acquire(ctx, "k", 0)
	assert.Equal(t, ok(2, 1, 9*time.Second), d.Result)
	a2, d, _ := c.Acquire(ctx, "k", 1)
	assert.True(t, d.Allowed)
	require.NoError(t, a.Release(ctx), "a stale lease does not release its successor")
	_, d, _ = c.Acquire(ctx, "k", 1)
	assert.False(t, d.Allowed)

	clock.Advance(9 * time.Second) // b expires
	_, err = b.Extend(ctx)
	require.ErrorIs(t, err, ErrLeaseExpired)
	require.ErrorIs(t, err, ErrCaller)
	require.NoError(t, b.Release(ctx), "releasing an expired lease changes nothing")
	a2, err = a2.Extend(ctx)
	require.NoError(t, err)
	_, d, _ = c.Acquire(ctx, "k", 0)
	assert.Equal(t, ok(2, 1, 10*time.Second), d.Result, "the extended lease holds for a new TTL")
	require.NoError(t, a2.Release(ctx))
	_, d, _ = c.Acquire(ctx, "k", 0)
	assert.Equal(t, ok(2, 2, 0), d.Result)
}

func TestConcurrencyLeaseHoldsUntilItIsReleased(t *testing.T) {
	ctx := context.Background()
	c1, err := NewConcurrency(1, time.Second)
	require.NoError(t, err)
	l, _, err := c1.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	_, d, _ := c1.Acquire(ctx, "k", 1)
	assert.False(t, d.Allowed, "the lease is still held")
	require.NoError(t, l.Release(ctx))
	require.NoError(t, (Lease{}).Release(ctx), "the zero lease holds nothing")
	_, d, _ = c1.Acquire(ctx, "k", 1)
	assert.True(t, d.Allowed)
}

func TestConcurrencyAllowHoldsUntilTheTTL(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	c, err := NewConcurrency(1, time.Second, WithClock(clock))
	require.NoError(t, err)
	res, err := c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	res, _ = c.Allow(ctx, "k", 1)
	assert.Equal(t, no(1, 0, time.Second, time.Second), res)
	clock.Advance(time.Second)
	res, _ = c.Allow(ctx, "k", 1)
	assert.True(t, res.Allowed)
}

func TestConcurrencyRefusesBadConfiguration(t *testing.T) {
	for name, build := range map[string]func() (*Concurrency, error){
		"limit 0":          func() (*Concurrency, error) { return NewConcurrency(0, time.Second) },
		"limit too big":    func() (*Concurrency, error) { return NewConcurrency(MaxInFlight+1, time.Second) },
		"ttl below 1ms":    func() (*Concurrency, error) { return NewConcurrency(1, time.Microsecond) },
		"ttl not whole µs": func() (*Concurrency, error) { return NewConcurrency(1, time.Second+1) },
		"max debt":         func() (*Concurrency, error) { return NewConcurrency(1, time.Second, WithMaxDebt(1)) },
	} {
		_, err := build()
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	var zero *Concurrency
	_, _, err := zero.Acquire(context.Background(), "k", 1)
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func BenchmarkConcurrencyAcquireReleaseHotKey(b *testing.B) {
	c, err := NewConcurrency(100, time.Minute)
	require.NoError(b, err)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, _, _ := c.Acquire(ctx, "hot", 1)
		_ = l.Release(ctx)
	}
}

func TestALeaseRefusesANilContextAtEveryLayer(t *testing.T) {
	c, err := NewConcurrency(1, time.Second)
	require.NoError(t, err)
	g, err := NewGuard(c, GuardConfig{})
	require.NoError(t, err)
	l, _, err := g.Acquire(context.Background(), "k", 1)
	require.NoError(t, err)
	var nilCtx context.Context
	assert.ErrorIs(t, l.Release(nilCtx), ErrCaller, "a lease acquired through a Guard")
	_, err = l.Extend(nilCtx)
	assert.ErrorIs(t, err, ErrCaller)
	_, d, _ := c.Acquire(context.Background(), "k", 1)
	assert.False(t, d.Allowed, "the lease is still held")
}
