package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrefetchCloseReportsAGiveBackTheBackendRefused holds a block of a
// hot key over a Redis limiter, then closes the Prefetch while Redis is
// down: Close returns the give-back's error as ErrBackend (the block's
// units are left to decay), and every later call goes to the backend.
func TestPrefetchCloseReportsAGiveBackTheBackendRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, _, _ := miniredisClock(t)
	// A client that does not retry, so that a Redis that is down fails at once.
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	backend, err := NewRedisTokenBucket(client, PerSecond(1), 100)
	require.NoError(t, err)
	l, err := NewPrefetch(backend, PrefetchConfig{HotCalls: 1, MinBlock: 20, MaxShare: 4})
	require.NoError(t, err)
	for range 2 {
		res, err := l.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	m.Close()
	err = l.Close(ctx)
	require.ErrorIs(t, err, ErrBackend, "the give-back of k's block failed")
	_, err = l.Allow(ctx, "k", 1)
	assert.ErrorIs(t, err, ErrBackend, "after Close, the backend answers")
}
