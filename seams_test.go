package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// TestEveryErrorIsOfOneClass: the sentinels of the caller's mistakes are of
// class ErrCaller, a key's data of ErrCorruptState, and a Redis that
// cannot be reached of ErrBackend; no error is of two classes.
func TestEveryErrorIsOfOneClass(t *testing.T) {
	t.Parallel()
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
	b, err := NewTokenBucket(PerSecond(1), 5)
	require.NoError(t, err)
	_, err = b.Allow(ctx, "k", -1)
	assert.Equal(t, []error{ErrCaller}, classOf(err))
	_, err = b.Allow(ctx, "k", 6)
	assert.Equal(t, []error{ErrCaller}, classOf(err))

	m, client, _ := redistest.Miniredis(t, time.Unix(1_700_000_000, 0))
	rb, err := NewRedisTokenBucket(client, PerSecond(1), 5)
	require.NoError(t, err)
	require.NoError(t, m.Set(storedKey(rb.KeyPrefix(), "foreign"), "x"))
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
	t.Parallel()
	client := redistest.SharedCluster(t).Client(t)
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
	fallback, err := NewTokenBucket(PerSecond(1000), 1000)
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
	m, _, _ := redistest.Miniredis(t, time.Unix(1_700_000_000, 0))
	// No retries: each call fails at once, not after go-redis's backoff.
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
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
	t.Parallel()
	clock := ratelimittest.NewClock(time.Unix(0, 0))
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
	assert.Equal(t, d.Policies[d.PolicyIndex], d.Policy)

	// A fallback whose policy the backend does not have answers as itself.
	other, err := NewTokenBucket(PerSecond(1), 7, WithClock(clock))
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
	t.Parallel()
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

// switchable is a Decider around a TokenBucket that can be taken down.
type switchable struct {
	*TokenBucket
	down bool
}

// Decide fails with ErrBackend while down.
func (s *switchable) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if s.down {
		return Decision{}, fmt.Errorf("%w: connection refused", ErrBackend)
	}
	return s.TokenBucket.Decide(ctx, key, n)
}

// Allow decides through Decide.
func (s *switchable) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := s.Decide(ctx, key, n)
	return d.Result, err
}

// TestAGuardsBreakerIsNotClosedByAnswersItsBackendDidNotGive: a DenyCache's
// remembered denials inside a Guard say nothing of the backend's health.
func TestAGuardsBreakerIsNotClosedByAnswersItsBackendDidNotGive(t *testing.T) {
	ctx := context.Background()
	tb, err := NewTokenBucket(Every(1000*time.Second), 1)
	require.NoError(t, err)
	backend := &switchable{TokenBucket: tb}
	cache, err := NewDenyCache(backend, DenyCacheConfig{MaxAge: time.Minute})
	require.NoError(t, err)
	g, err := NewGuard(cache, GuardConfig{OnFailure: FailClosed, BreakerFailures: 3, BreakerCoolDown: time.Minute})
	require.NoError(t, err)
	_, err = g.Decide(ctx, "hot", 1)
	require.NoError(t, err)
	d, err := g.Decide(ctx, "hot", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)

	backend.down = true
	for _, key := range []string{"a", "b"} {
		d, err = g.Decide(ctx, key, 1)
		require.NoError(t, err)
		require.Equal(t, FromFailClosed, d.Source)
		d, err = g.Decide(ctx, "hot", 1)
		require.NoError(t, err)
		require.Equal(t, FromDenyCache, d.Source)
	}
	_, err = g.Decide(ctx, "c", 1)
	require.NoError(t, err)
	assert.Equal(t, BreakerOpen, g.BreakerState(), "three backend failures in a row, whatever the cache answered between them")
}

// TestDenyCacheDoesNotAgeADenialMadeBehindASteppedBackClock: an in-process
// bucket whose clock stepped back holds its units until the clock catches
// up; a denial made then is not remembered, so the cache never denies
// what the bucket holds.
func TestDenyCacheDoesNotAgeADenialMadeBehindASteppedBackClock(t *testing.T) {
	ctx := context.Background()
	start := time.Unix(1_700_000_000, 0)
	clock := ratelimittest.NewClock(start)
	tb, err := NewTokenBucket(PerSecond(1), 10, WithClock(clock))
	require.NoError(t, err)
	_, err = tb.Allow(ctx, "k", 5)
	require.NoError(t, err)
	clock.Set(start.Add(-10 * time.Second))
	cache, err := NewDenyCache(tb, DenyCacheConfig{MaxAge: time.Minute, Clock: ratelimittest.NewClock(start)})
	require.NoError(t, err)
	d, err := cache.Decide(ctx, "k", 6)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, 5, d.Remaining)
	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.True(t, d.Allowed, "the bucket holds 5")
}

// TestAGuardWithItsBackendDownTakesAnyCostOfACompositeOfCalls: a Composite
// whose parts all count calls takes a call of any cost; so does a Guard
// answering for it while it is down, and its refusals of a bad cost keep
// Enforced equal to Result.
func TestAGuardWithItsBackendDownTakesAnyCostOfACompositeOfCalls(t *testing.T) {
	ctx := context.Background()
	tb, err := NewTokenBucket(PerSecond(1), 10)
	require.NoError(t, err)
	calls, err := NewComposite(Part{Name: "requests", Limiter: tb, PerCall: true})
	require.NoError(t, err)
	d, err := calls.Decide(ctx, "k", 50)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	down := &switchable{TokenBucket: tb, down: true}
	g, err := NewGuard(downPolicies{down, calls}, GuardConfig{})
	require.NoError(t, err)
	d, err = g.Decide(ctx, "k", 50)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, FromFailOpen, d.Source)
	assert.Equal(t, "requests", d.Policy.Name)
	d, err = g.Decide(ctx, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
	assert.Equal(t, d.Result, d.Enforced)
}

// downPolicies is a backend that is down, with the policies of another
// limiter.
type downPolicies struct {
	*switchable
	policies Decider
}

// Policies returns the other limiter's policies.
func (d downPolicies) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	return d.policies.Policies(ctx, key)
}

// TestFailOverShowsNoMoreLeftThanTheSharedLimit: a fallback larger than the
// backend's policy does not show more left than that policy's limit.
func TestFailOverShowsNoMoreLeftThanTheSharedLimit(t *testing.T) {
	tb, err := NewTokenBucket(PerSecond(1), 10)
	require.NoError(t, err)
	fallback, err := NewTokenBucket(PerSecond(100), 1000)
	require.NoError(t, err)
	g, err := NewGuard(&switchable{TokenBucket: tb, down: true}, GuardConfig{OnFailure: FailOver, Fallback: fallback})
	require.NoError(t, err)
	d, err := g.Decide(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFallback, d.Source)
	assert.Equal(t, 10, d.Limit)
	assert.Equal(t, 10, d.Remaining)
}

// TestMethodsWithoutAnErrorDoNotPanicOnNil: the methods that return no
// error answer their zero value on a nil receiver.
func TestMethodsWithoutAnErrorDoNotPanicOnNil(t *testing.T) {
	assert.NotPanics(t, func() { assert.Equal(t, BreakerClosed, (*Guard)(nil).BreakerState()) })
	assert.NotPanics(t, func() { (*Shadow)(nil).SetEnforce(true) })
	assert.NotPanics(t, func() { assert.False(t, (*Shadow)(nil).Enforcing()) })
	assert.NotPanics(t, func() { assert.Empty(t, (*RedisTokenBucket)(nil).KeyPrefix()) })
	assert.NotPanics(t, func() { assert.Empty(t, (*RedisGCRA)(nil).KeyPrefix()) })
	assert.NotPanics(t, func() { assert.Empty(t, (*RedisFixedWindow)(nil).KeyPrefix()) })
	assert.NotPanics(t, func() { assert.Equal(t, Policy{}, (*TokenBucket)(nil).Policy()) })
}

// TestAPolicyErrorThatWrapsABackendFailureIsTheCallersToAGuard: the
// caller's class wins, so a Guard neither counts nor answers it.
func TestAPolicyErrorThatWrapsABackendFailureIsTheCallersToAGuard(t *testing.T) {
	plans := func(context.Context, string) (Policy, error) {
		return Policy{}, fmt.Errorf("plan store: %w", ErrBackend)
	}
	tb, err := NewTokenBucket(PerSecond(1), 10, WithPolicyFunc(plans))
	require.NoError(t, err)
	g, err := NewGuard(tb, GuardConfig{BreakerFailures: 1, BreakerCoolDown: time.Minute})
	require.NoError(t, err)
	_, err = g.Decide(context.Background(), "k", 1)
	require.ErrorIs(t, err, ErrPolicy)
	assert.ErrorIs(t, err, ErrCaller)
	assert.Equal(t, BreakerClosed, g.BreakerState())
}
