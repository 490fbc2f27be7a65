package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// startServerWithoutTIME starts a real redis-server whose TIME command is
// renamed away, as some managed offerings refuse TIME in scripts, and
// checks that a script there cannot call it.
func startServerWithoutTIME(t *testing.T) *redistest.Server {
	server := redistest.Start(t, "--rename-command", "TIME", "")
	client := server.Client(t)
	err := client.Eval(context.Background(), "return redis.call('TIME')", nil).Err()
	require.Error(t, err, "the server still lets scripts call TIME")
	require.Contains(t, err.Error(), "Unknown Redis command")
	return server
}

// twin is a Redis limiter on the caller's clock and the in-process limiter
// that must decide as it does on the same clock. timed is false for the
// fixed window, whose waits run on the server's key expiry, in real time:
// only its Allowed and Remaining are compared. The sliding counter's waits,
// exact to the ns in process, are whole µs on Redis, rounded up: roundUp
// rounds the in-process one so.
type twin struct {
	name            string
	redis, process  func(clock Clock) (Limiter, error)
	timed           bool
	period, maxStep time.Duration
	roundUp         bool
}

// twins are every Redis limiter of this package with its in-process twin
// (limit 5 per 2 s, a lease of 2 s, a window of 1 hour for the fixed
// window), built on a client.
func twins(client redis.Scripter) []twin {
	const limit = 5
	period := 2 * time.Second
	onRedis := func(f func(...RedisOption) (Limiter, error)) func(Clock) (Limiter, error) {
		return func(c Clock) (Limiter, error) { return f(WithCallerClock(c)) }
	}
	inProc := func(f func(...Option) (Limiter, error)) func(Clock) (Limiter, error) {
		return func(c Clock) (Limiter, error) { return f(WithClock(c)) }
	}
	return []twin{
		{"TokenBucket", onRedis(func(o ...RedisOption) (Limiter, error) {
			return NewRedisTokenBucket(client, PerMinute(150), limit, o...)
		}),
			inProc(func(o ...Option) (Limiter, error) { return NewTokenBucket(PerMinute(150), limit, o...) }), true, period, 500 * ms, false},
		{"GCRA", onRedis(func(o ...RedisOption) (Limiter, error) { return NewRedisGCRA(client, limit, period, o...) }),
			inProc(func(o ...Option) (Limiter, error) { return NewGCRA(limit, period, o...) }), true, period, 500 * ms, false},
		{"FixedWindow", onRedis(func(o ...RedisOption) (Limiter, error) { return NewRedisFixedWindow(client, limit, time.Hour, o...) }),
			inProc(func(o ...Option) (Limiter, error) { return NewFixedWindow(limit, time.Hour, o...) }), false, time.Hour, 500 * ms, false},
		{"SlidingLog", onRedis(func(o ...RedisOption) (Limiter, error) { return NewRedisSlidingLog(client, limit, period, o...) }),
			inProc(func(o ...Option) (Limiter, error) { return NewSlidingLog(limit, period, o...) }), true, period, 500 * ms, false},
		{"SlidingCounter", onRedis(func(o ...RedisOption) (Limiter, error) { return NewRedisSlidingCounter(client, 4, period, o...) }),
			inProc(func(o ...Option) (Limiter, error) { return NewSlidingCounter(4, period, o...) }), true, period, 500 * ms, true},
		{"CalendarWindow", onRedis(func(o ...RedisOption) (Limiter, error) {
			return NewRedisCalendarWindow(client, limit, Calendar{Period: CalendarMinute}, o...)
		}), inProc(func(o ...Option) (Limiter, error) {
			return NewCalendarWindow(limit, Calendar{Period: CalendarMinute}, o...)
		}), true, time.Minute, 5 * time.Second, false},
		{"Concurrency", onRedis(func(o ...RedisOption) (Limiter, error) { return NewRedisConcurrency(client, limit, period, o...) }),
			inProc(func(o ...Option) (Limiter, error) { return NewConcurrency(limit, period, o...) }), true, period, 500 * ms, false},
	}
}

func TestRealRedisWithoutTIMEFailsOnTheServersClockAndDecidesOnTheCallersAsInProcess(t *testing.T) {
	t.Parallel()
	server := startServerWithoutTIME(t)
	client := server.Client(t)
	ctx := context.Background()
	for _, kind := range callerClockKinds {
		l, err := kind.new(client, 5, time.Minute)
		require.NoError(t, err)
		_, err = l.Allow(ctx, "k", 1)
		require.ErrorIs(t, err, ErrBackend, kind.name)
		assert.ErrorContains(t, err, "Unknown Redis command", kind.name)
		assert.ErrorContains(t, err, "refuses TIME in scripts, build the limiter WithCallerClock", kind.name)
	}
	for _, tw := range twins(client) {
		t.Run(tw.name, func(t *testing.T) {
			// From 50 s into a minute, so that the calendar window crosses
			// into the next.
			start := epoch.Add(50 * time.Second)
			clock := ratelimittest.NewClock(start)
			onRedis, err := tw.redis(clock)
			require.NoError(t, err)
			inProc, err := tw.process(clock)
			require.NoError(t, err)
			rng := rand.New(rand.NewPCG(7, uint64(len(tw.name))))
			steps := tw.maxStep / (10 * ms)
			allowed, denied := 0, 0
			for i := range 300 {
				clock.Advance(time.Duration(rng.Int64N(int64(steps)+1)) * 10 * ms)
				key := [...]string{"a", "b"}[rng.IntN(2)]
				n := rng.IntN(4)
				want, wantErr := inProc.Allow(ctx, key, n)
				got, err := onRedis.Allow(ctx, fmt.Sprintf("%s:%d:%s", tw.name, start.Unix(), key), n)
				require.NoError(t, wantErr)
				require.NoError(t, err, "step %d", i)
				msg := fmt.Sprintf("step %d at %v: Allow(%q, %d)", i, clock.Now().Sub(start), key, n)
				if tw.roundUp && want.RetryAfter%time.Microsecond != 0 {
					want.RetryAfter += time.Microsecond - want.RetryAfter%time.Microsecond
				}
				if !tw.timed {
					want.RetryAfter, want.ResetAfter, got.RetryAfter, got.ResetAfter = 0, 0, 0, 0
				}
				require.Equal(t, want, got, msg)
				if got.Allowed {
					allowed++
				} else {
					denied++
				}
			}
			t.Logf("%s: %d allowed, %d denied, all as in process", tw.name, allowed, denied)
			assert.Positive(t, allowed)
			assert.Positive(t, denied)
		})
	}
}

func TestRealRedisWithoutTIMECoalescesSettlesAndLeasesOnTheCallersClock(t *testing.T) {
	server := startServerWithoutTIME(t)
	client := server.Client(t)
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)

	// 64 goroutines share 10 tokens that do not refill while the clock
	// stands still: exactly 10 pass, in coalesced batches.
	bucket, err := NewRedisTokenBucket(client, PerSecond(1), 10, WithCallerClock(clock))
	require.NoError(t, err)
	var passed atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				res, err := bucket.Allow(ctx, "hot", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					passed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(10), passed.Load())

	// A Settle, a Refund and a Reset travel in the general form.
	res, err := bucket.Settle(ctx, "hot", 1, 3)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 12 * time.Second}, res)
	clock.Advance(2 * time.Second)
	res, err = bucket.Refund(ctx, "hot", 5)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 10, Remaining: 5, ResetAfter: 5 * time.Second}, res)
	require.NoError(t, bucket.Reset(ctx, "hot"))

	// Leases are granted, extended and released on the caller's clock.
	jobs, err := NewRedisConcurrency(client, 2, time.Second, WithCallerClock(clock))
	require.NoError(t, err)
	lease, d, err := jobs.Acquire(ctx, "job", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clock.Advance(900 * ms)
	lease, err = lease.Extend(ctx)
	require.NoError(t, err)
	clock.Advance(900 * ms)
	_, d, err = jobs.Acquire(ctx, "job", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the extended lease still holds both units")
	assert.Equal(t, 100*ms, d.RetryAfter)
	require.NoError(t, lease.Release(ctx))
	_, d, err = jobs.Acquire(ctx, "job", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed)

	// A Composite of parts on one caller's clock.
	rate, err := NewRedisGCRA(client, 3, 3*time.Second, WithCallerClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "rate", Limiter: rate}, concurrencyPart(t, client, WithCallerClock(clock)))
	require.NoError(t, err)
	for i, want := range []bool{true, true, true, false} {
		res, err := c.Allow(ctx, "{user}", 1)
		require.NoError(t, err)
		assert.Equal(t, want, res.Allowed, "call %d", i)
	}
}

func TestRealRedisWithoutTIMEKeepsAFleetAndAPolicyTableOnTheCallersClock(t *testing.T) {
	server := startServerWithoutTIME(t)
	client := server.Client(t)
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)

	_, err := NewFleet(client, FleetConfig{Name: "fleet", CallerClock: (*ratelimittest.Clock)(nil)})
	require.ErrorIs(t, err, ErrInvalidConfig)
	onServer, err := NewFleet(client, FleetConfig{Name: "fleet", ID: "server"})
	require.NoError(t, err)
	require.ErrorIs(t, onServer.Beat(ctx), ErrBackend)
	a, err := NewFleet(client, FleetConfig{Name: "fleet", ID: "a", Heartbeat: time.Second, CallerClock: clock})
	require.NoError(t, err)
	b, err := NewFleet(client, FleetConfig{Name: "fleet", ID: "b", Heartbeat: time.Second, CallerClock: clock})
	require.NoError(t, err)
	require.NoError(t, a.Beat(ctx))
	require.NoError(t, b.Beat(ctx))
	assert.Equal(t, 2, b.Live())
	// b stops beating: a stops counting it once its TTL (3 s) is within a
	// heartbeat of ending, on the caller's clock.
	clock.Advance(2*time.Second + ms)
	require.NoError(t, a.Beat(ctx))
	assert.Equal(t, 1, a.Live())
	score, err := client.ZScore(ctx, "fleet", "a").Result()
	require.NoError(t, err)
	assert.Equal(t, float64(clock.Now().Add(3*time.Second).UnixMilli()), score)
	bad, err := NewFleet(client, FleetConfig{Name: "fleet", ID: "c", CallerClock: ratelimittest.NewClock(time.Unix(-1, 0))})
	require.NoError(t, err)
	require.ErrorIs(t, bad.Beat(ctx), ErrInvalidConfig)

	onServerTable, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	require.ErrorIs(t, onServerTable.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"k": {Limit: 1, Window: time.Second}}}), ErrBackend)
	table, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans", CallerClock: clock})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"k": {Limit: 1, Window: time.Second}}}))
	require.NoError(t, table.Set(ctx, "j", Policy{Limit: 2, Window: time.Second}))
	require.NoError(t, table.Load(ctx))
	assert.Equal(t, clock.Now().UnixMicro()+1, table.Version(), "max(previous + 1, now): now, then previous + 1")
	p, ok := table.Lookup("j")
	assert.True(t, ok)
	assert.Equal(t, Policy{Limit: 2, Window: time.Second}, p)
	badTable, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans", CallerClock: ratelimittest.NewClock(time.UnixMicro(1 << 52))})
	require.NoError(t, err)
	require.ErrorIs(t, badTable.Set(ctx, "j", Policy{Limit: 3, Window: time.Second}), ErrInvalidConfig)
}
