package ratelimit

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestANilOrZeroRedisLimiterNamesItsType checks that every shared method
// of a Redis rate limiter that no constructor returned, nil or a zero
// value, answers an error wrapping ErrInvalidConfig that names its type
// and its constructor, and that KeyPrefix is "" and nothing panics.
func TestANilOrZeroRedisLimiterNamesItsType(t *testing.T) {
	type shared interface {
		Limiter
		Decide(ctx context.Context, key string, n int) (Decision, error)
		Policies(ctx context.Context, key string) ([]NamedPolicy, error)
		Reset(ctx context.Context, key string) error
		Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error)
		Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error)
		KeyPrefix() string
	}
	ctx := context.Background()
	for _, tc := range []struct {
		typ string
		l   shared
	}{
		{"RedisTokenBucket", (*RedisTokenBucket)(nil)},
		{"RedisTokenBucket", &RedisTokenBucket{}},
		{"RedisGCRA", (*RedisGCRA)(nil)},
		{"RedisGCRA", &RedisGCRA{}},
		{"RedisFixedWindow", (*RedisFixedWindow)(nil)},
		{"RedisFixedWindow", &RedisFixedWindow{}},
		{"RedisSlidingLog", (*RedisSlidingLog)(nil)},
		{"RedisSlidingLog", &RedisSlidingLog{}},
		{"RedisSlidingCounter", (*RedisSlidingCounter)(nil)},
		{"RedisSlidingCounter", &RedisSlidingCounter{}},
	} {
		want := "a nil or zero-value *" + tc.typ + "; create one with New" + tc.typ
		_, err := tc.l.Allow(ctx, "k", 1)
		require.ErrorIs(t, err, ErrInvalidConfig, "%T Allow", tc.l)
		assert.Contains(t, err.Error(), want, "%T Allow", tc.l)
		_, err = tc.l.Decide(ctx, "k", 1)
		assert.ErrorContains(t, err, want, "%T Decide", tc.l)
		_, err = tc.l.Policies(ctx, "k")
		assert.ErrorContains(t, err, want, "%T Policies", tc.l)
		assert.ErrorContains(t, tc.l.Reset(ctx, "k"), want, "%T Reset", tc.l)
		_, err = tc.l.Refund(ctx, "k", 1)
		assert.ErrorContains(t, err, want, "%T Refund", tc.l)
		_, err = tc.l.Settle(ctx, "k", 1, 2)
		assert.ErrorContains(t, err, want, "%T Settle", tc.l)
		assert.Equal(t, "", tc.l.KeyPrefix(), "%T KeyPrefix", tc.l)
	}
}
