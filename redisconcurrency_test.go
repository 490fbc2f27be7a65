package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RedisConcurrency on miniredis, whose TIME the tests move.

func TestRedisConcurrencyHoldsAtMostItsLimitUntilReleased(t *testing.T) {
	ctx := context.Background()
	m, client, advance := miniredisClock(t)
	c, err := NewRedisConcurrency(client, 2, 10*time.Second)
	require.NoError(t, err)
	key := storedKey(c.KeyPrefix(), "k")

	a, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 1, 10*time.Second), d.Result)
	assert.True(t, a.Held())
	assert.Equal(t, 10*time.Second, a.TTL())
	assert.True(t, d.Policy.InFlight)
	advance(time.Second)
	b, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, 10*time.Second), d.Result)
	assert.Equal(t, 10*time.Second, m.TTL(key), "the key lasts until its latest lease expires")
	advance(time.Second)
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

	advance(9 * time.Second) // b expires
	_, err = b.Extend(ctx)
	require.ErrorIs(t, err, ErrLeaseExpired)
	require.ErrorIs(t, err, ErrCaller)
	require.NoError(t, b.Release(ctx), "releasing an expired lease changes nothing")
	a2, err = a2.Extend(ctx)
	require.NoError(t, err)
	_, d, _ = c.Acquire(ctx, "k", 0)
	assert.Equal(t, ok(2, 1, 10*time.Second), d.Result, "the extended lease holds for a new TTL")
	assert.Equal(t, 10*time.Second, m.TTL(key), "the key lasts until the extended lease expires")
	require.NoError(t, a2.Release(ctx))
	_, d, _ = c.Acquire(ctx, "k", 0)
	assert.Equal(t, ok(2, 2, 0), d.Result)
	assert.False(t, m.Exists(key), "a key whose last lease is released is deleted")
}

func TestRedisConcurrencyKeyExpiresWithItsLatestLease(t *testing.T) {
	ctx := context.Background()
	m, client, advance := miniredisClock(t)
	c, err := NewRedisConcurrency(client, 3, time.Second+500*time.Microsecond)
	require.NoError(t, err)
	key := storedKey(c.KeyPrefix(), "k")
	_, err = c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	advance(300 * time.Millisecond)
	_, err = c.Allow(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, 1001*time.Millisecond, m.TTL(key), "whole ms, rounded up")
	advance(time.Second) // the first has expired: a sweep is due
	res, err := c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 0, time.Second+500*time.Microsecond), res)
	fields, err := m.HKeys(key)
	require.NoError(t, err)
	assert.Len(t, fields, 3+2, "u, e, x and the two leases that hold: the expired one was swept")
	advance(2 * time.Second)
	assert.False(t, m.Exists(key), "the key expired with its last lease")
}

func TestRedisConcurrencyAllowHoldsUntilTheTTL(t *testing.T) {
	ctx := context.Background()
	_, client, advance := miniredisClock(t)
	c, err := NewRedisConcurrency(client, 1, time.Second)
	require.NoError(t, err)
	res, err := c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	res, _ = c.Allow(ctx, "k", 1)
	assert.Equal(t, no(1, 0, time.Second, time.Second), res)
	advance(time.Second)
	res, _ = c.Allow(ctx, "k", 1)
	assert.True(t, res.Allowed)
}

func TestRedisConcurrencyReleasesTwiceAfterExpiryAndOfAnotherLimiter(t *testing.T) {
	_, client, advance := miniredisClock(t)
	checkReleases(t, client, advance)
}

// checkReleases checks Release and Extend of leases released twice, after
// their expiry and by another limiter, on client, whose server's time
// advance moves (a real server's by waiting).
func checkReleases(t *testing.T, client redis.Scripter, advance func(time.Duration)) {
	t.Helper()
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	prefix := WithKeyPrefix("releases:" + t.Name() + ":")
	c1, err := NewRedisConcurrency(client, 1, ttl, prefix)
	require.NoError(t, err)
	c2, err := NewRedisConcurrency(client, 1, ttl, prefix) // the same keys
	require.NoError(t, err)

	l, d, err := c1.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, d, _ = c2.Acquire(ctx, "k", 1)
	assert.False(t, d.Allowed, "the lease is held for both limiters of the key")

	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx), "twice")
	require.NoError(t, (Lease{}).Release(ctx), "the zero lease holds nothing")
	l2, d, err := c2.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, l.Release(ctx), "a released lease does not release the next")
	_, d, _ = c1.Acquire(ctx, "k", 1)
	assert.False(t, d.Allowed)

	advance(ttl + 50*time.Millisecond)
	_, err = l2.Extend(ctx)
	require.ErrorIs(t, err, ErrLeaseExpired, "after its expiry")
	require.NoError(t, l2.Release(ctx), "after its expiry")
	l3, d, err := c1.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, l2.Release(ctx), "an expired lease does not release the next")
	_, d, _ = c2.Acquire(ctx, "k", 1)
	assert.False(t, d.Allowed)
	require.NoError(t, l3.Release(ctx))
	_, d, _ = c2.Acquire(ctx, "k", 0)
	assert.Equal(t, 1, d.Remaining)
}

func TestRedisConcurrencyRefusesAForeignKeyAndLeavesIt(t *testing.T) {
	ctx := context.Background()
	m, client, _ := miniredisClock(t)
	c, err := NewRedisConcurrency(client, 2, time.Second, WithKeyPrefix(""))
	require.NoError(t, err)
	k := func(key string) string { return storedKey(c.KeyPrefix(), key) } // a key's Redis key
	l, _, err := c.Acquire(ctx, "mine", 1)
	require.NoError(t, err)
	for _, tc := range []struct {
		key    string
		set    func()
		reason string
	}{
		{"list", func() { _, err := m.Lpush(k("list"), "x"); require.NoError(t, err) }, "neither a HASH nor a STRING"},
		{"string", func() { require.NoError(t, m.Set(k("string"), "1")); m.SetTTL(k("string"), time.Minute) }, `not a STRING "lease:expiry"`},
		{"one-unit-pair", func() { require.NoError(t, m.Set(k("one-unit-pair"), "l:1:99999999999999999")) }, `not a STRING "lease:expiry"`},
		{"other-fields", func() { m.HSet(k("other-fields"), "a", "1"); m.SetTTL(k("other-fields"), time.Minute) }, "not a HASH of u, e, x"},
		{"bad-u", func() { m.HSet(k("bad-u"), "u", "-1", "e", "1", "x", "2"); m.SetTTL(k("bad-u"), time.Minute) }, "not a HASH of u, e, x"},
	} {
		tc.set()
		before := m.Dump()
		_, d, err := c.Acquire(ctx, tc.key, 1)
		require.ErrorIs(t, err, ErrCorruptState, tc.key)
		assert.Contains(t, err.Error(), tc.reason, tc.key)
		assert.False(t, d.Allowed)
		assert.Equal(t, before, m.Dump(), "%s: left as it was", tc.key)
	}

	// A HASH whose lease fields disagree with u: refused when a call reads
	// them all (a denial reads every lease).
	m.HSet(k("disagrees"), "u", "2", "e", "1", "x", "99999999999999999", "l", "99999999999999999")
	m.SetTTL(k("disagrees"), time.Minute)
	before := m.Dump()
	_, _, err = c.Acquire(ctx, "disagrees", 1)
	require.ErrorIs(t, err, ErrCorruptState)
	assert.Equal(t, before, m.Dump())

	// A lease named on a key that is not the limiter's: Release and Extend
	// are refused too, and change nothing.
	m.Del(k("mine"))
	require.NoError(t, m.Set(k("mine"), "x"))
	m.SetTTL(k("mine"), time.Minute)
	require.ErrorIs(t, l.Release(ctx), ErrCorruptState)
	_, err = l.Extend(ctx)
	require.ErrorIs(t, err, ErrCorruptState)
	got, err := m.Get(k("mine"))
	require.NoError(t, err)
	assert.Equal(t, "x", got)
}

func TestRedisConcurrencyReleaseThatFailsIsABackendError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, client, _ := miniredisClock(t)
	c, err := NewRedisConcurrency(client, 1, time.Minute)
	require.NoError(t, err)
	l, _, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	m.SetError("LOADING Redis is loading the dataset in memory")
	err = l.Release(ctx)
	require.ErrorIs(t, err, ErrBackend)
	_, err = l.Extend(ctx)
	require.ErrorIs(t, err, ErrBackend)
	require.False(t, errors.Is(err, ErrLeaseExpired))
	m.SetError("")
	_, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the lease is still held")
	require.NoError(t, l.Release(ctx))
	_, d, _ = c.Acquire(ctx, "k", 1)
	assert.True(t, d.Allowed)
}

func TestRedisConcurrencyDataLostLosesItsLeases(t *testing.T) {
	ctx := context.Background()
	m, client, _ := miniredisClock(t)
	c, err := NewRedisConcurrency(client, 1, time.Minute)
	require.NoError(t, err)
	l, _, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	m.FlushAll() // what a restart without persistence does
	_, err = l.Extend(ctx)
	require.ErrorIs(t, err, ErrLeaseExpired)
	require.NoError(t, l.Release(ctx))
	_, d, _ := c.Acquire(ctx, "k", 1)
	assert.True(t, d.Allowed, "the unit is free at once")
}

func TestRedisConcurrencyKeyPrefixes(t *testing.T) {
	_, client, _ := miniredisClock(t)
	c, err := NewRedisConcurrency(client, 5, 30*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:inflight:5:30000000:", c.KeyPrefix())
	c, err = NewRedisConcurrency(client, 5, 30*time.Second, WithPolicyFunc(newPlanMap().f))
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:inflight:keyed:5:30000000:", c.KeyPrefix(), "a limiter built WithPolicyFunc: its constructor's policy")
	c, err = NewRedisConcurrency(client, 5, 30*time.Second, WithKeyPrefix("p:"))
	require.NoError(t, err)
	assert.Equal(t, "p:inflight:", c.KeyPrefix(), "the prefix given, and the name of the state")
	assert.Equal(t, Policy{Limit: 5, Window: 30 * time.Second}, c.Policy())
	var zero *RedisConcurrency
	assert.Equal(t, "", zero.KeyPrefix())
}

func TestRedisConcurrencyRefusesBadConfiguration(t *testing.T) {
	_, client, _ := miniredisClock(t)
	for name, build := range map[string]func() (*RedisConcurrency, error){
		"nil client":       func() (*RedisConcurrency, error) { return NewRedisConcurrency(nil, 1, time.Second) },
		"limit 0":          func() (*RedisConcurrency, error) { return NewRedisConcurrency(client, 0, time.Second) },
		"limit too big":    func() (*RedisConcurrency, error) { return NewRedisConcurrency(client, MaxInFlight+1, time.Second) },
		"ttl below 1ms":    func() (*RedisConcurrency, error) { return NewRedisConcurrency(client, 1, time.Microsecond) },
		"ttl not whole µs": func() (*RedisConcurrency, error) { return NewRedisConcurrency(client, 1, time.Second+1) },
		"max debt":         func() (*RedisConcurrency, error) { return NewRedisConcurrency(client, 1, time.Second, WithMaxDebt(1)) },
		"clock": func() (*RedisConcurrency, error) {
			return NewRedisConcurrency(client, 1, time.Second, WithClock(ratelimittest.NewClock(epoch)))
		},
	} {
		_, err := build()
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	var zero *RedisConcurrency
	_, _, err := zero.Acquire(context.Background(), "k", 1)
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

func TestRedisConcurrencyCallsAnsweredWithoutARoundTrip(t *testing.T) {
	c, err := NewRedisConcurrency(refusingScripter{t: t}, 2, time.Second)
	require.NoError(t, err)
	ctx := context.Background()
	_, _, err = c.Acquire(ctx, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
	_, d, err := c.Acquire(ctx, "k", 3)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.Equal(t, Result{Limit: 2}, d.Result)
	var nilCtx context.Context
	_, _, err = c.Acquire(nilCtx, "k", 1)
	require.ErrorIs(t, err, errNilContext)
}

func TestRedisConcurrencyReportsToItsHooks(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	hooks := &adjustRecorder{}
	c, err := NewRedisConcurrency(client, 1, time.Second, WithHooks(hooks), WithName("jobs"))
	require.NoError(t, err)
	l, _, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	_, _, err = c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	_, err = l.Extend(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, l.Release(ctx))
	_, err = l.Extend(ctx)
	require.ErrorIs(t, err, ErrLeaseExpired)
	require.NoError(t, c.Reset(ctx, "k"))

	hooks.mu.Lock()
	events := hooks.events
	hooks.mu.Unlock()
	require.Len(t, events, 2)
	assert.Equal(t, "jobs", events[0].Limiter)
	assert.Equal(t, l, events[0].Lease, "the lease the Acquire granted")
	assert.True(t, events[0].Policy.InFlight)
	assert.False(t, events[1].Lease.Held(), "a denial holds nothing")
	var ops []string
	for _, a := range hooks.adjustments {
		ops = append(ops, fmt.Sprintf("%v:%d/%d/%v", a.Op, a.Taken, a.Cost, a.Result.Allowed))
	}
	assert.Equal(t, []string{"extend:1/1/true", "release:1/0/true", "release:1/0/false", "extend:1/1/false", "reset:0/0/false"}, ops)
}

func TestRedisConcurrencyRetriedAcquireTakesItsUnitsOnce(t *testing.T) {
	// A client that retries a call whose reply was lost (go-redis retries
	// a read timeout) sends the same lease name again: its units count
	// once, and the retry is answered allowed, whether the key holds one
	// lease (a STRING) or several (a HASH).
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	c, err := NewRedisConcurrency(client, 3, 10*time.Second)
	require.NoError(t, err)
	retry := func() (Lease, Decision) {
		c.seq.Add(^uint64(0)) // the next lease gets the last one's name
		l, d, err := c.Acquire(ctx, "k", 1)
		require.NoError(t, err)
		return l, d
	}
	first, _, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	again, d := retry()
	assert.True(t, d.Allowed)
	assert.Equal(t, first, again)
	assert.Equal(t, 2, peek(t, c, "k").Remaining, "one lease of one unit, as a STRING")

	_, _, err = c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	_, d = retry()
	assert.True(t, d.Allowed)
	assert.Equal(t, 1, peek(t, c, "k").Remaining, "two leases, as a HASH")
	require.NoError(t, first.Release(ctx))
	assert.Equal(t, 2, peek(t, c, "k").Remaining)
}
