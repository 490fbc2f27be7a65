package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestARefundAfterALoweredPolicyGivesTheUnitsBack(t *testing.T) {
	ctx := context.Background()
	for _, sub := range policyFuncSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			l, _ := sub.newLimiter(t, ownPolicy, plans.f)
			c := policyFuncCalls{t, l}
			plans.set("k", perMinute(100))
			require.True(t, c.allow("k", 50).Allowed)
			plans.set("k", perMinute(10))
			res, err := l.Refund(ctx, "k", 50)
			require.NoError(t, err, "50 were taken under the larger policy")
			assert.Equal(t, 10, res.Remaining, "everything given back: full at the new limit")
			assert.True(t, c.allow("k", 10).Allowed)
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
		require.ErrorIs(t, err, ErrInvalidConfig)
		_, err = g.Allow(ctx, "unreadable", 1)
		require.ErrorIs(t, err, ErrPolicy)
		require.ErrorIs(t, err, broken)
	}
	assert.Equal(t, BreakerClosed, g.BreakerState(), "no key's policy opens the breaker")
	d, err := g.Decide(ctx, "good", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.True(t, d.Allowed)
	res, err := g.Allow(ctx, "good", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the good key is still limited: 1 an hour")
}
