package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// Fleets of replicas on a real redis-server: each replica has a client of
// its own (its own connections), as separate processes would.

// replica is one replica of a fleet test: its membership and its Guard.
type replica struct {
	fleet *Fleet
	guard *Guard
}

// startReplicas makes n replicas on server, each with its own client, a
// Fleet beating every heartbeat (started, and stopped at the end of the
// test), and a FailOver Guard around the limiter newBackend makes on its
// client, whose fallback the Fleet sizes.
func startReplicas(t *testing.T, server *redistest.Server, n int, heartbeat time.Duration, newBackend func(redis.Scripter) (Limiter, error)) []replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	replicas := make([]replica, n)
	for i := range replicas {
		client := productionClient(t, server)
		// A TTL of 20 heartbeats: on a loaded machine a heartbeat a
		// heartbeat late would drop a replica from the others' counts.
		fleet, err := NewFleet(client, FleetConfig{Name: "fleet", ID: fmt.Sprint("replica-", i), Heartbeat: heartbeat, TTL: 20 * heartbeat})
		require.NoError(t, err)
		backend, err := newBackend(client)
		require.NoError(t, err)
		fallback, err := fleet.Fallback(backend)
		require.NoError(t, err)
		guard, err := NewGuard(backend, GuardConfig{
			Timeout: 100 * time.Millisecond, OnFailure: FailOver, Fallback: fallback,
			BreakerFailures: 3, BreakerCoolDown: 200 * time.Millisecond,
		})
		require.NoError(t, err)
		require.NoError(t, fleet.Beat(ctx), "ready before serving")
		replicas[i] = replica{fleet, guard}
	}
	for _, r := range replicas {
		wg.Go(func() { _ = r.fleet.Run(ctx) })
	}
	return replicas
}

// liveCounts returns each replica's Live.
func liveCounts(replicas []replica) []int {
	counts := make([]int, len(replicas))
	for i, r := range replicas {
		counts[i] = r.fleet.Live()
	}
	return counts
}

// TestRealRedisFleetFallbacksKeepTheSharedLimitWhileRedisIsDown: three
// replicas share 30 per second on one Redis with even traffic, far above
// the limit; Redis is killed mid-run (or, for the token bucket, paused by
// SIGSTOP, where every call waits out the Guard's timeout until the breaker
// opens). While it is down, the fleet's
// fallbacks together allow no more than the shared limit × 1.1 plus one
// burst per replica; after a restart every replica is counted again and
// Redis decides again.
func TestRealRedisFleetFallbacksKeepTheSharedLimitWhileRedisIsDown(t *testing.T) {
	const (
		n      = 3
		limit  = 30 // per second, a burst of 30
		outage = 2 * time.Second
	)
	bucket := func(c redis.Scripter) (Limiter, error) { return NewRedisTokenBucket(c, PerSecond(limit), limit) }
	window := func(c redis.Scripter) (Limiter, error) { return NewRedisFixedWindow(c, limit, time.Second) }
	for _, tc := range []struct {
		name       string
		newBackend func(redis.Scripter) (Limiter, error)
		pause      bool // SIGSTOP and SIGCONT, not kill and restart
	}{
		{"RedisTokenBucket", bucket, false},
		{"RedisFixedWindow", window, false},
		{"RedisTokenBucket/paused", bucket, true},
	} {
		name, newBackend := tc.name, tc.newBackend
		t.Run(name, func(t *testing.T) {
			// Each case has servers of its own and mostly waits out its
			// outage: the three overlap, and the test holds the serial
			// phase for one outage, not three.
			t.Parallel()
			server := redistest.Start(t)
			replicas := startReplicas(t, server, n, 100*time.Millisecond, newBackend)
			require.Eventually(t, func() bool { return fmt.Sprint(liveCounts(replicas)) == "[3 3 3]" },
				2*time.Second, 10*time.Millisecond, "every replica sees 3 within a heartbeat")

			var killed atomic.Bool
			var fromBackend, fromFallback, afterKill atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for _, r := range replicas {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						down := killed.Load()
						d, err := r.guard.Decide(context.Background(), "tenant", 1)
						assert.NoError(t, err)
						switch {
						case d.Source == FromBackend && down:
							afterKill.Add(1)
						case d.Source == FromBackend && d.Allowed:
							fromBackend.Add(1)
						case d.Source == FromFallback && d.Allowed:
							fromFallback.Add(1)
						}
						time.Sleep(2 * time.Millisecond) // even traffic: about 500 calls per second per replica
					}
				})
			}
			time.Sleep(500 * time.Millisecond) // Redis decides for a while
			killed.Store(true)
			if tc.pause {
				server.Pause()
			} else {
				server.Kill()
			}
			start := time.Now()
			time.Sleep(outage)
			close(stop)
			wg.Wait()
			down := time.Since(start)

			assert.Positive(t, fromBackend.Load(), "Redis decided before the kill")
			assert.Zero(t, afterKill.Load(), "nothing came from Redis after the kill")
			assert.Equal(t, []int{3, 3, 3}, liveCounts(replicas), "each share stays as it was while Redis is down")
			// The shared limit over the outage: limit per second; one burst
			// per replica: its share of the burst.
			shared := float64(limit) * down.Seconds()
			bound := int64(shared*1.1) + n*(limit/n)
			allowed := fromFallback.Load()
			t.Logf("%s: %d allowed by the fallbacks in %v of outage; shared limit %.0f, bound %d", name, allowed, down.Round(time.Millisecond), shared, bound)
			assert.LessOrEqual(t, allowed, bound)
			assert.GreaterOrEqual(t, float64(allowed), shared*0.8, "the fleet still serves near the limit")

			if tc.pause {
				server.Resume()
			} else {
				server.Restart(t)
			}
			require.Eventually(t, func() bool {
				d, err := replicas[0].guard.Decide(context.Background(), "tenant", 0)
				return err == nil && d.Source == FromBackend
			}, 5*time.Second, 20*time.Millisecond, "Redis decides again")
			assert.Eventually(t, func() bool { return fmt.Sprint(liveCounts(replicas)) == "[3 3 3]" },
				2*time.Second, 10*time.Millisecond)
		})
	}
}

// TestRealRedisFleetResizesWhenAReplicaJoinsOrLeaves: with a 50 ms heartbeat
// and a 200 ms TTL, a replica that joins or leaves is counted by every
// other within a heartbeat, and one that dies without leaving within TTL;
// each replica's fallback share follows.
func TestRealRedisFleetResizesWhenAReplicaJoinsOrLeaves(t *testing.T) {
	const heartbeat, ttl = 50 * time.Millisecond, 200 * time.Millisecond
	const slack = 250 * time.Millisecond // scheduling on a loaded machine; fake time checks the exact bounds
	server := redistest.Shared(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	run := func(id string, client *redis.Client) (*Fleet, context.CancelFunc) {
		f, err := NewFleet(client, FleetConfig{Name: "fleet", ID: id, Heartbeat: heartbeat, TTL: ttl})
		require.NoError(t, err)
		rctx, stop := context.WithCancel(ctx)
		wg.Go(func() { _ = f.Run(rctx) })
		return f, stop
	}
	a, _ := run("a", productionClient(t, server))
	b, stopB := run("b", productionClient(t, server))
	backend, err := NewRedisTokenBucket(productionClient(t, server), PerSecond(12), 12)
	require.NoError(t, err)
	fallback, err := a.Fallback(backend)
	require.NoError(t, err)
	limitOf := func() int {
		ps, err := fallback.(Decider).Policies(ctx, "k")
		require.NoError(t, err)
		return ps[0].Limit
	}
	// within waits until a and others all count want, and returns how
	// long that took.
	within := func(want int, others ...*Fleet) time.Duration {
		start := time.Now()
		require.Eventually(t, func() bool {
			for _, f := range append(others, a) {
				if f.Live() != want {
					return false
				}
			}
			return true
		}, 5*time.Second, time.Millisecond, "want %d live", want)
		return time.Since(start)
	}
	within(2, b)
	assert.Equal(t, 6, limitOf())

	// c joins.
	cClient := productionClient(t, server)
	c, stopC := run("c", cClient)
	took := within(3, b, c)
	t.Logf("join seen by all in %v", took)
	assert.LessOrEqual(t, took, heartbeat+slack, "within a heartbeat")
	assert.Equal(t, 4, limitOf())

	// c dies: its connections go, so it neither beats again nor leaves.
	require.NoError(t, cClient.Close())
	took = within(2, b)
	t.Logf("death seen by all in %v", took)
	assert.LessOrEqual(t, took, ttl+slack, "within TTL")
	assert.Equal(t, 6, limitOf())
	stopC()

	// b stops: it leaves at once.
	stopB()
	took = within(1)
	t.Logf("leave seen in %v", took)
	assert.LessOrEqual(t, took, heartbeat+slack, "within a heartbeat")
	assert.Equal(t, 12, limitOf())
}
