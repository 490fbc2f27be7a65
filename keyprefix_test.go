package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDefaultKeyPrefixKeepsEveryStoredKey: each Redis limiter's default key
// prefix, written out byte for byte, is DefaultKeyPrefix followed by its
// state's name, with and without WithPolicyFunc: one constant and the state
// name make exactly the keys stored before.
func TestDefaultKeyPrefixKeepsEveryStoredKey(t *testing.T) {
	_, client, _ := miniredisClock(t)
	assert.Equal(t, "ratelimit:", DefaultKeyPrefix)
	keyed := WithPolicyFunc(func(context.Context, string) (Policy, error) { return Policy{Limit: 5, Window: time.Minute}, nil })
	type prefixer interface{ KeyPrefix() string }
	for name, c := range map[string]struct {
		build       func(...Option) (prefixer, error)
		plain, keys string
	}{
		"RedisTokenBucket": {func(o ...Option) (prefixer, error) {
			return NewRedisTokenBucket(client, PerSecond(10), 10, redisOpts(o)...)
		},
			"ratelimit:tb:10:100000:", "ratelimit:tb:keyed:10:100000:"},
		"RedisGCRA": {func(o ...Option) (prefixer, error) { return NewRedisGCRA(client, 100, time.Minute, redisOpts(o)...) },
			"ratelimit:gcra:100:600000:", "ratelimit:gcra:keyed:100:600000:"},
		"RedisFixedWindow": {func(o ...Option) (prefixer, error) {
			return NewRedisFixedWindow(client, 100, time.Minute, redisOpts(o)...)
		},
			"ratelimit:fw:100:60000:", "ratelimit:fw:keyed:100:60000:"},
		"RedisSlidingLog": {func(o ...Option) (prefixer, error) {
			return NewRedisSlidingLog(client, 100, time.Minute, redisOpts(o)...)
		},
			"ratelimit:sl:100:60000:", "ratelimit:sl:keyed:100:60000:"},
		"RedisSlidingCounter": {func(o ...Option) (prefixer, error) {
			return NewRedisSlidingCounter(client, 100, time.Minute, redisOpts(o)...)
		},
			"ratelimit:sc:100:60000:", "ratelimit:sc:keyed:100:60000:"},
		"RedisCalendarWindow": {func(o ...Option) (prefixer, error) {
			return NewRedisCalendarWindow(client, 1000, Calendar{Period: CalendarDay}, redisOpts(o)...)
		}, "ratelimit:cal:1000:day:UTC:", "ratelimit:cal:keyed:1000:day:"},
		"RedisConcurrency": {func(o ...Option) (prefixer, error) {
			return NewRedisConcurrency(client, 5, 30*time.Second, redisOpts(o)...)
		},
			"ratelimit:inflight:5:30000000:", "ratelimit:inflight:keyed:5:30000000:"},
	} {
		l, err := c.build()
		require.NoError(t, err, name)
		assert.Equal(t, c.plain, l.KeyPrefix(), name)
		l, err = c.build(keyed)
		require.NoError(t, err, name)
		assert.Equal(t, c.keys, l.KeyPrefix(), name+" WithPolicyFunc")
	}
}
