package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyedLimiter is a Redis limiter: a Limiter that says its key prefix.
type keyedLimiter interface {
	Limiter
	KeyPrefix() string
}

// redisKind is one Redis limiter, built as limit per period.
type redisKind struct {
	name   string
	window bool // a fixed window, rather than a bucket
	new    func(client redis.Scripter, limit int, period time.Duration, opts ...Option) (keyedLimiter, error)
}

var redisKinds = []redisKind{
	{"RedisTokenBucket", false, func(c redis.Scripter, limit int, period time.Duration, opts ...Option) (keyedLimiter, error) {
		return NewRedisTokenBucket(c, limit, float64(limit)/period.Seconds(), opts...)
	}},
	{"RedisGCRA", false, func(c redis.Scripter, limit int, period time.Duration, opts ...Option) (keyedLimiter, error) {
		return NewRedisGCRA(c, limit, period, opts...)
	}},
	{"RedisFixedWindow", true, func(c redis.Scripter, limit int, period time.Duration, opts ...Option) (keyedLimiter, error) {
		return NewRedisFixedWindow(c, limit, period, opts...)
	}},
}

// checkDefaultPrefixesTellConfigurationsApart checks, for each Redis limiter
// on client, that two of different limits under default options keep apart:
// using up the small one leaves the large one full. Given one explicit
// prefix, they share the key on purpose.
func checkDefaultPrefixesTellConfigurationsApart(t *testing.T, client redis.Scripter) {
	ctx := context.Background()
	wantPrefixes := map[string][2]string{
		// 100 and 10 per minute: 600000 and 6000000 µs per token, or a
		// window of 60000 ms.
		"RedisTokenBucket": {"ratelimit:tb:100:600000:", "ratelimit:tb:10:6000000:"},
		"RedisGCRA":        {"ratelimit:gcra:100:600000:", "ratelimit:gcra:10:6000000:"},
		"RedisFixedWindow": {"ratelimit:fw:100:60000:", "ratelimit:fw:10:60000:"},
	}
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			large, err := kind.new(client, 100, time.Minute)
			require.NoError(t, err)
			small, err := kind.new(client, 10, time.Minute)
			require.NoError(t, err)
			assert.Equal(t, wantPrefixes[kind.name], [2]string{large.KeyPrefix(), small.KeyPrefix()})
			for i := 0; i < 10; i++ {
				res, err := small.Allow(ctx, "shared", 1)
				require.NoError(t, err)
				require.True(t, res.Allowed, "call %d", i)
			}
			res, err := small.Allow(ctx, "shared", 1)
			require.NoError(t, err)
			assert.False(t, res.Allowed, "the small limiter is used up")
			res, err = large.Allow(ctx, "shared", 0)
			require.NoError(t, err)
			assert.Equal(t, 100, res.Remaining, "the large limiter is untouched")

			// The same explicit prefix: a redeploy with a new limit keeps
			// what the key has used.
			large, err = kind.new(client, 100, time.Minute, WithKeyPrefix("app:"+kind.name+":"))
			require.NoError(t, err)
			small, err = kind.new(client, 10, time.Minute, WithKeyPrefix("app:"+kind.name+":"))
			require.NoError(t, err)
			assert.Equal(t, "app:"+kind.name+":", large.KeyPrefix())
			for i := 0; i < 10; i++ {
				_, err := small.Allow(ctx, "shared", 1)
				require.NoError(t, err)
			}
			res, err = large.Allow(ctx, "shared", 0)
			require.NoError(t, err)
			assert.Less(t, res.Remaining, 100, "the key's use is shared")
		})
	}
}

func TestRedisDefaultPrefixesTellConfigurationsApart(t *testing.T) {
	_, client, _ := miniredisClock(t)
	checkDefaultPrefixesTellConfigurationsApart(t, client)
}

func TestRedisConfigurationsWithTheSameScriptArgumentsShareAPrefix(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	// 3/s and 3.0000001/s are both 333333 µs per token: they decide alike.
	a, err := NewRedisTokenBucket(client, 5, 3)
	require.NoError(t, err)
	b, err := NewRedisTokenBucket(client, 5, 3.0000001)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:tb:5:333333:", a.KeyPrefix())
	assert.Equal(t, a.KeyPrefix(), b.KeyPrefix())
	// A minute and a nanosecond more, over 7: both 8571429 µs.
	g1, err := NewRedisGCRA(client, 7, time.Minute)
	require.NoError(t, err)
	g2, err := NewRedisGCRA(client, 7, time.Minute+time.Nanosecond)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:gcra:7:8571429:", g1.KeyPrefix())
	assert.Equal(t, g1.KeyPrefix(), g2.KeyPrefix())
	w, err := NewRedisFixedWindow(client, 5, 1500*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:fw:5:1500:", w.KeyPrefix())
	// An explicit prefix is used exactly as given, the empty one too.
	e, err := NewRedisFixedWindow(client, 5, time.Second, WithKeyPrefix(""))
	require.NoError(t, err)
	assert.Equal(t, "", e.KeyPrefix())
}

func TestRedisLimitersRefuseANilContextWithoutARoundTrip(t *testing.T) {
	var nilCtx context.Context
	for _, kind := range redisKinds {
		l, err := kind.new(refusingScripter{t: t}, 3, time.Second)
		require.NoError(t, err)
		for _, n := range []int{1, 0, -1, 4} {
			res, err := l.Allow(nilCtx, "k", n)
			require.ErrorIs(t, err, errNilContext, "%s, n = %d", kind.name, n)
			assert.Equal(t, Result{Limit: 3}, res, kind.name)
		}
	}
}

func TestRedisLimitersRefuseNilAndZeroValues(t *testing.T) {
	ctx := context.Background()
	for name, l := range map[string]Limiter{
		"nil RedisTokenBucket":  (*RedisTokenBucket)(nil),
		"zero RedisTokenBucket": &RedisTokenBucket{},
		"nil RedisGCRA":         (*RedisGCRA)(nil),
		"zero RedisGCRA":        &RedisGCRA{},
		"nil RedisFixedWindow":  (*RedisFixedWindow)(nil),
		"zero RedisFixedWindow": &RedisFixedWindow{},
	} {
		res, err := l.Allow(ctx, "k", 1)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), "create one with New", name)
		assert.Equal(t, Result{}, res, name)
		_, ok := PolicyOf(l)
		assert.False(t, ok, name)
		assert.Equal(t, Policy{}, l.(PolicyReporter).Policy(), name)
	}
}
