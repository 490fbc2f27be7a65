package ratelimit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decisionCounter counts the decisions a limiter reports.
type decisionCounter struct {
	NopHooks
	n atomic.Int64
}

func (c *decisionCounter) Decided(Decision) { c.n.Add(1) }

func TestDenyCacheForgetsADenialOnceTheKeysPolicyChanges(t *testing.T) {
	var limit atomic.Int64
	limit.Store(2)
	policy := func(context.Context, string) (Policy, error) {
		return Policy{Limit: int(limit.Load()), Window: time.Minute}, nil
	}
	clock := NewFakeClock(epoch)
	backend := &decisionCounter{}
	l, err := NewGCRA(2, time.Minute, WithClock(clock), WithPolicyFunc(policy), WithHooks(backend))
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
	assert.Equal(t, int64(3), backend.n.Load())

	// Remembered while the policy holds: the backend is not asked.
	_, source, err := allowSource(ctx, cache, "k")
	require.NoError(t, err)
	assert.Equal(t, FromDenyCache, source)
	assert.Equal(t, int64(3), backend.n.Load())

	// Raised: the next call goes to the backend, which allows it.
	limit.Store(10)
	res, source, err = allowSource(ctx, cache, "k")
	require.NoError(t, err)
	assert.Equal(t, FromBackend, source)
	assert.True(t, res.Allowed)
	assert.Equal(t, 10, res.Limit)
	assert.Equal(t, 7, res.Remaining)
	assert.Equal(t, int64(4), backend.n.Load())
}

func TestDenyCacheReportsTheKeysPolicy(t *testing.T) {
	policy := func(_ context.Context, key string) (Policy, error) {
		if key == "pro" {
			return Policy{Limit: 5, Window: time.Hour}, nil
		}
		return Policy{}, nil
	}
	l, err := NewGCRA(1, time.Minute, WithPolicyFunc(policy))
	require.NoError(t, err)
	cache, err := NewDenyCache(l, DenyCacheConfig{})
	require.NoError(t, err)
	assert.Equal(t, Policy{Limit: 1, Window: time.Minute}, cache.Policy())
	f := PolicyFuncOf(cache)
	require.NotNil(t, f)
	p, err := f(context.Background(), "pro")
	require.NoError(t, err)
	assert.Equal(t, Policy{Limit: 5, Window: time.Hour}, p)
	p, err = f(context.Background(), "free")
	require.NoError(t, err)
	assert.Equal(t, Policy{Limit: 1, Window: time.Minute}, p)
}

// allowSource asks c for one unit of key, with who answered.
func allowSource(ctx context.Context, c *DenyCache, key string) (Result, Source, error) {
	res, _, source, err := c.AllowSource(ctx, key, 1)
	return res, source, err
}
