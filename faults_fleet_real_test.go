package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// checkOneBreakerCycle checks that changes, a replica's breaker changes
// over one outage, are one cycle: closed → open, then a failed probe
// (open → half-open → open) any number of times, then a probe that closes
// it (open → half-open → closed).
func checkOneBreakerCycle(t *testing.T, changes [][2]BreakerState, msgAndArgs ...any) {
	t.Helper()
	closedOpen := [2]BreakerState{BreakerClosed, BreakerOpen}
	probe := [2]BreakerState{BreakerOpen, BreakerHalfOpen}
	failed := [2]BreakerState{BreakerHalfOpen, BreakerOpen}
	closes := [2]BreakerState{BreakerHalfOpen, BreakerClosed}
	ok := len(changes) >= 3 && len(changes)%2 == 1 && changes[0] == closedOpen && changes[len(changes)-1] == closes
	for i := 1; ok && i < len(changes)-1; i += 2 {
		ok = changes[i] == probe && (changes[i+1] == failed || i+1 == len(changes)-1)
	}
	assert.True(t, ok, "%v: one open → probe → close cycle, got %v", fmt.Sprint(msgAndArgs...), changes)
}

// TestRealRedisFleetQuotaAndBreakerThroughAPauseAndAKill: a fleet of three
// replicas in one process, each with its own client, Fleet and Guard
// around a Composite of a per-second bucket (30 a second shared) and a
// monthly quota (100), failing over to its Fleet.Fallback, under traffic
// far above the per-second limit. Redis is paused by SIGSTOP once the quota
// is down to about 20, resumed, then killed by SIGKILL once the quota is
// spent, and restarted. In each outage, the fallbacks together admit on the
// quota no more than the documented bound, the sum over replicas of
// ⌊Rᵢ × ⌊100/3⌋ / 100⌋, Rᵢ being what Redis last told replica i was left;
// and each replica's breaker makes exactly one open → probe → close cycle,
// counted through its hooks.
func TestRealRedisFleetQuotaAndBreakerThroughAPauseAndAKill(t *testing.T) {
	const (
		replicas = 3
		quota    = 100
		outage   = 2 * time.Second
	)
	month := Calendar{Period: CalendarMonth, Location: time.UTC}
	if _, end := month.window(time.Now()); time.Until(end) < time.Minute {
		t.Skipf("the month ends at %v, within the test", end)
	}
	server := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	var beats sync.WaitGroup
	t.Cleanup(func() { cancel(); beats.Wait() })

	type replica struct {
		fleet *Fleet
		guard *Guard
		hooks *recordingHooks
		// left is the quota's Remaining in the replica's latest answer from
		// Redis.
		left atomic.Int64
	}
	rs := make([]*replica, replicas)
	for i := range rs {
		client := productionClient(t, server)
		fleet, err := NewFleet(client, FleetConfig{
			Name: "fleet", ID: fmt.Sprint("replica-", i), Heartbeat: 100 * time.Millisecond,
			// A margin of 1.8 s for late heartbeats: on a loaded machine
			// a heartbeat 100 ms late would drop a replica from the
			// others' count, and their shares would grow.
			TTL: 2 * time.Second,
		})
		require.NoError(t, err)
		rps, err := NewRedisTokenBucket(client, PerSecond(30), 30)
		require.NoError(t, err)
		quotaPart, err := NewRedisCalendarWindow(client, quota, month)
		require.NoError(t, err)
		backend, err := NewComposite(Part{Name: "rps", Limiter: rps}, Part{Name: "month", Limiter: quotaPart})
		require.NoError(t, err)
		fallback, err := fleet.Fallback(backend)
		require.NoError(t, err)
		hooks := &recordingHooks{}
		guard, err := NewGuard(backend, GuardConfig{
			Timeout: 100 * time.Millisecond, OnFailure: FailOver, Fallback: fallback,
			BreakerFailures: 3, BreakerCoolDown: 500 * time.Millisecond, Hooks: hooks,
		})
		require.NoError(t, err)
		require.NoError(t, fleet.Beat(ctx))
		rs[i] = &replica{fleet: fleet, guard: guard, hooks: hooks}
	}
	for _, r := range rs {
		beats.Go(func() { _ = r.fleet.Run(ctx) })
	}
	require.Eventually(t, func() bool {
		for _, r := range rs {
			if r.fleet.Live() != replicas {
				return false
			}
		}
		return true
	}, 2*time.Second, 10*time.Millisecond, "every replica counts 3")

	// Traffic: each replica calls every 3 ms; the phase says what is
	// counted.
	const (
		up = iota
		paused
		killed
		phases
	)
	var phase atomic.Int32
	var fromRedis atomic.Int64             // allowed by Redis, all phases
	var fromFallbacks [phases]atomic.Int64 // allowed by a fallback, per phase
	stop := make(chan struct{})
	var traffic sync.WaitGroup
	for _, r := range rs {
		traffic.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(3 * time.Millisecond):
				}
				p := phase.Load()
				d, err := r.guard.Decide(context.Background(), "acme", 1)
				if !assert.NoError(t, err) {
					return
				}
				switch {
				case d.Source == FromBackend:
					r.left.Store(int64(d.Parts[1].Remaining))
					if d.Allowed {
						fromRedis.Add(1)
					}
				case d.Source == FromFallback && d.Allowed:
					fromFallbacks[p].Add(1)
				}
			}
		})
	}
	defer func() { close(stop); traffic.Wait() }()

	// bound is the documented bound of an outage: each replica's share of
	// what Redis last told it was left, its share being of the replicas
	// its Fleet counts (3, unless a heartbeat was late).
	bound := func() int64 {
		var b int64
		for _, r := range rs {
			b += r.left.Load() * int64(quota/r.fleet.Live()) / quota
		}
		return b
	}
	// recovered waits until every replica has its breaker closed and an
	// answer from Redis.
	recovered := func(what string) {
		require.Eventually(t, func() bool {
			for _, r := range rs {
				if r.guard.BreakerState() != BreakerClosed {
					return false
				}
				r.hooks.mu.Lock()
				last := r.hooks.events[len(r.hooks.events)-1].Source
				r.hooks.mu.Unlock()
				if last != FromBackend {
					return false
				}
			}
			return true
		}, 5*time.Second, 10*time.Millisecond, "every replica back on Redis after %s", what)
	}
	changes := func() []int {
		n := make([]int, len(rs))
		for i, r := range rs {
			r.hooks.mu.Lock()
			n[i] = len(r.hooks.changes)
			r.hooks.mu.Unlock()
		}
		return n
	}
	cycles := func(from []int, what string) {
		for i, r := range rs {
			r.hooks.mu.Lock()
			got := append([][2]BreakerState(nil), r.hooks.changes[from[i]:]...)
			r.hooks.mu.Unlock()
			checkOneBreakerCycle(t, got, "replica ", i, ", ", what)
		}
	}

	require.Eventually(t, func() bool { return fromRedis.Load() >= quota-20 }, 10*time.Second, time.Millisecond, "Redis spends the quota down to about 20")
	before := changes()
	assert.Equal(t, []int{0, 0, 0}, before, "no breaker change while Redis answers")

	// Outage 1: paused by SIGSTOP.
	phase.Store(paused)
	server.Pause()
	time.Sleep(outage / 10)
	left := quota - fromRedis.Load() // the calls Redis answered before it stopped are in
	time.Sleep(outage - outage/10)
	pauseBound := bound() // the replicas' latest answers, all from before the pause
	phase.Store(up)
	server.Resume()
	recovered("SIGCONT")
	pausedAllowed := fromFallbacks[paused].Load()
	t.Logf("paused %v: the fallbacks admitted %d of the quota; bound %d; Redis had %d left", outage, pausedAllowed, pauseBound, left)
	assert.LessOrEqual(t, pausedAllowed, pauseBound, "the quota's admissions while paused")
	assert.Positive(t, pausedAllowed, "the fallbacks still serve what was left")
	cycles(before, "paused")

	// Redis spends the rest of the quota.
	require.Eventually(t, func() bool {
		for _, r := range rs {
			if r.left.Load() != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, time.Millisecond, "Redis spends the quota")
	before = changes()

	// Outage 2: killed by SIGKILL, then restarted (empty: it persists
	// nothing).
	phase.Store(killed)
	server.Kill()
	time.Sleep(outage)
	killBound := bound()
	phase.Store(up)
	server.Restart(t)
	recovered("a restart")
	killedAllowed := fromFallbacks[killed].Load()
	t.Logf("killed %v: the fallbacks admitted %d of the spent quota; bound %d", outage, killedAllowed, killBound)
	assert.Zero(t, killBound)
	assert.LessOrEqual(t, killedAllowed, killBound, "a spent quota stays spent while Redis is dead")
	cycles(before, "killed")
}
