package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDenyCacheForgetsADenialOnceTheKeysPolicyChanges(t *testing.T) {
	plans := newPlanMap()
	plans.set("k", Policy{Limit: 2, Window: time.Minute})
	clock := ratelimittest.NewClock(epoch)
	backendHooks := &recordingHooks{}
	l, err := NewGCRA(2, time.Minute, WithClock(clock), WithPolicyFunc(plans.f), WithHooks(backendHooks))
	require.NoError(t, err)
	cache, err := NewDenyCache(l, DenyCacheConfig{Clock: clock, MaxAge: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()

	for range 2 {
		res, err := cache.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	res, err := cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, res.Allowed)
	assert.Equal(t, 3, decided(backendHooks))

	// Remembered while the policy holds: the backend is not asked.
	_, source, err := allowSource(ctx, cache, "k")
	require.NoError(t, err)
	assert.Equal(t, FromDenyCache, source)
	assert.Equal(t, 3, decided(backendHooks))

	// Raised: the next call goes to the backend, which allows it.
	plans.set("k", Policy{Limit: 10, Window: time.Minute})
	res, source, err = allowSource(ctx, cache, "k")
	require.NoError(t, err)
	assert.Equal(t, FromBackend, source)
	assert.True(t, res.Allowed)
	assert.Equal(t, 10, res.Limit)
	assert.Equal(t, 7, res.Remaining)
	assert.Equal(t, 4, decided(backendHooks))
}

func TestDenyCacheReportsTheKeysPolicy(t *testing.T) {
	plans := newPlanMap()
	plans.set("pro", Policy{Limit: 5, Window: time.Hour})
	l, err := NewGCRA(1, time.Minute, WithPolicyFunc(plans.f))
	require.NoError(t, err)
	cache, err := NewDenyCache(l, DenyCacheConfig{})
	require.NoError(t, err)
	ps, err := cache.Policies(context.Background(), "pro")
	require.NoError(t, err)
	assert.Equal(t, []NamedPolicy{{Name: "default", Policy: Policy{Limit: 5, Window: time.Hour}}}, ps)
	ps, err = cache.Policies(context.Background(), "free")
	require.NoError(t, err)
	assert.Equal(t, []NamedPolicy{{Name: "default", Policy: Policy{Limit: 1, Window: time.Minute}}}, ps,
		"a key without a plan has the constructor's policy")
}

// allowSource asks c for one unit of key, with who answered.
func allowSource(ctx context.Context, c *DenyCache, key string) (Result, Source, error) {
	d, err := c.Decide(ctx, key, 1)
	return d.Result, d.Source, err
}
