package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// checkOneBadKeyLeavesOtherKeysAlone puts a LIST and a foreign HASH under
// two keys of a Redis token bucket of capacity 2 behind a Guard, calls them
// many times, and checks that each call fails with ErrCorruptState, the
// breaker stays closed, and a fresh key is decided by Redis: 2 of 3 allowed,
// whatever the failure policy.
func checkOneBadKeyLeavesOtherKeysAlone(t *testing.T, client redis.Cmdable) {
	t.Helper()
	ctx := context.Background()
	for _, policy := range []FailurePolicy{FailOpen, FailClosed} {
		l, err := NewRedisTokenBucket(client, Every(1000*time.Second), 2)
		require.NoError(t, err)
		g, err := NewGuard(l, GuardConfig{OnFailure: policy, BreakerFailures: 5, BreakerCoolDown: time.Minute})
		require.NoError(t, err)
		require.NoError(t, client.RPush(ctx, storedKey(l.KeyPrefix(), "list"), "a", "b").Err())
		require.NoError(t, client.HSet(ctx, storedKey(l.KeyPrefix(), "session"), "user", "42", "role", "admin").Err())

		for i := 0; i < 10; i++ {
			for _, bad := range []string{"list", "session"} {
				res, err := g.Allow(ctx, bad, 1)
				require.ErrorIs(t, err, ErrCorruptState, "policy %d, key %s", policy, bad)
				assert.Contains(t, err.Error(), KeyDigest(bad), "the error names the key by its digest")
				assert.False(t, res.Allowed)
			}
		}
		assert.Equal(t, BreakerClosed, g.BreakerState(), "policy %d", policy)

		var allowed []bool
		for i := 0; i < 3; i++ {
			res, err := g.Allow(ctx, "fresh", 1)
			require.NoError(t, err)
			allowed = append(allowed, res.Allowed)
		}
		assert.Equal(t, []bool{true, true, false}, allowed, "policy %d: the fresh key is decided by Redis", policy)
		require.NoError(t, client.Del(ctx, storedKey(l.KeyPrefix(), "list"), storedKey(l.KeyPrefix(), "session"), storedKey(l.KeyPrefix(), "fresh")).Err())
	}
}

func TestGuardOneBadKeyLeavesOtherKeysAloneOnMiniredis(t *testing.T) {
	_, client, _ := miniredisClock(t)
	checkOneBadKeyLeavesOtherKeysAlone(t, client)
}

func TestGuardOneBadKeyLeavesOtherKeysAloneOnRealRedis(t *testing.T) {
	server := redistest.Shared(t)
	checkOneBadKeyLeavesOtherKeysAlone(t, server.Client(t))
}
