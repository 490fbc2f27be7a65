package ratelimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flakyConcurrency is a concurrency limiter whose store can go down, as a
// Redis one's does: while down, every call fails with an error of class
// ErrBackend, Release and Extend included, except Policies, which asks
// nothing of the store. It grants its own leases, kept by an in-process
// Concurrency.
type flakyConcurrency struct {
	c    *Concurrency
	down atomic.Bool
}

var _ Acquirer = (*flakyConcurrency)(nil)

func (f *flakyConcurrency) fail() error {
	if f.down.Load() {
		return fmt.Errorf("%w: %w", ErrBackend, errDown)
	}
	return nil
}

// own returns the Concurrency's lease l as f's.
func (f *flakyConcurrency) own(l Lease) Lease {
	if l.holder != nil {
		l.holder = f
	}
	return l
}

// inner returns f's lease l as the Concurrency's.
func (f *flakyConcurrency) inner(l Lease) Lease {
	l.holder = f.c
	return l
}

func (f *flakyConcurrency) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := f.Decide(ctx, key, n)
	return d.Result, err
}

func (f *flakyConcurrency) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if err := f.fail(); err != nil {
		return Decision{}, err
	}
	return f.c.Decide(ctx, key, n)
}

func (f *flakyConcurrency) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	return f.c.Policies(ctx, key)
}

func (f *flakyConcurrency) Acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	if err := f.fail(); err != nil {
		return Lease{}, Decision{}, err
	}
	l, d, err := f.c.Acquire(ctx, key, n)
	return f.own(l), d, err
}

func (f *flakyConcurrency) releaseLease(ctx context.Context, l Lease) error {
	if err := f.fail(); err != nil {
		return err
	}
	return f.c.releaseLease(ctx, f.inner(l))
}

func (f *flakyConcurrency) extendLease(ctx context.Context, l Lease) (Lease, error) {
	if err := f.fail(); err != nil {
		return l, err
	}
	l, err := f.c.extendLease(ctx, f.inner(l))
	return f.own(l), err
}

func TestGuardFailsOverLeasesToAnInProcessFallbackAndBack(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	inner, err := NewConcurrency(2, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	backend := &flakyConcurrency{c: inner}
	fallback, err := NewConcurrency(1, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	h := &adjustRecorder{}
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailOver, Fallback: fallback, Hooks: h, Clock: clock})
	require.NoError(t, err)

	before, d, err := g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	require.True(t, before.Held())

	backend.down.Store(true)
	clock.Advance(time.Second)
	over, d, err := g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFallback, d.Source)
	assert.True(t, d.Allowed)
	assert.Equal(t, NamedPolicy{Name: "default", Policy: Policy{Limit: 2, Window: 10 * time.Second}, InFlight: true}, d.Policy, "the backend's policy is shown")
	require.True(t, over.Held())
	assert.False(t, h.last().Lease.Held(), "the fallback, not the Guard, reports the lease it granted")
	assert.ErrorIs(t, h.last().BackendErr, ErrBackend)
	assert.Equal(t, 0, peek(t, fallback, "k").Remaining, "the fallback holds the unit")
	_, d, err = g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the fallback's one unit is taken")
	assert.Equal(t, FromFallback, d.Source)
	assert.Equal(t, 10*time.Second, d.RetryAfter)

	// Releases and extends are never answered by the policy: a backend
	// lease's fail while the backend is down, and a fallback lease's go
	// to the fallback.
	err = before.Release(ctx)
	require.ErrorIs(t, err, ErrBackend)
	_, err = before.Extend(ctx)
	require.ErrorIs(t, err, ErrBackend)
	over, err = over.Extend(ctx)
	require.NoError(t, err)

	// Back up: the backend, which still counts the lease it granted,
	// allows its limit; the fallback's lease is counted by the fallback
	// alone, until it is released or expires.
	backend.down.Store(false)
	clock.Advance(time.Second) // 2 s
	after, d, err := g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.True(t, d.Allowed)
	_, d, err = g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the backend's limit: its own two leases")
	held := (2 - peek(t, inner, "k").Remaining) + (1 - peek(t, fallback, "k").Remaining)
	assert.Equal(t, 3, held, "in flight: the backend's limit plus the fallback's lease")
	over, err = over.Extend(ctx)
	require.NoError(t, err, "the fallback renews its own lease after recovery")
	clock.Advance(10*time.Second - 1) // just before 12 s, the renewed lease's expiry
	assert.Equal(t, 0, peek(t, fallback, "k").Remaining)
	clock.Advance(1)
	assert.Equal(t, 1, peek(t, fallback, "k").Remaining, "one TTL after its last extend, the fallback holds nothing")
	require.NoError(t, over.Release(ctx), "releasing an expired lease changes nothing")
	require.NoError(t, after.Release(ctx))
	require.NoError(t, before.Release(ctx), "expired at 10 s")
	assert.Equal(t, 2, peek(t, inner, "k").Remaining)
}

func TestGuardFailsOpenAndClosedWithoutLeases(t *testing.T) {
	ctx := context.Background()
	inner, err := NewConcurrency(2, 10*time.Second)
	require.NoError(t, err)
	backend := &flakyConcurrency{c: inner}
	backend.down.Store(true)
	for _, tc := range []struct {
		policy  FailurePolicy
		allowed bool
		source  Source
	}{
		{FailOpen, true, FromFailOpen},
		{FailClosed, false, FromFailClosed},
	} {
		g, err := NewGuard(backend, GuardConfig{OnFailure: tc.policy})
		require.NoError(t, err)
		lease, d, err := g.Acquire(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, tc.allowed, d.Allowed)
		assert.Equal(t, tc.source, d.Source)
		assert.False(t, lease.Held(), "nothing holds a unit for it")
		assert.Equal(t, 2, d.Limit)
		assert.True(t, d.Policy.InFlight)
	}
}

func TestGuardReleaseErrorsDoNotCountTowardTheBreaker(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	inner, err := NewConcurrency(2, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	backend := &flakyConcurrency{c: inner}
	g, err := NewGuard(backend, GuardConfig{BreakerFailures: 1, BreakerCoolDown: time.Second, Clock: clock})
	require.NoError(t, err)
	lease, _, err := g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	backend.down.Store(true)
	require.ErrorIs(t, lease.Release(ctx), ErrBackend)
	assert.Equal(t, BreakerClosed, g.BreakerState())
	backend.down.Store(false)
	require.NoError(t, lease.Release(ctx))
	assert.Equal(t, 2, peek(t, inner, "k").Remaining)
}

func TestDecoratorsOverRateLimitersAcquireAsTheyDecide(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	bucket, err := NewTokenBucket(PerSecond(1), 1, WithClock(clock))
	require.NoError(t, err)
	cache, err := NewDenyCache(bucket, DenyCacheConfig{Clock: clock})
	require.NoError(t, err)
	shadow, err := NewShadow(cache, ShadowConfig{Enforce: true, Clock: clock})
	require.NoError(t, err)
	g, err := NewGuard(shadow, GuardConfig{Clock: clock})
	require.NoError(t, err)

	lease, d, err := g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.False(t, lease.Held(), "a rate limiter holds nothing in flight")
	_, d, err = g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.False(t, d.Allowed)
	_, d, err = g.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromDenyCache, d.Source, "a rate limiter's denial is remembered, Acquire or not")
	assert.Equal(t, time.Second, d.RetryAfter)
	require.NoError(t, lease.Release(ctx))
	_, err = lease.Extend(ctx)
	require.NoError(t, err)
}
