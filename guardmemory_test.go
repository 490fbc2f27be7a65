package ratelimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quotaFleet is a fleet of replicas on one miniredis, each with its own
// client, Fleet and Guard around a Composite of a per-second bucket ("rps",
// 30 a second) and a monthly calendar quota ("month", 120), failing over to
// its Fleet.Fallback (unless cfg says otherwise), with a breaker of 3
// failures and an hour's cool-down, all on one fake clock that the server's TIME follows.
type quotaFleet struct {
	m       *miniredis.Miniredis
	clock   *ratelimittest.Clock
	advance func(time.Duration) // moves the server's TIME and TTLs
	guards  []*Guard
}

func newQuotaFleet(t *testing.T, replicas int, cfg GuardConfig) *quotaFleet {
	t.Helper()
	m, _, advance := miniredisClock(t)
	q := &quotaFleet{m: m, clock: ratelimittest.NewClock(epoch), advance: advance}
	ctx := context.Background()
	var fleets []*Fleet
	for i := range replicas {
		fleets = append(fleets, newTestFleet(t, m, fmt.Sprint("replica-", i)))
	}
	for _, f := range append(fleets, fleets...) {
		require.NoError(t, f.Beat(ctx)) // the second round counts them all
	}
	for _, f := range fleets {
		require.Equal(t, replicas, f.Live())
		client := failFastClient(t, m)
		rps, err := NewRedisTokenBucket(client, PerSecond(30), 30)
		require.NoError(t, err)
		month, err := NewRedisCalendarWindow(client, 120, Calendar{Period: CalendarMonth, Location: time.UTC}, WithClock(q.clock))
		require.NoError(t, err)
		backend, err := NewComposite(Part{Name: "rps", Limiter: rps}, Part{Name: "month", Limiter: month})
		require.NoError(t, err)
		fallback, err := f.Fallback(backend, WithClock(q.clock))
		require.NoError(t, err)
		c := cfg
		c.Clock = q.clock
		c.BreakerFailures, c.BreakerCoolDown = 3, time.Hour
		if c.OnFailure == FailOpen && c.PartFailure == nil {
			c.OnFailure = FailOver
		}
		for _, part := range []string{"rps", "month"} {
			p, ok := c.PartFailure[part]
			if !ok {
				p = c.OnFailure
			}
			if p == FailOver {
				c.Fallback = fallback
			}
		}
		g, err := NewGuard(backend, c)
		require.NoError(t, err)
		q.guards = append(q.guards, g)
	}
	return q
}

// failFastClient returns a client of its own to m, as one replica has,
// that does not retry and dials once: a closed server fails its calls at
// once.
func failFastClient(t *testing.T, m *miniredis.Miniredis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// step moves the fake clock and the server's TIME by d.
func (q *quotaFleet) step(d time.Duration) {
	q.clock.Advance(d)
	q.advance(d)
}

// spend makes calls of 1 on key through the replicas in turn, 100 ms
// apart, until the backend has allowed n, and returns the last Decision.
func (q *quotaFleet) spend(t *testing.T, key string, n int) {
	t.Helper()
	for i, allowed := 0, 0; allowed < n; i++ {
		d, err := q.guards[i%len(q.guards)].Decide(context.Background(), key, 1)
		require.NoError(t, err)
		require.Equal(t, FromBackend, d.Source)
		if d.Allowed {
			allowed++
		}
		q.step(100 * time.Millisecond)
	}
}

// TestGuardFallbackStartsFromWhatTheBackendHadLeft: three replicas spend
// 100 of a monthly quota of 120 on Redis, and Redis goes away. Their
// fallbacks, each a third of the quota, start from a third of what Redis
// last told each replica was left: together they admit at most the 20 left
// plus what Redis admitted after the oldest of those answers (here, 2
// calls), not a whole quota of 120 more. Each failed-over Decision tells
// the truth: both policies, each part's Result under the backend's Limit,
// Source FromFallback.
func TestGuardFallbackStartsFromWhatTheBackendHadLeft(t *testing.T) {
	q := newQuotaFleet(t, 3, GuardConfig{})
	q.spend(t, "acme", 100)

	q.m.Close() // Redis goes away
	ctx := context.Background()
	allowed := 0
	for i := range 600 { // a minute, 10 calls a second: the per-second part never binds
		d, err := q.guards[i%3].Decide(ctx, "acme", 1)
		require.NoError(t, err)
		require.Equal(t, FromFallback, d.Source)
		require.Len(t, d.Parts, 2)
		assert.Equal(t, []string{"rps", "month"}, []string{d.Policies[0].Name, d.Policies[1].Name})
		assert.Equal(t, 30, d.Parts[0].Limit, "the backend's Limit")
		assert.Equal(t, 120, d.Parts[1].Limit, "the backend's Limit")
		if d.Allowed {
			allowed++
		} else {
			assert.Equal(t, "month", d.Policy.Name, "the quota bounds the denials")
			assert.Equal(t, 1, d.PolicyIndex)
		}
		q.step(100 * time.Millisecond)
	}
	t.Logf("the fallbacks admitted %d against the 20 Redis had left", allowed)
	assert.LessOrEqual(t, allowed, 20+2, "what Redis had left, plus what it admitted after the oldest answer a replica remembers")
	assert.GreaterOrEqual(t, allowed, 20-3, "each replica loses at most one unit to rounding")
}

// TestGuardFallbackOfOnePolicyStartsFromTheBackendsState: a bare fallback
// of the backend's size, in front of a backend of one policy, starts from
// what the backend said was left of the key, and a key the backend never
// answered starts full; the memory of a key ends when its window does.
func TestGuardFallbackOfOnePolicyStartsFromTheBackendsState(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend := &stubBackend{res: Result{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: time.Minute}}
	fallback, err := NewFixedWindow(10, time.Hour, WithClock(clock))
	require.NoError(t, err)
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailOver, Fallback: fallback, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = g.Decide(ctx, "spent", 1)
	require.NoError(t, err)

	backend.set(Result{}, errDown)
	count := func(key string) int {
		allowed := 0
		for range 20 {
			d, err := g.Decide(ctx, key, 1)
			require.NoError(t, err)
			require.Equal(t, FromFallback, d.Source)
			if d.Allowed {
				allowed++
			}
		}
		return allowed
	}
	assert.Equal(t, 3, count("spent"), "the 3 the backend had left")
	assert.Equal(t, 10, count("fresh"), "a key the backend never answered: the fallback's whole limit")

	// A memory lasts until the key is full again on the backend.
	backend.set(Result{Allowed: true, Limit: 10, Remaining: 3, ResetAfter: time.Minute}, nil)
	_, err = g.Decide(ctx, "later", 1)
	require.NoError(t, err)
	backend.set(Result{}, errDown)
	clock.Advance(time.Minute)
	assert.Equal(t, 10, count("later"), "the backend's window ended: nothing to start from")
}

// TestGuardFallbackSeedsARateAsItRefilled: the memory of a token bucket
// refills at its rate: a fallback asked half the way to the key's ResetAfter
// starts from half of what was missing given back.
func TestGuardFallbackSeedsARateAsItRefilled(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	m, _, advance := miniredisClock(t)
	backend, err := NewRedisTokenBucket(failFastClient(t, m), PerSecond(10), 100) // 10 a second
	require.NoError(t, err)
	fallback, err := NewTokenBucket(PerSecond(10), 100, WithClock(clock))
	require.NoError(t, err)
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailOver, Fallback: fallback, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	d, err := g.Decide(ctx, "k", 100)
	require.NoError(t, err)
	require.Equal(t, FromBackend, d.Source)
	require.Equal(t, 0, d.Remaining)

	m.Close()
	clock.Advance(5 * time.Second)
	advance(5 * time.Second)
	d, err = g.Decide(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, FromFallback, d.Source)
	assert.Equal(t, 50, d.Remaining, "5 s at 10 a second since Redis said 0")
}

// BenchmarkGuardHotKey measures a Guard's answer from its backend, an
// in-process bucket, failing open (nothing remembered) and failing over to
// a bucket that starts from what the backend had left (each answer
// remembered), on one key and on many keys in parallel.
func BenchmarkGuardHotKey(b *testing.B) {
	for _, policy := range []FailurePolicy{FailOpen, FailOver} {
		name := map[FailurePolicy]string{FailOpen: "FailOpen", FailOver: "FailOver"}[policy]
		b.Run(name, func(b *testing.B) {
			g := benchGuard(b, policy)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = g.Allow(ctx, "hot", 1)
			}
		})
		b.Run(name+"/ManyKeysParallel", func(b *testing.B) {
			g := benchGuard(b, policy)
			ctx := context.Background()
			keys := make([]string, 10_000)
			for i := range keys {
				keys[i] = fmt.Sprint("key:", i)
				_, _ = g.Allow(ctx, keys[i], 1)
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					_, _ = g.Allow(ctx, keys[i%len(keys)], 1)
					i += 7919
				}
			})
		})
	}
}

// benchGuard returns a Guard of policy around a bucket far from its limit.
func benchGuard(b *testing.B, policy FailurePolicy) *Guard {
	backend, err := NewTokenBucket(PerSecond(1e8), 1<<20)
	require.NoError(b, err)
	cfg := GuardConfig{OnFailure: policy}
	if policy == FailOver {
		cfg.Fallback, err = NewTokenBucket(PerSecond(1e8), 1<<20)
		require.NoError(b, err)
	}
	g, err := NewGuard(backend, cfg)
	require.NoError(b, err)
	return g
}

// TestGuardFallbackStartsFromWhatASettleLeft: a Settle through the Guard
// that took more than the call's estimate lowers what the fallback starts
// from; a Reset makes it start full.
func TestGuardFallbackStartsFromWhatASettleLeft(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewFixedWindow(10, time.Hour, WithClock(clock))
	require.NoError(t, err)
	flaky := &flakyBackend{FixedWindow: backend}
	fallback, err := NewFixedWindow(10, time.Hour, WithClock(clock))
	require.NoError(t, err)
	g, err := NewGuard(flaky, GuardConfig{OnFailure: FailOver, Fallback: fallback, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	for _, key := range []string{"settled", "reset"} {
		d, err := g.Decide(ctx, key, 2)
		require.NoError(t, err)
		require.Equal(t, 8, d.Remaining)
	}
	_, err = g.Settle(ctx, "settled", 2, 7) // 5 more: 3 left
	require.NoError(t, err)
	require.NoError(t, g.Reset(ctx, "reset"))

	flaky.down.Store(true)
	d, err := g.Decide(ctx, "settled", 0)
	require.NoError(t, err)
	assert.Equal(t, FromFallback, d.Source)
	assert.Equal(t, 3, d.Remaining, "what the Settle left")
	d, err = g.Decide(ctx, "reset", 0)
	require.NoError(t, err)
	assert.Equal(t, 10, d.Remaining, "a Reset leaves the key full")
}

// flakyBackend is a FixedWindow whose calls fail while down is set; its
// adjustments always reach it.
type flakyBackend struct {
	*FixedWindow
	down atomic.Bool
}

func (f *flakyBackend) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if f.down.Load() {
		return Decision{}, errDown
	}
	return f.FixedWindow.Decide(ctx, key, n)
}

func (f *flakyBackend) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := f.Decide(ctx, key, n)
	return d.Result, err
}

// TestGuardRemembersAtMostRememberKeys: past RememberKeys keys, a new key
// is not remembered (its fallback starts full) until memories of keys that
// are full again are forgotten.
func TestGuardRemembersAtMostRememberKeys(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend := &stubBackend{res: Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: time.Minute}}
	fallback, err := NewFixedWindow(10, time.Hour, WithClock(clock))
	require.NoError(t, err)
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailOver, Fallback: fallback, Clock: clock, RememberKeys: 2})
	require.NoError(t, err)
	ctx := context.Background()
	for _, key := range []string{"a", "b", "c"} {
		_, err := g.Decide(ctx, key, 1)
		require.NoError(t, err)
	}
	assert.Equal(t, 2, g.memory.len())
	clock.Advance(time.Minute) // a and b are full again
	_, err = g.Decide(ctx, "d", 1)
	require.NoError(t, err)
	backend.set(Result{}, errDown)
	d, err := g.Decide(ctx, "d", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "d is remembered once the others are forgotten: 0 left")
	d, err = g.Decide(ctx, "c", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "c was not remembered: its fallback starts full")
}
