package ratelimit

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// unbraceableKeys are a prefix and a key whose Redis key braces cannot hold
// whole: it has a '}' but no hash tag, or it is empty. A nil prefix is the
// limiter's default one.
var unbraceableKeys = []struct {
	prefix *string
	key    string
}{
	{nil, "ac}me"},
	{ptr(""), "ac}me"},
	{ptr(""), "}"},
	{ptr(""), "{}"},
	{ptr(""), "a{}b}"},
	{ptr(""), "}{"},
	{ptr(""), "{}{a}"},
	{ptr(":"), "x}"},
	{ptr("tenant}:"), "acme"},
	{ptr("rl:{}:"), "u}1"},
	{ptr(""), ""},
}

// ptr returns a pointer to a copy of v.
func ptr[T any](v T) *T { return &v }

// TestRealRedisClusterWithTokenWorksForKeysWithAnUnmatchedBrace: on a
// cluster, a Settle WithToken on a key whose Redis key has a '}' but no hash
// tag (or is empty) applies once, a retry with the same token changes
// nothing, and the token is remembered in the key's slot; also through an
// AutoPipeliner, whose routing the limiters do not know.
func TestRealRedisClusterWithTokenWorksForKeysWithAnUnmatchedBrace(t *testing.T) {
	t.Parallel()
	client := redistest.SharedCluster(t).Client(t)
	inSlot := func(ctx context.Context, key string) ([]string, error) {
		var mu sync.Mutex
		var keys []string
		err := client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			k, err := node.ClusterGetKeysInSlot(ctx, redisbatch.HashSlot(key), 1000).Result()
			mu.Lock()
			keys = append(keys, k...)
			mu.Unlock()
			return err
		})
		return keys, err
	}
	t.Run("ClusterClient", func(t *testing.T) {
		checkWithTokenWorksForUnbraceableKeys(t, client, "direct", inSlot)
	})
	t.Run("AutoPipeliner", func(t *testing.T) {
		auto, err := client.AutoPipeline()
		require.NoError(t, err)
		t.Cleanup(func() { _ = auto.Close() })
		checkWithTokenWorksForUnbraceableKeys(t, auto, "auto", inSlot)
	})
}

// TestRealRedisRingWithTokenWorksForKeysWithAnUnmatchedBrace: the same on a
// Ring of two servers, which sends a script call to its first key's shard,
// where the token is remembered.
func TestRealRedisRingWithTokenWorksForKeysWithAnUnmatchedBrace(t *testing.T) {
	one, two := redistest.Shared(t), redistest.Shared(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": one.Addr, "two": two.Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	nodes := []*redis.Client{one.Client(t), two.Client(t)}
	var used [2]bool
	checkWithTokenWorksForUnbraceableKeys(t, ring, "ring", func(ctx context.Context, key string) ([]string, error) {
		for i, node := range nodes {
			keys, err := node.Keys(ctx, "*").Result()
			if err != nil {
				return nil, err
			}
			if slices.Contains(keys, key) {
				used[i] = true
				return keys, nil
			}
		}
		return nil, nil
	})
	assert.Equal(t, [2]bool{true, true}, used, "the keys are on both shards")
}

// checkWithTokenWorksForUnbraceableKeys checks, for each Redis limiter on
// client and each of unbraceableKeys, that a Settle WithToken applies once
// and a retry with its token changes nothing, and that among the keys
// along(Redis key) returns (those of its slot or server) are the Redis key
// and a token key for it. Its tokens start with run.
func checkWithTokenWorksForUnbraceableKeys(t *testing.T, client redis.Scripter, run string, along func(ctx context.Context, key string) ([]string, error)) {
	ctx := context.Background()
	for _, kind := range redisKinds {
		for i, k := range unbraceableKeys {
			var opts []RedisOption
			if k.prefix != nil {
				opts = append(opts, WithKeyPrefix(*k.prefix))
			}
			l, err := kind.new(client, 10, time.Hour, opts...)
			require.NoError(t, err)
			key := storedKey(l.KeyPrefix(), k.key)
			token := run + "-" + kind.name + "-" + strconv.Itoa(i)
			res, err := l.Allow(ctx, k.key, 4)
			require.NoError(t, err, "%s %q", kind.name, key)
			require.Equal(t, 6, res.Remaining, "%s %q", kind.name, key)
			for call := range 2 {
				res, err = l.(Adjuster).Settle(ctx, k.key, 4, 1, WithToken(token))
				require.NoError(t, err, "%s %q, call %d", kind.name, key, call)
				assert.Equal(t, 9, res.Remaining, "%s %q, call %d: 3 given back once", kind.name, key, call)
			}
			res, err = l.Allow(ctx, k.key, 0)
			require.NoError(t, err)
			assert.Equal(t, 9, res.Remaining, "%s %q", kind.name, key)
			res, err = l.(Adjuster).Settle(ctx, k.key, 1, 2, WithToken(token+"-b"))
			require.NoError(t, err)
			assert.Equal(t, 8, res.Remaining, "%s %q: another token applies", kind.name, key)

			keys, err := along(ctx, key)
			require.NoError(t, err)
			assert.Contains(t, keys, key)
			assert.True(t, slices.ContainsFunc(keys, func(s string) bool {
				return strings.HasPrefix(s, "ratelimit:settled:") && strings.Contains(s, key) && strings.HasSuffix(s, ":"+token)
			}), "%s %q: its token key is along with it in %q", kind.name, key, keys)
			// The next limiter may have the same Redis key.
			require.NoError(t, l.(Adjuster).Reset(ctx, k.key))
		}
	}
}
