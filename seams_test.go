package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// TestEveryErrorIsOfOneClass: the sentinels of the caller's mistakes are of
// class ErrCaller, a key's data of ErrCorruptState, and a Redis that
// cannot be reached of ErrBackend; no error is of two classes.
func TestEveryErrorIsOfOneClass(t *testing.T) {
	classes := []error{ErrCaller, ErrCorruptState, ErrBackend}
	classOf := func(err error) []error {
		var in []error
		for _, c := range classes {
			if errors.Is(err, c) {
				in = append(in, c)
			}
		}
		return in
	}
	for _, sentinel := range []error{ErrInvalidConfig, ErrInvalidCost, ErrCostExceedsLimit, ErrPolicy, ErrKeysApart} {
		assert.Equal(t, []error{ErrCaller}, classOf(sentinel), "%v", sentinel)
	}

	ctx := context.Background()
	b, err := NewTokenBucket(5, 1)
	require.NoError(t, err)
	_, err = b.Allow(ctx, "k", -1)
	assert.Equal(t, []error{ErrCaller}, classOf(err))
	_, err = b.Allow(ctx, "k", 6)
	assert.Equal(t, []error{ErrCaller}, classOf(err))

	m, client, _ := redistest.Miniredis(t, time.Unix(1_700_000_000, 0))
	rb, err := NewRedisTokenBucket(client, 5, 1)
	require.NoError(t, err)
	require.NoError(t, m.Set(rb.KeyPrefix()+"foreign", "x"))
	_, err = rb.Allow(ctx, "foreign", 1)
	assert.Equal(t, []error{ErrCorruptState}, classOf(err))
	m.Close()
	_, err = rb.Allow(ctx, "k", 1)
	assert.Equal(t, []error{ErrBackend}, classOf(err), "Redis is down: %v", err)
}

// TestOneClientsKeysOnAClusterDoNotOpenTheBreakerForEveryone: a Composite
// call whose parts' keys fall in different hash slots is the caller's
// mistake (ErrKeysApart): a Guard returns it and does not count it, so a
// well-formed key is still decided by the backend.
func TestOneClientsKeysOnAClusterDoNotOpenTheBreakerForEveryone(t *testing.T) {
	client := redistest.StartCluster(t, 3).Client(t)
	ctx := context.Background()
	users, err := NewRedisGCRA(client, 50, time.Minute)
	require.NoError(t, err)
	tenants, err := NewRedisGCRA(client, 300, time.Minute)
	require.NoError(t, err)
	tenantOf := func(key string) string { // "{good}:alice" -> "{good}"
		if i := strings.IndexByte(key, ':'); i >= 0 {
			return key[:i]
		}
		return key
	}
	c, err := NewComposite(
		Part{Name: "user", Limiter: users},
		Part{Name: "tenant", Limiter: tenants, Key: tenantOf},
	)
	require.NoError(t, err)
	fallback, err := NewTokenBucket(1000, 1000)
	require.NoError(t, err)
	g, err := NewGuard(c, GuardConfig{OnFailure: FailOver, Fallback: fallback, BreakerFailures: 3, BreakerCoolDown: time.Minute})
	require.NoError(t, err)

	for _, key := range []string{"evil:u1", "evil:u2", "evil:u3", "evil:u4"} {
		d, err := g.Decide(ctx, key, 1)
		require.Error(t, err, key)
		assert.ErrorIs(t, err, ErrKeysApart)
		assert.ErrorIs(t, err, ErrCaller)
		assert.NotErrorIs(t, err, ErrBackend)
		assert.False(t, d.Allowed)
	}
	assert.Equal(t, BreakerClosed, g.BreakerState())
	d, err := g.Decide(ctx, "{good}:alice", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.True(t, d.Allowed)
}

// downComposite returns a Composite of "requests" (PerCall, 30 a minute)
// and "tokens" (20 000 a minute) on a Redis that is down.
func downComposite(t *testing.T) *Composite {
	t.Helper()
	m, client, _ := redistest.Miniredis(t, time.Unix(1_700_000_000, 0))
	requests, err := NewRedisGCRA(client, 30, time.Minute)
	require.NoError(t, err)
	tokens, err := NewRedisGCRA(client, 20000, time.Minute)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "requests", Limiter: requests, PerCall: true}, Part{Name: "tokens", Limiter: tokens})
	require.NoError(t, err)
	m.Close()
	return c
}

// TestFailOverWithACompositeFallbackNamesThePolicyWhoseNumbersItShows: with
// the backend down, a Guard's answer from a Composite fallback names the
// policy that bound the fallback's decision, with that policy's limit.
func TestFailOverWithACompositeFallbackNamesThePolicyWhoseNumbersItShows(t *testing.T) {
	clock := NewFakeClock(time.Unix(0, 0))
	requests, err := NewGCRA(15, time.Minute, WithClock(clock))
	require.NoError(t, err)
	tokens, err := NewGCRA(10000, time.Minute, WithClock(clock))
	require.NoError(t, err)
	fallback, err := NewComposite(Part{Name: "requests", Limiter: requests, PerCall: true}, Part{Name: "tokens", Limiter: tokens})
	require.NoError(t, err)
	g, err := NewGuard(downComposite(t), GuardConfig{OnFailure: FailOver, Fallback: fallback, Clock: clock})
	require.NoError(t, err)

	d, err := g.Decide(context.Background(), "tenant", 100)
	require.NoError(t, err)
	assert.Equal(t, FromFallback, d.Source)
	assert.True(t, d.Allowed)
	assert.Equal(t, "requests", d.Policy.Name, "14 of 15 left binds before 9900 of 10000")
	assert.Equal(t, 30, d.Policy.Limit, "the backend's shared policy of that name")
	assert.Equal(t, d.Policy.Limit, d.Limit, "the limit shown is the named policy's")
	assert.Equal(t, 14, d.Remaining)
	assert.Equal(t, d.Policies[d.Bound], d.Policy)

	// A fallback whose policy the backend does not have answers as itself.
	other, err := NewTokenBucket(7, 1, WithClock(clock))
	require.NoError(t, err)
	g, err = NewGuard(downComposite(t), GuardConfig{OnFailure: FailOver, Fallback: other, Clock: clock})
	require.NoError(t, err)
	d, err = g.Decide(context.Background(), "tenant", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFallback, d.Source)
	assert.Equal(t, NamedPolicy{Name: "default", Policy: Policy{Limit: 7, Window: 7 * time.Second}}, d.Policy)
	assert.Equal(t, 7, d.Limit)
	assert.Equal(t, 6, d.Remaining)
}

// TestFailOpenNamesTheTightestPolicyOfUnits: with the backend down, a
// fail-open answer names the policy of units with the smallest limit, and
// refuses a cost above it only.
func TestFailOpenNamesTheTightestPolicyOfUnits(t *testing.T) {
	g, err := NewGuard(downComposite(t), GuardConfig{})
	require.NoError(t, err)
	d, err := g.Decide(context.Background(), "tenant", 100)
	require.NoError(t, err)
	assert.Equal(t, FromFailOpen, d.Source)
	assert.True(t, d.Allowed)
	assert.Equal(t, "tokens", d.Policy.Name)
	assert.Equal(t, 20000, d.Limit)
	_, err = g.Decide(context.Background(), "tenant", 20001)
	assert.ErrorIs(t, err, ErrCostExceedsLimit)
}

// TestEveryMethodOfANilOrZeroLimiterSaysItWasNotBuilt: nothing panics, and
// every call on a limiter no constructor returned wraps ErrInvalidConfig.
func TestEveryMethodOfANilOrZeroLimiterSaysItWasNotBuilt(t *testing.T) {
	ctx := context.Background()
	subjects := map[string]interface {
		Decider
		Adjuster
	}{
		"nil TokenBucket": (*TokenBucket)(nil), "zero TokenBucket": &TokenBucket{},
		"nil GCRA": (*GCRA)(nil), "zero GCRA": &GCRA{},
		"nil FixedWindow": (*FixedWindow)(nil), "zero FixedWindow": &FixedWindow{},
		"nil RedisTokenBucket": (*RedisTokenBucket)(nil), "zero RedisTokenBucket": &RedisTokenBucket{},
		"nil RedisGCRA": (*RedisGCRA)(nil), "zero RedisGCRA": &RedisGCRA{},
		"nil RedisFixedWindow": (*RedisFixedWindow)(nil), "zero RedisFixedWindow": &RedisFixedWindow{},
		"nil Composite": (*Composite)(nil), "zero Composite": &Composite{},
		"nil Guard": (*Guard)(nil), "zero Guard": &Guard{},
		"nil DenyCache": (*DenyCache)(nil), "zero DenyCache": &DenyCache{},
		"nil Shadow": (*Shadow)(nil), "zero Shadow": &Shadow{},
	}
	for name, l := range subjects {
		t.Run(name, func(t *testing.T) {
			_, err := l.Allow(ctx, "k", 1)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			_, err = l.Decide(ctx, "k", 1)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			_, err = l.Policies(ctx, "k")
			assert.ErrorIs(t, err, ErrInvalidConfig)
			_, err = l.Refund(ctx, "k", 1)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			_, err = l.Settle(ctx, "k", 1, 2)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorIs(t, l.Reset(ctx, "k"), ErrInvalidConfig)
			_, err = Wait(ctx, l, "k", 1)
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
}
