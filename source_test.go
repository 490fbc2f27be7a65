package ratelimit

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDecoratorsSayWhoAnswered(t *testing.T) {
	ctx := context.Background()
	backend := &stubBackend{}
	backend.set(Result{Allowed: true, Limit: 10, Remaining: 9}, nil)
	open, err := NewGuard(backend, GuardConfig{OnFailure: FailOpen})
	require.NoError(t, err)
	closed, err := NewGuard(backend, GuardConfig{OnFailure: FailClosed})
	require.NoError(t, err)

	d, err := open.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)

	backend.set(Result{}, errDown)
	d, err = open.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, FromFailOpen, d.Source, "allowed, but the backend took nothing")

	shadow, err := NewShadow(open, ShadowConfig{})
	require.NoError(t, err)
	d, err = shadow.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFailOpen, d.Source, "a Shadow passes on the Guard's account")

	// A DenyCache never remembers a denial its backend did not make.
	cache, err := NewDenyCache(closed, DenyCacheConfig{})
	require.NoError(t, err)
	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, FromFailClosed, d.Source)
	calls := backend.calls.Load()
	backend.set(Result{Allowed: true, Limit: 10, Remaining: 9}, nil)
	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the fail-closed denial was not remembered")
	assert.Equal(t, FromBackend, d.Source)
	assert.Equal(t, calls+1, backend.calls.Load())
}
