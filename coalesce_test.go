package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// evalshaCalls reads how many EVALSHA and EVAL calls the server has served.
func evalshaCalls(t *testing.T, client *redis.Client) int64 {
	t.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var total int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				require.NoError(t, err)
				total += n
			}
		}
	}
	return total
}

// evalshaCallsOn sums evalshaCalls over the servers behind a client of one
// server, a cluster's masters or a ring's shards.
func evalshaCallsOn(t *testing.T, client redis.Scripter) int64 {
	t.Helper()
	var mu sync.Mutex
	var total int64
	each := func(ctx context.Context, node *redis.Client) error {
		n := evalshaCalls(t, node)
		mu.Lock()
		total += n
		mu.Unlock()
		return nil
	}
	switch c := client.(type) {
	case *redis.Client:
		return evalshaCalls(t, c)
	case *redis.ClusterClient:
		require.NoError(t, c.ForEachMaster(context.Background(), each))
	case *redis.Ring:
		require.NoError(t, c.ForEachShard(context.Background(), each))
	default:
		t.Fatalf("no servers known behind %T", client)
	}
	return total
}

func TestRealRedisCoalescedCallsStayExact(t *testing.T) {
	t.Parallel()
	server := redistest.Shared(t)
	testCoalescedCallsStayExact(t, server.Client(t, func(o *redis.Options) { o.PoolSize = 64 }))
}

func TestRealRedisClusterCoalescedCallsStayExact(t *testing.T) {
	t.Parallel()
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t, func(o *redis.ClusterOptions) { o.PoolSize = 64 })
	t.Run("hash slots", func(t *testing.T) {
		// A batch is split by the slots the servers use.
		for i := range 2000 {
			key := "k" + strconv.Itoa(i)
			if i%3 == 0 {
				key = "{user" + strconv.Itoa(i%50) + "}:" + key
			}
			want, err := client.ClusterKeySlot(context.Background(), key).Result()
			require.NoError(t, err)
			require.Equal(t, int(want), redisbatch.HashSlot(key), "slot of %q", key)
		}
	})
	testCoalescedCallsStayExact(t, client)
	t.Run("after SCRIPT FLUSH on every master", func(t *testing.T) {
		l, err := NewRedisGCRA(client, 3, time.Hour)
		require.NoError(t, err)
		require.NoError(t, client.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
			return node.ScriptFlush(ctx).Err()
		}))
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for i := range 4 {
					res, err := l.Allow(context.Background(), "flushed"+strconv.Itoa(g), 1)
					if assert.NoError(t, err) {
						assert.Equal(t, i < 3, res.Allowed)
					}
				}
			})
		}
		wg.Wait()
	})

	// The keys were spread over every master.
	sizes := masterSizes(t, client)
	require.Len(t, sizes, 3)
	for _, n := range sizes {
		assert.Greater(t, n, int64(len(redisKinds)*coalescedKeys/10), "every master holds a share of the keys: %v", sizes)
	}
}

func TestRealRedisRingCoalescedCallsStayExact(t *testing.T) {
	t.Parallel()
	one, two := redistest.Shared(t), redistest.Shared(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": one.Addr, "two": two.Addr}, PoolSize: 64})
	t.Cleanup(func() { _ = ring.Close() })
	testCoalescedCallsStayExact(t, ring)
}

// coalescedKeys is how many keys testCoalescedCallsStayExact spreads its
// calls over, besides its hot key.
const coalescedKeys = 1000

// testCoalescedCallsStayExact runs 64 goroutines on every Redis limiter
// through client, 3 per key for a long time: they ask 5 times for each of
// coalescedKeys keys, and 2,000 times for one hot key of 100. Every key
// allows exactly its limit, and the calls were coalesced.
func testCoalescedCallsStayExact(t *testing.T, client redis.Scripter) {
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			l, err := kind.new(client, 3, time.Hour)
			require.NoError(t, err)
			hot, err := kind.new(client, 100, time.Hour)
			require.NoError(t, err)
			for _, key := range []string{"warm", "{a}", "{b}", "{c}"} { // every server caches the script
				_, err = l.Allow(context.Background(), key, 0)
				require.NoError(t, err)
			}
			before := evalshaCallsOn(t, client)
			const goroutines = 64
			var allowed [coalescedKeys]atomic.Int64
			var hotAllowed, calls atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Go(func() {
					ctx := context.Background()
					for i := g; i < coalescedKeys*5; i += goroutines {
						res, err := l.Allow(ctx, "k"+strconv.Itoa(i%coalescedKeys), 1)
						if !assert.NoError(t, err) {
							return
						}
						if res.Allowed {
							allowed[i%coalescedKeys].Add(1)
						}
						res, err = hot.Allow(ctx, "hot", 1)
						if !assert.NoError(t, err) {
							return
						}
						if res.Allowed {
							hotAllowed.Add(1)
						}
						calls.Add(2)
					}
				})
			}
			wg.Wait()
			for i := range allowed {
				require.Equal(t, int64(3), allowed[i].Load(), "key %d", i)
			}
			assert.Equal(t, int64(100), hotAllowed.Load())
			scripts := evalshaCallsOn(t, client) - before
			t.Logf("%d decisions in %d script calls (%.1f per call)", calls.Load(), scripts, float64(calls.Load())/float64(scripts))
			assert.Less(t, scripts, calls.Load(), "concurrent calls were coalesced")
		})
	}
}

func TestRedisLimitersWithoutCoalescingSendOneCallPerDecision(t *testing.T) {
	server := redistest.Shared(t)
	client := server.Client(t, func(o *redis.Options) { o.PoolSize = 16 })
	l, err := NewRedisTokenBucket(client, PerSecond(1), 1000, WithoutCoalescing())
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "warm", 1) // the server caches the script
	require.NoError(t, err)
	before := evalshaCalls(t, client)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Go(func() {
			for i := 0; i < 20; i++ {
				_, err := l.Allow(context.Background(), "k", 1)
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(320), evalshaCalls(t, client)-before)
}

func TestRealRedisLimitersWorkThroughAnAutoPipeliner(t *testing.T) {
	// An AutoPipeliner reads a command's arguments to size its batches
	// before it writes them: a call through it is sent as go-redis sends
	// any command.
	server := redistest.Shared(t)
	auto, err := server.Client(t).AutoPipeline()
	require.NoError(t, err)
	t.Cleanup(func() { _ = auto.Close() })
	for _, kind := range redisKinds {
		l, err := kind.new(auto, 2, time.Hour)
		require.NoError(t, err)
		for i, want := range []bool{true, true, false} {
			res, err := l.Allow(context.Background(), "piped", 1)
			require.NoError(t, err, "%s call %d", kind.name, i)
			assert.Equal(t, want, res.Allowed, "%s call %d", kind.name, i)
		}
	}
}
