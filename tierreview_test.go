package ratelimit

import (
	"context"
	"errors"
	"github.com/redis/go-redis/v9"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestARefundAfterALoweredPolicyGivesTheUnitsBack(t *testing.T) {
	var limit atomic.Int64
	limit.Store(100)
	policy := func(context.Context, string) (Policy, error) {
		return Policy{Limit: int(limit.Load()), Window: time.Minute}, nil
	}
	for _, sub := range keyedAdjusters(t, policy) {
		t.Run(sub.name, func(t *testing.T) {
			limit.Store(100)
			l, _ := sub.new(t)
			ctx := context.Background()
			res, err := l.Allow(ctx, "k", 50)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			limit.Store(10)
			res, err = l.(Adjuster).Refund(ctx, "k", 50)
			require.NoError(t, err, "50 were taken under the larger policy")
			assert.Equal(t, 10, res.Remaining, "everything given back: full at the new limit")
			res, err = l.Allow(ctx, "k", 10)
			require.NoError(t, err)
			assert.True(t, res.Allowed)
			_, err = l.(Adjuster).Settle(ctx, "k", 1<<52+1, 0)
			assert.ErrorIs(t, err, ErrCostExceedsLimit, "no call takes more than 2^52")
		})
	}
}

func TestAGuardReturnsPolicyErrorsWithoutCountingThem(t *testing.T) {
	broken := errors.New("plans unavailable")
	policy := func(_ context.Context, key string) (Policy, error) {
		switch key {
		case "refused":
			return Policy{Limit: 5, Window: -time.Second}, nil
		case "unreadable":
			return Policy{}, broken
		}
		return Policy{}, nil
	}
	l, err := NewGCRA(1, time.Hour, WithPolicyFunc(policy))
	require.NoError(t, err)
	g, err := NewGuard(l, GuardConfig{BreakerFailures: 2, BreakerCoolDown: time.Minute, OnFailure: FailOpen})
	require.NoError(t, err)
	ctx := context.Background()
	for range 5 {
		_, err := g.Allow(ctx, "refused", 1)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		_, err = g.Allow(ctx, "unreadable", 1)
		assert.ErrorIs(t, err, ErrPolicy)
		assert.ErrorIs(t, err, broken)
	}
	assert.Equal(t, BreakerClosed, g.BreakerState(), "no key's policy opens the breaker")
	res, _, source, err := g.AllowSource(ctx, "good", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, source)
	assert.True(t, res.Allowed)
	res, err = g.Allow(ctx, "good", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the good key is still limited: 1 an hour")
}

func TestHooksReportThePolicyAsThePolicyFuncGaveIt(t *testing.T) {
	var got atomic.Pointer[Decision]
	hooks := hookFunc(func(d Decision) { got.Store(&d) })
	policy := func(context.Context, string) (Policy, error) { return Policy{Limit: 3, Window: time.Second}, nil }
	l, err := NewGCRA(1, time.Hour, WithPolicyFunc(policy), WithHooks(hooks))
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Policy{Limit: 3, Window: time.Second}, got.Load().Policy, "not the rounded 3 × 333.333333 ms")
}

// hookFunc is a Hooks that calls itself with every decision.
type hookFunc func(Decision)

func (f hookFunc) Decided(d Decision)             { f(d) }
func (hookFunc) BreakerChanged(_, _ BreakerState) {}

// keyedAdjuster is a limiter built WithPolicyFunc, for the tests that
// adjust.
type keyedAdjuster struct {
	name string
	new  func(t *testing.T) (Limiter, func(time.Duration))
}

// keyedAdjusters returns the six limiters built with policy, in process
// on a fake clock and on miniredis.
func keyedAdjusters(t *testing.T, policy PolicyFunc) []keyedAdjuster {
	t.Helper()
	local := func(name string, build func(Clock) (Limiter, error)) keyedAdjuster {
		return keyedAdjuster{name, func(t *testing.T) (Limiter, func(time.Duration)) {
			clock := NewFakeClock(epoch)
			l, err := build(clock)
			require.NoError(t, err)
			return l, clock.Advance
		}}
	}
	onRedis := func(name string, build func(*redis.Client) (Limiter, error)) keyedAdjuster {
		return keyedAdjuster{name, func(t *testing.T) (Limiter, func(time.Duration)) {
			_, client, advance := miniredisClock(t)
			l, err := build(client)
			require.NoError(t, err)
			return l, advance
		}}
	}
	return []keyedAdjuster{
		local("TokenBucket", func(c Clock) (Limiter, error) { return NewTokenBucket(1, 1, WithClock(c), WithPolicyFunc(policy)) }),
		local("GCRA", func(c Clock) (Limiter, error) { return NewGCRA(1, time.Second, WithClock(c), WithPolicyFunc(policy)) }),
		local("FixedWindow", func(c Clock) (Limiter, error) {
			return NewFixedWindow(1, time.Second, WithClock(c), WithPolicyFunc(policy))
		}),
		onRedis("RedisTokenBucket", func(c *redis.Client) (Limiter, error) { return NewRedisTokenBucket(c, 1, 1, WithPolicyFunc(policy)) }),
		onRedis("RedisGCRA", func(c *redis.Client) (Limiter, error) { return NewRedisGCRA(c, 1, time.Second, WithPolicyFunc(policy)) }),
		onRedis("RedisFixedWindow", func(c *redis.Client) (Limiter, error) {
			return NewRedisFixedWindow(c, 1, time.Second, WithPolicyFunc(policy))
		}),
	}
}
