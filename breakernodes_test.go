package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// nodesBackend serves each key on the node its first letter names, and
// fails the calls of the nodes marked down.
type nodesBackend struct {
	mu    sync.Mutex
	down  map[string]bool
	calls map[string]int // per node
}

func (b *nodesBackend) nodes() func(string) string {
	return func(key string) string { return key[:1] }
}

func (b *nodesBackend) setDown(node string, down bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.down[node] = down
}

func (b *nodesBackend) Allow(_ context.Context, key string, _ int) (Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls[key[:1]]++
	if b.down[key[:1]] {
		return Result{}, errDown
	}
	return Result{Allowed: true, Limit: 10, Remaining: 9}, nil
}

// TestBreakerPerNodeKeepsHealthyNodesOnTheBackend: a backend whose keys
// live on nodes (as on a Redis Cluster) has a breaker per node, in a Guard
// of its own or in a shared Breaker: node a's failures open a's breaker
// alone, and the keys of node b keep going to the backend.
func TestBreakerPerNodeKeepsHealthyNodesOnTheBackend(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			backend := &nodesBackend{down: map[string]bool{"a": true}, calls: map[string]int{}}
			hooks := &recordingHooks{}
			cfg := GuardConfig{Clock: clock, Hooks: hooks}
			if shared {
				b, err := NewBreaker(BreakerConfig{Failures: 2, CoolDown: time.Second, Hooks: hooks})
				require.NoError(t, err)
				cfg.Breaker = b
			} else {
				cfg.BreakerFailures, cfg.BreakerCoolDown = 2, time.Second
			}
			g, err := NewGuard(backend, cfg)
			require.NoError(t, err)
			ctx := context.Background()
			for i := range 3 {
				d, err := g.Decide(ctx, fmt.Sprint("a", i), 1)
				require.NoError(t, err)
				assert.Equal(t, FromFailOpen, d.Source)
			}
			for i := range 10 {
				d, err := g.Decide(ctx, fmt.Sprint("b", i), 1)
				require.NoError(t, err)
				assert.Equal(t, FromBackend, d.Source, "node b's keys stay on the backend")
				d, err = g.Decide(ctx, fmt.Sprint("a", i), 1)
				require.NoError(t, err)
				assert.Equal(t, FromFailOpen, d.Source)
			}
			assert.Equal(t, 2, backend.calls["a"], "a's breaker opened after 2 failures")
			assert.Equal(t, 10, backend.calls["b"])
			assert.Equal(t, BreakerOpen, g.BreakerState(), "the state of the most open node")
			assert.Equal(t, [][2]BreakerState{{BreakerClosed, BreakerOpen}}, hooks.changes)

			// a comes back: its probe closes its breaker.
			backend.setDown("a", false)
			clock.Advance(time.Second)
			d, err := g.Decide(ctx, "a0", 1)
			require.NoError(t, err)
			assert.Equal(t, FromBackend, d.Source)
			assert.Equal(t, BreakerClosed, g.BreakerState())
		})
	}
}

// TestBreakerPerNodeDropsIdleNodes: past maxNodeBreakers nodes, adding one
// drops the breakers that are closed with no failure, and keeps the others.
func TestBreakerPerNodeDropsIdleNodes(t *testing.T) {
	var s breakers
	s.init(1, time.Second)
	open := s.of("open")
	open.record(backendFailed, ticket{}, epoch)
	require.Equal(t, BreakerOpen, open.current())
	for i := range 2 * maxNodeBreakers {
		s.of(fmt.Sprint("n", i))
	}
	assert.LessOrEqual(t, len(*s.nodes.Load()), maxNodeBreakers+1)
	assert.Same(t, open, s.of("open"), "an open node's breaker is kept")
	assert.Equal(t, BreakerOpen, s.state())
}

// clusterKeys returns, for each of cluster's masters, keys whose Redis keys
// (in the slot of the key alone, see redisbatch.StoredKey) are in that
// master's slots.
func clusterKeys(cluster *redistest.Cluster, perMaster int) [][]string {
	n := len(cluster.Servers)
	keys := make([][]string, n)
	for i := 0; ; i++ {
		key := fmt.Sprint("tenant-", i)
		m := redisbatch.HashSlot(key) * n / 16384
		if len(keys[m]) < perMaster {
			keys[m] = append(keys[m], key)
		}
		full := true
		for _, k := range keys {
			full = full && len(k) == perMaster
		}
		if full {
			return keys
		}
	}
}

// TestRealRedisClusterBreakerPerMasterKeepsHealthyMastersOnRedis: on a
// real 3-master cluster, one master killed by its pid opens the breaker of
// that master alone: the keys of the two healthy masters keep being
// decided by Redis (Source FromBackend), while the dead master's keys are
// answered by the failure policy, at once once its breaker is open.
func TestRealRedisClusterBreakerPerMasterKeepsHealthyMastersOnRedis(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t, func(o *redis.ClusterOptions) {
		o.MaxRetries = -1
		o.ContextTimeoutEnabled = true
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout = time.Second
	})
	bucket, err := NewRedisTokenBucket(client, PerSecond(1000), 1000)
	require.NoError(t, err)
	hooks := &recordingHooks{}
	g, err := NewGuard(bucket, GuardConfig{
		Timeout: 200 * time.Millisecond, OnFailure: FailOpen,
		BreakerFailures: 3, BreakerCoolDown: time.Minute, Hooks: hooks,
	})
	require.NoError(t, err)
	ctx := context.Background()
	keys := clusterKeys(cluster, 5)
	for m, ks := range keys {
		for _, k := range ks {
			d, err := g.Decide(ctx, k, 1)
			require.NoError(t, err)
			require.Equal(t, FromBackend, d.Source, "master %d, key %q", m, k)
		}
	}

	assert.Zero(t, testing.AllocsPerRun(100, func() { g.backend.node(keys[1][0]) }), "naming a key's master allocates nothing")
	assert.Equal(t, cluster.Addrs[1], g.backend.node(keys[1][0]))

	cluster.Servers[0].Kill()
	// The dead master's keys fail until its breaker opens.
	for _, k := range keys[0][:3] {
		d, err := g.Decide(ctx, k, 1)
		require.NoError(t, err)
		assert.Equal(t, FromFailOpen, d.Source, "key %q of the dead master", k)
	}
	require.Equal(t, BreakerOpen, g.BreakerState())
	// For a second, well within the cluster's 5 s node timeout: the healthy
	// masters decide every call on their keys, and the dead one's are
	// answered at once.
	start := time.Now()
	rounds := 0
	for time.Since(start) < time.Second {
		rounds++
		for m, ks := range keys {
			for _, k := range ks {
				d, err := g.Decide(ctx, k, 1)
				require.NoError(t, err)
				if m == 0 {
					assert.Equal(t, FromFailOpen, d.Source, "key %q of the dead master", k)
					assert.ErrorIs(t, hooks.last().BackendErr, errBreakerOpen, "the open breaker answers at once, without a call to the dead master")
					continue
				}
				if !assert.Equal(t, FromBackend, d.Source, "master %d, key %q", m, k) {
					return
				}
			}
		}
	}
	t.Logf("%d rounds of %d keys in 1 s after one master of 3 was killed", rounds, 15)
	assert.Equal(t, [][2]BreakerState{{BreakerClosed, BreakerOpen}}, hooks.changes, "one breaker opened, the dead master's")
	var errs []string
	for _, ev := range hooks.events {
		if ev.BackendErr != nil && !strings.Contains(ev.BackendErr.Error(), "circuit breaker open") {
			errs = append(errs, ev.Key)
		}
	}
	assert.Len(t, errs, 3, "three calls paid for the failure: %v", errs)
}

// TestBreakerPerRingShardOnMiniredis: through a Ring of two miniredis
// shards, one shard closed opens its own breaker, and the keys of the other
// keep being decided by Redis.
func TestBreakerPerRingShardOnMiniredis(t *testing.T) {
	a, b := miniredis.RunT(t), miniredis.RunT(t)
	addrA, addrB := a.Addr(), b.Addr()
	ring := redis.NewRing(&redis.RingOptions{
		Addrs:              map[string]string{"a": addrA, "b": addrB},
		MaxRetries:         -1,
		HeartbeatFrequency: time.Hour, // no rebalancing during the test
		DialTimeout:        100 * time.Millisecond,
	})
	t.Cleanup(func() { _ = ring.Close() })
	bucket, err := NewRedisTokenBucket(ring, PerSecond(1000), 1000)
	require.NoError(t, err)
	g, err := NewGuard(bucket, GuardConfig{Timeout: 200 * time.Millisecond, BreakerFailures: 3, BreakerCoolDown: time.Minute})
	require.NoError(t, err)
	shards := map[string][]string{}
	for i := 0; len(shards[addrA]) < 5 || len(shards[addrB]) < 5; i++ {
		key := fmt.Sprint("tenant-", i)
		c, err := ring.GetShardClientForKey(bucket.r.redisKey(key, 0))
		require.NoError(t, err)
		shards[c.Options().Addr] = append(shards[c.Options().Addr], key)
	}
	ctx := context.Background()
	for _, k := range append(shards[addrA], shards[addrB]...) {
		d, err := g.Decide(ctx, k, 1)
		require.NoError(t, err)
		require.Equal(t, FromBackend, d.Source, k)
	}

	a.Close()
	for _, k := range shards[addrA] {
		d, err := g.Decide(ctx, k, 1)
		require.NoError(t, err)
		assert.Equal(t, FromFailOpen, d.Source, k)
	}
	assert.Equal(t, BreakerOpen, g.BreakerState())
	for range 3 {
		for _, k := range shards[addrB] {
			d, err := g.Decide(ctx, k, 1)
			require.NoError(t, err)
			assert.Equal(t, FromBackend, d.Source, "key %q of the live shard", k)
		}
	}
}
