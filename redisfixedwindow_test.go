package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisFixedWindowKeyAndTTL(t *testing.T) {
	m, client, advance := miniredisClock(t)
	l, err := NewRedisFixedWindow(client, 20, 30*time.Second)
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k", 3)
	require.NoError(t, err)
	advance(10 * time.Second)
	res, err := l.Allow(context.Background(), "k", 2)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 20, Remaining: 15, ResetAfter: 20 * time.Second}, res)
	got, err := m.Get(storedKey(l.KeyPrefix(), "k"))
	require.NoError(t, err)
	assert.Equal(t, "5", got, "one counter per key")
	assert.Equal(t, 20*time.Second, m.TTL(storedKey(l.KeyPrefix(), "k")), "INCRBY keeps the window's TTL")
}

func TestNewRedisFixedWindowRejectsBadConfig(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	cases := []struct {
		name   string
		client redis.Scripter
		limit  int
		window time.Duration
		opts   []Option
		want   string
	}{
		{"nil client", nil, 1, time.Second, nil, "nil Redis client"},
		{"typed nil client", (*redis.Client)(nil), 1, time.Second, nil, "nil Redis client"},
		{"zero limit", client, 0, time.Second, nil, "limit 0"},
		// Lua's doubles count exactly only up to 2^53: count + n must stay
		// within it.
		{"limit beyond 2^52", client, maxRedisLimit + 1, time.Second, nil, "above 4503599627370496"},
		{"limit beyond 2^53", client, 1<<53 + 1, time.Second, nil, "above 4503599627370496"},
		{"zero window", client, 1, 0, nil, "window 0s"},
		{"not whole ms", client, 1, 1500 * time.Microsecond, nil, "whole number of milliseconds"},
		{"beyond 2^52 µs", client, 1, (1 << 62) / time.Millisecond * time.Millisecond, nil, "2^52"},
		{"WithClock", client, 1, time.Second, []Option{WithClock(ratelimittest.NewClock(epoch))}, "WithClock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewRedisFixedWindow(tc.client, tc.limit, tc.window, redisOpts(tc.opts)...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, l)
		})
	}
	l, err := NewRedisFixedWindow(client, maxRedisLimit, time.Second)
	require.NoError(t, err, "2^52 itself can be counted")
	assert.Equal(t, maxRedisLimit, l.Policy().Limit)
}

func TestRedisFixedWindowEndsWhenItsTimeIsUp(t *testing.T) {
	// miniredis keeps a key whose TTL is under 1 ms and reports PTTL 0, as
	// Redis does during a key's expiry millisecond: the window has ended.
	m, client, _ := miniredisClock(t)
	l, err := NewRedisFixedWindow(client, 2, 10*time.Millisecond)
	require.NoError(t, err)
	ctx := context.Background()
	res, err := l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	key := storedKey(l.KeyPrefix(), "k")

	m.FastForward(9*time.Millisecond + 500*time.Microsecond)
	require.True(t, m.Exists(key))
	pttl, err := client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, pttl, "the key is in its last millisecond")

	res, err = l.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 2, Remaining: 2}, res, "no window is open")
	res, err = l.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 10 * time.Millisecond}, res, "a new window opened")
	got, err := m.Get(key)
	require.NoError(t, err)
	assert.Equal(t, "1", got)
	assert.Equal(t, 10*time.Millisecond, m.TTL(key))
}
