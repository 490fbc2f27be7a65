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

	_, _, source, err := open.AllowSource(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, source)

	backend.set(Result{}, errDown)
	res, _, source, err := open.AllowSource(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, FromFailOpen, source, "allowed, but the backend took nothing")

	shadow, err := NewShadow(open, ShadowConfig{})
	require.NoError(t, err)
	sr, err := shadow.AllowShadow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFailOpen, sr.Source, "a Shadow passes on the Guard's account")

	// A DenyCache never remembers a denial its backend did not make.
	cache, err := NewDenyCache(closed, DenyCacheConfig{})
	require.NoError(t, err)
	res, _, source, err = cache.AllowSource(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, FromFailClosed, source)
	calls := backend.calls.Load()
	backend.set(Result{Allowed: true, Limit: 10, Remaining: 9}, nil)
	res, _, source, err = cache.AllowSource(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the fail-closed denial was not remembered")
	assert.Equal(t, FromBackend, source)
	assert.Equal(t, calls+1, backend.calls.Load())
}
