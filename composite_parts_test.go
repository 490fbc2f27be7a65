// This file holds the kinds as a Composite's parts beyond the kind table's
// Composite of one (kindtable_test.go): sliding counters, sliding logs and
// calendar windows beside other parts, in process and on Redis.

package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompositeOfSlidingCountersDecidesAsItsParts runs one schedule on a
// Composite of a sliding counter per user and one per tenant (the key's
// first letter), in process and on miniredis, and on the bare counters'
// models: a call is allowed iff both parts allow it, and then both take
// it; each part's Result is its model's (a part that would allow a denied
// call reports its state untouched).
func TestCompositeOfSlidingCountersDecidesAsItsParts(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 8))
	ctx := context.Background()
	tenant := func(key string) string { return key[:1] }
	for round := 0; round < sized(3, 30); round++ {
		userLimit, tenantLimit := 1+r.IntN(6), 2+r.IntN(10)
		userWindow := time.Duration(1+r.Int64N(3000)) * time.Millisecond
		tenantWindow := time.Duration(1+r.Int64N(3000)) * time.Millisecond
		clock := ratelimittest.NewClock(epoch)
		user, err := NewSlidingCounter(userLimit, userWindow, WithClock(clock))
		require.NoError(t, err)
		ten, err := NewSlidingCounter(tenantLimit, tenantWindow, WithClock(clock))
		require.NoError(t, err)
		local, err := NewComposite(Part{Name: "user", Limiter: user}, Part{Name: "tenant", Limiter: ten, Key: tenant})
		require.NoError(t, err)
		_, client, advance := miniredisClock(t)
		ruser, err := NewRedisSlidingCounter(client, userLimit, userWindow)
		require.NoError(t, err)
		rten, err := NewRedisSlidingCounter(client, tenantLimit, tenantWindow)
		require.NoError(t, err)
		remote, err := NewComposite(Part{Name: "user", Limiter: ruser}, Part{Name: "tenant", Limiter: rten, Key: tenant})
		require.NoError(t, err)

		models := map[string][2]*counterModel{
			"local":  {newCounterModel(userLimit, userWindow, 1), newCounterModel(tenantLimit, tenantWindow, 1)},
			"remote": {newCounterModel(userLimit, userWindow, time.Microsecond), newCounterModel(tenantLimit, tenantWindow, time.Microsecond)},
		}
		for i, c := range randomSchedule(r, 200, min(userLimit, tenantLimit), userWindow/time.Duration(userLimit), false, "a1", "a2", "b1") {
			c.advance = c.advance.Truncate(time.Microsecond)
			clock.Advance(c.advance)
			advance(c.advance)
			n := min(c.n, userLimit, tenantLimit)
			for name, comp := range map[string]*Composite{"local": local, "remote": remote} {
				m := models[name]
				keys := [2]string{c.key, tenant(c.key)}
				var want [2]Result
				both := true
				for j := range m {
					m[j].advance(c.advance)
					m[j].latest = max(m[j].latest, m[j].now)
					both = both && int64(n) <= m[j].left(keys[j], m[j].latest)
				}
				for j := range m {
					if both {
						want[j] = m[j].allow(keys[j], n)
					} else if int64(n) <= m[j].left(keys[j], m[j].latest) {
						want[j] = m[j].allow(keys[j], 0) // untouched, nothing to wait for
						want[j].Allowed = false
					} else {
						want[j] = m[j].allow(keys[j], n)
					}
				}
				d, err := comp.Decide(ctx, c.key, n)
				require.NoError(t, err)
				require.Equal(t, both, d.Allowed, "%s round %d step %d", name, round, i)
				require.Equal(t, want[:], d.Parts, "%s round %d step %d: %+v", name, round, i, c)
			}
		}
	}
}

func TestCompositeOfSlidingCountersRefundsSettlesAndResets(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	a, err := NewSlidingCounter(10, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	b, err := NewFixedWindow(10, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	_, client, advance := miniredisClock(t)
	ra, err := NewRedisSlidingCounter(client, 10, 10*time.Second)
	require.NoError(t, err)
	rb, err := NewRedisFixedWindow(client, 10, 10*time.Second)
	require.NoError(t, err)
	for _, x := range []struct {
		parts   []Limiter
		advance func(time.Duration)
	}{{[]Limiter{a, b}, clock.Advance}, {[]Limiter{ra, rb}, advance}} {
		c, err := NewComposite(Part{Name: "sliding", Limiter: x.parts[0]}, Part{Name: "fixed", Limiter: x.parts[1]})
		require.NoError(t, err)
		_, err = c.Allow(ctx, "k", 8)
		require.NoError(t, err)
		x.advance(10 * time.Second) // the counter's 8 weigh 8; the window has ended
		d, err := c.Decide(ctx, "k", 4)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, []Result{no(10, 2, 2500*ms, 10*time.Second), {Limit: 10, Remaining: 10}}, d.Parts)
		_, err = c.Settle(ctx, "k", 0, 2)
		require.NoError(t, err)
		d, err = c.Decide(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, []Result{ok(10, 0, 20*time.Second), ok(10, 8, 10*time.Second)}, d.Parts, "a Settle counts in both")
		_, err = c.Refund(ctx, "k", 2)
		require.NoError(t, err)
		d, err = c.Decide(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, []Result{ok(10, 2, 10*time.Second), ok(10, 10, 0)}, d.Parts, "a Refund gives back to both")
		require.NoError(t, c.Reset(ctx, "k"))
		d, err = c.Decide(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, []Result{ok(10, 10, 0), ok(10, 10, 0)}, d.Parts, "Reset forgets both")
	}
}

// logAndWindow builds a sliding log of 5 per second and a fixed window of 7
// per 1.5 s, with prefix for the Redis ones (ignored in process).
type logAndWindow func(prefix string) (Adjuster, Adjuster)

func TestCompositeSlidingLogPartDecidesAsTheLimiterAlone(t *testing.T) {
	t.Parallel()
	t.Run("in process", func(t *testing.T) {
		clock := ratelimittest.NewClock(epoch)
		build := func(string) (Adjuster, Adjuster) {
			l, err := NewSlidingLog(5, time.Second, WithClock(clock))
			require.NoError(t, err)
			w, err := NewFixedWindow(7, 1500*time.Millisecond, WithClock(clock))
			require.NoError(t, err)
			return l, w
		}
		checkLogPart(t, build, clock.Advance)
	})
	t.Run("miniredis", func(t *testing.T) {
		_, client, advance := miniredisClock(t)
		build := func(prefix string) (Adjuster, Adjuster) {
			l, err := NewRedisSlidingLog(client, 5, time.Second, WithKeyPrefix(prefix+"l:"))
			require.NoError(t, err)
			w, err := NewRedisFixedWindow(client, 7, 1500*time.Millisecond, WithKeyPrefix(prefix+"w:"))
			require.NoError(t, err)
			return l, w
		}
		checkLogPart(t, build, advance)
	})
}

// checkLogPart runs a random stream on a Composite of a sliding log and a
// fixed window, and on the two limiters alone: a call is allowed iff both
// would allow it (as their peeks tell), every part reports what the
// limiter alone does, and a Refund, Settle or Reset reaches both.
func checkLogPart(t *testing.T, build logAndWindow, advance func(time.Duration)) {
	ctx := context.Background()
	log, window := build("alone:")
	plog, pwindow := build("part:")
	c, err := NewComposite(Part{Name: "log", Limiter: plog}, Part{Name: "window", Limiter: pwindow})
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(24, 5))
	stream := logStream(5, time.Second)
	stream.mix.allow = 6 // never above either limit
	for i, op := range stream.ops(r, sized(200, 400), "a", "b") {
		advance(op.advance)
		msg := fmt.Sprintf("step %d: %v", i, op)
		if op.kind != "allow" {
			_, err := op.apply(ctx, c)
			require.NoError(t, err, msg)
			_, err = op.apply(ctx, log)
			require.NoError(t, err, msg)
			_, err = op.apply(ctx, window)
			require.NoError(t, err, msg)
			continue
		}
		lp, err := log.Allow(ctx, op.key, 0)
		require.NoError(t, err, msg)
		wp, err := window.Allow(ctx, op.key, 0)
		require.NoError(t, err, msg)
		var want []Result
		if op.n <= lp.Remaining && op.n <= wp.Remaining {
			lr, err := log.Allow(ctx, op.key, op.n)
			require.NoError(t, err, msg)
			wr, err := window.Allow(ctx, op.key, op.n)
			require.NoError(t, err, msg)
			want = []Result{lr, wr}
		} else {
			want = []Result{lp, wp}
			for j, l := range []Limiter{log, window} {
				if own := []Result{lp, wp}[j]; op.n > own.Remaining {
					want[j], err = l.Allow(ctx, op.key, op.n)
					require.NoError(t, err, msg)
				}
				want[j].Allowed = false
			}
		}
		_, got, err := decideParts(ctx, c, op.key, op.n)
		require.NoError(t, err, msg)
		if !assert.Equal(t, want, got, msg) {
			return
		}
	}
}

func TestCompositeOfOneRedisSlidingLogLimitsUserAndTenant(t *testing.T) {
	t.Parallel()
	_, client, _ := miniredisClock(t)
	var scripter redis.Scripter = client
	l, err := NewRedisSlidingLog(scripter, 2, time.Minute)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "per-user", Limiter: l}, Part{Name: "per-tenant", Limiter: l, Key: tenantKey})
	require.NoError(t, err)
	d, err := c.Decide(context.Background(), "a1", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	d, err = c.Decide(context.Background(), "a2", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "per-tenant", d.Policy.Name)
	assert.Equal(t, time.Minute, d.RetryAfter)
}

func TestDenyCacheOverASlidingLogKeepsADenialForItsCostOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingLog(3, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	c, err := NewDenyCache(l, DenyCacheConfig{MaxAge: time.Minute, Clock: clock})
	require.NoError(t, err)
	_, err = c.Allow(ctx, "k", 1) // at 0
	require.NoError(t, err)
	clock.Advance(5 * time.Second)
	_, err = c.Allow(ctx, "k", 2) // at 5 s
	require.NoError(t, err)
	// 3 waits for both entries to leave, at 15 s; 1 only for the first,
	// at 10 s: a fixed window's reading of the denial would deny it.
	res, err := c.Allow(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, no(3, 0, 10*time.Second, 10*time.Second), res)
	clock.Advance(5 * time.Second)
	res, err = c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 0, 10*time.Second), res)
	d, err := c.Decide(ctx, "k", 3)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 10*time.Second, d.RetryAfter)
}

func TestSlidingLogReportsToItsHooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hooks := &recordingHooks{}
	l, err := NewSlidingLog(2, time.Minute, WithClock(ratelimittest.NewClock(epoch)), WithHooks(hooks), WithName("logins"))
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 1)
	require.NoError(t, err)
	ev := hooks.last()
	assert.Equal(t, "logins", ev.Limiter)
	assert.Equal(t, KeyDigest("k"), ev.Key)
	assert.Equal(t, no(2, 0, time.Minute, time.Minute), ev.Result)
	assert.Equal(t, Policy{Limit: 2, Window: time.Minute}, ev.Policy.Policy)
	_, err = l.Allow(ctx, "k", 3)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.ErrorIs(t, hooks.last().Err, ErrCostExceedsLimit)
}

func TestCompositeOfKeyedSlidingLogsKeepsItsDenialsGradual(t *testing.T) {
	t.Parallel()
	l, err := NewSlidingLog(3, time.Minute, WithClock(ratelimittest.NewClock(epoch)), WithPolicyFunc(everyKey(2, time.Second)))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "log", Limiter: l})
	require.NoError(t, err)
	d, err := c.Decide(context.Background(), "k", 2)
	require.NoError(t, err)
	require.Len(t, d.rules, 1)
	assert.True(t, d.rules[0].gradual, "a sliding log's units leave one by one, whatever its policy")
}

// perMinuteAndPerDay is a Composite of 3 a minute (a token bucket) and 5
// a day of Berlin's wall clock, on one ratelimittest.Clock reading at.
func perMinuteAndPerDay(t *testing.T, at time.Time, opts ...Option) (*Composite, *CalendarWindow, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.NewClock(at)
	minute, err := NewGCRA(3, time.Minute, WithClock(clock))
	require.NoError(t, err)
	day, err := NewCalendarWindow(5, Calendar{Period: CalendarDay, Location: zone(t, "Europe/Berlin")}, append(opts, WithClock(clock))...)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "minute", Limiter: minute}, Part{Name: "day", Limiter: day})
	require.NoError(t, err)
	return c, day, clock
}

func TestCompositeWithACalendarPartTakesAllOrNothing(t *testing.T) {
	ctx := context.Background()
	// 2026-10-25 in Berlin lasts 25 hours, from 22:00 UTC on the 24th.
	c, day, clock := perMinuteAndPerDay(t, utc(2026, 10, 24, 23, 0))
	d, err := c.Decide(ctx, "k", 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, ok(5, 2, 24*time.Hour), d.Parts[1])
	d, _ = c.Decide(ctx, "k", 1)
	assert.False(t, d.Allowed, "the minute is used up")
	assert.Equal(t, Result{Limit: 5, Remaining: 2, ResetAfter: 24 * time.Hour}, d.Parts[1], "the day is untouched")
	clock.Advance(time.Minute)
	d, _ = c.Decide(ctx, "k", 3)
	assert.False(t, d.Allowed, "the day has 2 left")
	assert.Equal(t, "day", d.Policy.Name)
	assert.Equal(t, no(5, 2, 24*time.Hour-time.Minute, 24*time.Hour-time.Minute), d.Parts[1])
	res, err := day.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 2, 24*time.Hour-time.Minute), res, "the part alone sees the Composite's count")

	res, err = c.Refund(ctx, "k", 2, TakenAt(utc(2026, 10, 24, 21, 0)))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Remaining, "taken the day before: the day gives nothing back")
	_, err = c.Refund(ctx, "k", 2)
	require.NoError(t, err)
	res, _ = day.Allow(ctx, "k", 0)
	assert.Equal(t, 4, res.Remaining)
	_, err = c.Settle(ctx, "k", 0, 4)
	require.NoError(t, err)
	res, _ = day.Allow(ctx, "k", 0)
	assert.Equal(t, 0, res.Remaining)
	require.NoError(t, c.Reset(ctx, "k"))
	res, _ = day.Allow(ctx, "k", 0)
	assert.Equal(t, ok(5, 5, 0), res)

	clock.Set(utc(2026, 10, 25, 23, 0)) // the next day, the count is gone
	d, _ = c.Decide(ctx, "j", 1)
	assert.Equal(t, ok(5, 4, 24*time.Hour), d.Parts[1])
}

func TestCompositeCalendarPartWithPolicyFunc(t *testing.T) {
	ctx := context.Background()
	plans := WithPolicyFunc(func(_ context.Context, key string) (Policy, error) {
		if key == "pro" {
			return Policy{Limit: 2, Window: time.Hour}, nil
		}
		return Policy{}, nil
	})
	c, _, clock := perMinuteAndPerDay(t, utc(2026, 11, 30, 10, 30), plans)
	d, err := c.Decide(ctx, "pro", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, 30*time.Minute), d.Parts[1], "the pro plan: 2 an hour")
	clock.Advance(30 * time.Minute)
	d, _ = c.Decide(ctx, "pro", 2)
	assert.Equal(t, ok(2, 0, time.Hour), d.Parts[1], "the next hour")
	d, _ = c.Decide(ctx, "free", 2)
	assert.Equal(t, ok(5, 3, 12*time.Hour), d.Parts[1], "the limiter's own: 5 a day of Berlin (UTC+1), at 11:00 UTC")
}

func TestRedisCompositeWithACalendarPartDecidesAsInProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	berlin := zone(t, "Europe/Berlin")
	at := utc(2026, 10, 25, 20, 0) // an hour before the 25-hour day ends
	clock := ratelimittest.NewClock(at)
	_, client, move := redistest.Miniredis(t, at)
	plans := WithPolicyFunc(func(_ context.Context, key string) (Policy, error) {
		if key == "pro" {
			return Policy{Limit: 4, Window: time.Hour}, nil
		}
		return Policy{}, nil
	})
	gcra, err := NewGCRA(3, time.Minute, WithClock(clock))
	require.NoError(t, err)
	day, err := NewCalendarWindow(5, Calendar{Period: CalendarDay, Location: berlin}, plans, WithClock(clock))
	require.NoError(t, err)
	local, err := NewComposite(Part{Name: "minute", Limiter: gcra}, Part{Name: "day", Limiter: day})
	require.NoError(t, err)
	rgcra, err := NewRedisGCRA(client, 3, time.Minute)
	require.NoError(t, err)
	rday, err := NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay, Location: berlin}, plans, WithClock(clock))
	require.NoError(t, err)
	remote, err := NewComposite(Part{Name: "minute", Limiter: rgcra}, Part{Name: "day", Limiter: rday})
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(25, 10))
	now := at
	for i := range 200 {
		d := time.Duration(rng.Int64N(int64(3*time.Minute/time.Millisecond))) * time.Millisecond
		clock.Advance(d)
		move(d)
		now = now.Add(d)
		kind := 3 + rng.IntN(5)
		if rng.IntN(8) == 0 {
			kind = rng.IntN(3)
		}
		key := []string{"a", "pro"}[rng.IntN(2)]
		n := rng.IntN(4)
		takenAt := now.Add(-time.Duration(rng.Int64N(int64(time.Hour))))
		want, werr := calendarOp(ctx, local, kind, key, n, takenAt)
		got, gerr := calendarOp(ctx, remote, kind, key, n, takenAt)
		msg := fmt.Sprintf("call %d at %v: op %d, key %q, n %d", i, now, kind, key, n)
		require.Equal(t, werr, gerr, msg)
		require.Equal(t, want.Result, got.Result, msg)
		require.Equal(t, want.Parts, got.Parts, msg)
	}
}

func TestFleetFallbackOfACalendarWindowSharesItsLimitInTheSameWindows(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	a, b := newTestFleet(t, m, "a"), newTestFleet(t, m, "b")
	for _, f := range []*Fleet{a, b, a} {
		require.NoError(t, f.Beat(ctx))
	}
	cal := Calendar{Period: CalendarDay, Location: zone(t, "Europe/Berlin")}
	backend, err := NewRedisCalendarWindow(client, 10, cal, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	clock := ratelimittest.NewClock(epoch) // midnight UTC: 01:00 in Berlin
	fb, err := a.Fallback(backend, WithClock(clock))
	require.NoError(t, err)
	require.IsType(t, &CalendarWindow{}, fb)
	res, err := fb.Allow(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 0, 23*time.Hour), res, "half the day's limit, to the end of Berlin's day")
	res, _ = fb.Allow(ctx, "k", 1)
	assert.False(t, res.Allowed)
	clock.Advance(23 * time.Hour)
	res, _ = fb.Allow(ctx, "k", 5)
	assert.True(t, res.Allowed, "the next day")
}
