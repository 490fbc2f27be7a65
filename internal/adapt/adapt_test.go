package adapt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
)

// allowOnly is a Limiter of another package: it has Allow alone.
type allowOnly struct{ res ratelimit.Result }

func (a allowOnly) Allow(context.Context, string, int) (ratelimit.Result, error) { return a.res, nil }

// TestDecideAsksADeciderAndAdaptsAnyOtherLimiter: a Decider's own Decision
// comes back whole; a foreign Limiter's Result becomes a Decision of one
// policy named "default" of its Limit, or of none when its Limit is 0.
func TestDecideAsksADeciderAndAdaptsAnyOtherLimiter(t *testing.T) {
	ctx := context.Background()
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2)
	require.NoError(t, err)
	d, err := Decide(ctx, tb, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: time.Second}, d.Result)
	assert.Equal(t, "default", d.Policy.Name)
	assert.Equal(t, 2, d.Policy.Limit)

	res := ratelimit.Result{Allowed: true, Limit: 7, Remaining: 6}
	d, err = Decide(ctx, allowOnly{res}, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, res, d.Result)
	assert.Equal(t, res, d.Enforced)
	assert.Equal(t, ratelimit.FromBackend, d.Source)
	want := ratelimit.NamedPolicy{Name: "default", Policy: ratelimit.Policy{Limit: 7}}
	assert.Equal(t, want, d.Policy)
	assert.Equal(t, []ratelimit.NamedPolicy{want}, d.Policies)
	assert.Equal(t, 0, d.PolicyIndex)

	d, err = Decide(ctx, allowOnly{ratelimit.Result{Allowed: true}}, "k", 1)
	require.NoError(t, err)
	assert.Empty(t, d.Policies, "no limit, no policy")
}

// TestANilLimiterIsAnInvalidConfig: a nil Limiter, untyped or typed, is an
// error wrapping ErrInvalidConfig, from Decide and Acquire alike.
func TestANilLimiterIsAnInvalidConfig(t *testing.T) {
	ctx := context.Background()
	_, err := Decide(ctx, nil, "k", 1)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, _, err = Acquire(ctx, nil, "k", 1)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	var typed *allowOnly
	_, err = Decide(ctx, typed, "k", 1)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}

// TestAcquireHoldsThroughAnAcquirerAndNothingOtherwise: a concurrency
// limiter's lease is held until released; a rate limiter's and a foreign
// Limiter's Acquire decides and holds nothing.
func TestAcquireHoldsThroughAnAcquirerAndNothingOtherwise(t *testing.T) {
	ctx := context.Background()
	c, err := ratelimit.NewConcurrency(1, time.Minute)
	require.NoError(t, err)
	lease, d, err := Acquire(ctx, c, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.True(t, lease.Held())
	_, d, err = Acquire(ctx, c, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the one slot is held")
	require.NoError(t, lease.Release(ctx))

	lease, d, err = Acquire(ctx, allowOnly{ratelimit.Result{Allowed: true, Limit: 3}}, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.False(t, lease.Held())
}
