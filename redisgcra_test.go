package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisGCRAMatchesTheTokenBucketOnRandomSchedules(t *testing.T) {
	// GCRA with limit L per period P decides exactly as a token bucket of
	// capacity L refilling L/P: in process and on Redis, step by step.
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 6))
	for round := 0; round < sized(2, 16); round++ {
		limit := 1 + r.IntN(15)
		interval := time.Duration(1+r.Int64N(1_500_000)) * time.Microsecond
		period := interval * time.Duration(limit)

		_, client, advance := miniredisClock(t)
		redisGCRA, err := NewRedisGCRA(client, limit, period)
		require.NoError(t, err)
		redisBucket, err := NewRedisTokenBucket(client, Per(limit, period), limit)
		require.NoError(t, err)
		clock := ratelimittest.NewClock(epoch)
		gcra, err := NewGCRA(limit, period, WithClock(clock))
		require.NoError(t, err)

		for i, c := range randomSchedule(r, 200, limit, interval, false, "a", "b") {
			c.advance = c.advance.Truncate(time.Microsecond)
			clock.Advance(c.advance)
			advance(c.advance)
			want, wantErr := redisBucket.Allow(context.Background(), c.key, c.n)
			for name, l := range map[string]Limiter{"RedisGCRA": redisGCRA, "GCRA": gcra} {
				got, err := l.Allow(context.Background(), c.key, c.n)
				require.Equal(t, wantErr == nil, err == nil, "%s round %d step %d: errors %v and %v", name, round, i, wantErr, err)
				require.Equal(t, want, got, "%s round %d step %d: limit %d per %v, %+v", name, round, i, limit, period, c)
			}
		}
	}
}

func TestRedisGCRAKeyAndTTL(t *testing.T) {
	m, client, _ := miniredisClock(t)
	l, err := NewRedisGCRA(client, 10, time.Minute) // one every 6 s
	require.NoError(t, err)
	res, err := l.Allow(context.Background(), "api", 3)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 10, Remaining: 7, ResetAfter: 18 * time.Second}, res)
	// One STRING: the theoretical arrival time in µs, 18 s from now.
	assert.Equal(t, []string{storedKey(l.KeyPrefix(), "api")}, m.Keys())
	got, err := m.Get(storedKey(l.KeyPrefix(), "api"))
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(epoch.Add(18*time.Second).UnixMicro(), 10), got)
	assert.Equal(t, 18*time.Second, m.TTL(storedKey(l.KeyPrefix(), "api")))

	res, err = l.Allow(context.Background(), "fresh", 0)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 10, Remaining: 10}, res)
	assert.False(t, m.Exists(storedKey(l.KeyPrefix(), "fresh")), "a peek creates no key")
}

func TestNewRedisGCRARejectsBadConfig(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	cases := []struct {
		name   string
		client redis.Scripter
		limit  int
		period time.Duration
		opts   []Option
		want   string
	}{
		{"nil client", nil, 1, time.Second, nil, "nil Redis client"},
		{"typed nil client", (*redis.Ring)(nil), 1, time.Second, nil, "nil Redis client"},
		{"zero limit", client, 0, time.Second, nil, "limit 0"},
		{"limit beyond 2^52", client, maxRedisLimit + 1, 1 << 62, nil, "above 4503599627370496"},
		{"zero period", client, 1, 0, nil, "period 0s"},
		{"under 1 µs per request", client, 1000, time.Millisecond - 1, nil, "under one clock unit"},
		{"beyond 2^52 µs", client, 1 << 30, 1 << 62, nil, "2^52"},
		{"WithClock", client, 1, time.Second, []Option{WithClock(ratelimittest.NewClock(epoch))}, "WithClock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewRedisGCRA(tc.client, tc.limit, tc.period, redisOpts(tc.opts)...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, l)
		})
	}
}
