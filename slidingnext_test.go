package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nextPlace is where a NextUnit test of the sliding kinds runs: in process
// on a fake clock, on miniredis whose TIME follows it, or on a real
// redis-server deciding on it (WithCallerClock). client is nil in process.
type nextPlace struct {
	name    string
	client  redis.Scripter
	opts    func(clock *ratelimittest.Clock) []RedisOption // the options that put a limiter on the clock
	advance func(clock *ratelimittest.Clock, d time.Duration)
}

// nextPlaces returns the three places, the real server started for t
// (skipped without redis-server, as redistest does).
func nextPlaces(t *testing.T) []nextPlace {
	t.Helper()
	_, mini, move := miniredisClock(t)
	places := []nextPlace{
		{"in process", nil, func(c *ratelimittest.Clock) []RedisOption { return []RedisOption{WithClock(c)} }, func(c *ratelimittest.Clock, d time.Duration) { c.Advance(d) }},
		{"miniredis", mini, func(*ratelimittest.Clock) []RedisOption { return nil }, func(c *ratelimittest.Clock, d time.Duration) { c.Advance(d); move(d) }},
	}
	if real := startRealOrSkip(t); real != nil {
		places = append(places, nextPlace{"real server", real, func(c *ratelimittest.Clock) []RedisOption { return []RedisOption{WithCallerClock(c)} },
			func(c *ratelimittest.Clock, d time.Duration) { c.Advance(d) }})
	}
	return places
}

// startRealOrSkip returns a client of a real redis-server started for t,
// or nil, with a log line, when redis-server is not installed: the places
// in process and on miniredis still run.
func startRealOrSkip(t *testing.T) redis.Scripter {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Log("redis-server not installed: the real server's rows are skipped")
		return nil
	}
	return redistest.Start(t).Client(t)
}

// nextCase is one step of a NextUnit scenario: the clock moves by advance,
// a Settle of 0 taken at settle (when > 0) puts the key in debt, and then
// n is decided: allowed or not, with remaining left, and NextUnit(0) of the
// Decision is want.
type nextCase struct {
	advance   time.Duration
	settle    int
	n         int
	allowed   bool
	remaining int
	want      time.Duration
}

// runNextCases runs steps on the limiter build makes at place, on key "k".
func runNextCases(t *testing.T, place nextPlace, build func(client redis.Scripter, opts []RedisOption) Decider, steps []nextCase) {
	t.Helper()
	clock := ratelimittest.NewClock(epoch)
	l := build(place.client, place.opts(clock))
	ctx := context.Background()
	for j, st := range steps {
		place.advance(clock, st.advance)
		if st.settle > 0 {
			_, err := l.(Adjuster).Settle(ctx, "k", 0, st.settle)
			require.NoError(t, err, "step %d", j)
		}
		d, err := l.Decide(ctx, "k", st.n)
		require.NoError(t, err, "step %d", j)
		assert.Equal(t, st.allowed, d.Allowed, "step %d", j)
		assert.Equal(t, st.remaining, d.Remaining, "step %d", j)
		got, ok := d.NextUnit(0)
		assert.True(t, ok, "step %d: told", j)
		assert.Equal(t, st.want, got, "step %d", j)
	}
}

// A sliding log of 5 per 10 s with units taken at 0, 2 s and 5 s holds its
// key to what it has left until the first of them leaves, at 10 s; then
// until the one of 2 s leaves; in debt, until the units beyond the limit
// and one more have left. In process, on miniredis and on a real server.
func TestSlidingLogNextUnitIsWhenItsOldestEntryLeaves(t *testing.T) {
	steps := []nextCase{
		{n: 1, allowed: true, remaining: 4, want: 10 * time.Second},
		{advance: 2 * time.Second, n: 1, allowed: true, remaining: 3, want: 8 * time.Second},
		{advance: 3 * time.Second, n: 1, allowed: true, remaining: 2, want: 5 * time.Second},
		{advance: time.Second, n: 0, allowed: true, remaining: 2, want: 4 * time.Second},
		{n: 3, allowed: false, remaining: 2, want: 4 * time.Second}, // a denial: the log as it is
		{n: 2, allowed: true, remaining: 0, want: 4 * time.Second},
		{advance: 4 * time.Second, n: 0, allowed: true, remaining: 1, want: 2 * time.Second}, // 10 s: the first has left
		// Settled into debt at 10 s: entries of 2 s, 5 s, 6 s (2 units)
		// and 10 s (5 units), 9 units of 5: one fits once 5 have left,
		// the 5th in the entry of 10 s, at 20 s.
		{settle: 5, n: 0, allowed: true, remaining: 0, want: 10 * time.Second},
		{advance: 7 * time.Second, n: 1, allowed: false, remaining: 0, want: 3 * time.Second}, // 17 s: 4 units of 10 s left
	}
	for _, place := range nextPlaces(t) {
		t.Run(place.name, func(t *testing.T) {
			runNextCases(t, place, func(client redis.Scripter, opts []RedisOption) Decider {
				opts = append(opts, WithMaxDebt(UnboundedDebt))
				if client != nil {
					return must(NewRedisSlidingLog(client, 5, 10*time.Second, opts...))
				}
				return must(NewSlidingLog(5, 10*time.Second, localOpts(opts)...))
			}, steps)
		})
	}
}

// A sliding counter of 5 per 10 s tells the earliest time a client can
// have taken one unit more than it has left: 3 taken at 0 leave 2, which
// taken at once count in the previous window after the roll at 10 s, 5
// there, so that one more fits once ⌈5 × (10 s − e) / 10 s⌉ <= 4, at e =
// 2 s: 12 s, not the 14 s at which 3 fit with none taken. After the roll,
// the previous window's share falls in the window open now. In process,
// on miniredis and on a real server.
func TestSlidingCounterNextUnitCountsTheUnitsLeftTakenBeforeTheRoll(t *testing.T) {
	steps := []nextCase{
		{n: 3, allowed: true, remaining: 2, want: 12 * time.Second},
		{advance: 4 * time.Second, n: 0, allowed: true, remaining: 2, want: 8 * time.Second},
		{n: 1, allowed: true, remaining: 1, want: 8 * time.Second}, // taking one of them changes nothing
		// 11 s: the window of 10 s is open, prev 4 weighs ⌈4 × 9/10⌉ = 4,
		// 1 left; 2 fit once ⌈4 × (10 s − e) / 10 s⌉ <= 3, at e = 2.5 s.
		{advance: 7 * time.Second, n: 0, allowed: true, remaining: 1, want: 1500 * time.Millisecond},
		{n: 1, allowed: true, remaining: 0, want: 1500 * time.Millisecond},
		{n: 2, allowed: false, remaining: 0, want: 1500 * time.Millisecond}, // a denial: as it is
		// 13 s: prev weighs ⌈4 × 7/10⌉ = 3, cur 1: 1 left; 2 fit once
		// prev weighs 2, at e = 5 s.
		{advance: 2 * time.Second, n: 0, allowed: true, remaining: 1, want: 2 * time.Second},
		// In debt at 13 s: cur 9, prev 4. Nothing fits in this window;
		// after the roll at 20 s, 9 weigh ⌈9 × (10 s − e) / 10 s⌉ <= 4
		// from e = ⌈50/9⌉ s, at 20 s + 10 s − ⌊40 s / 9⌋.
		{settle: 8, n: 0, allowed: true, remaining: 0, want: 17*time.Second - 40*time.Second/9},
	}
	for _, place := range nextPlaces(t) {
		t.Run(place.name, func(t *testing.T) {
			want := steps
			if place.client != nil {
				// On Redis, times are whole µs: ⌊40 s / 9⌋ in µs.
				want = append([]nextCase(nil), steps...)
				want[len(want)-1].want = 17*time.Second - (40 * time.Second / 9).Truncate(time.Microsecond)
			}
			runNextCases(t, place, func(client redis.Scripter, opts []RedisOption) Decider {
				opts = append(opts, WithMaxDebt(UnboundedDebt))
				if client != nil {
					return must(NewRedisSlidingCounter(client, 5, 10*time.Second, opts...))
				}
				return must(NewSlidingCounter(5, 10*time.Second, localOpts(opts)...))
			}, want)
		})
	}
}

// nextUnitByCounterSearch returns the earliest time at which some schedule
// of calls, one call a tick at most from now on, has taken one unit more
// than left on st (the state at now) at the rate r, by trying every
// schedule: the truth NextUnit must tell.
func nextUnitByCounterSearch(r counterRate, st counterState, left, now int64) int64 {
	type node struct {
		st    counterState
		taken int64
	}
	frontier := map[node]bool{{st, 0}: true}
	for t := now; ; t++ {
		next := map[node]bool{}
		for nd := range frontier {
			_, _, free, _ := r.take(nd.st, t, 0)
			for k := int64(0); k <= free; k++ {
				_, after, _, allowed := r.take(nd.st, t, int(k))
				if !allowed {
					continue
				}
				if nd.taken+k > left {
					return t
				}
				next[node{after, nd.taken + k}] = true
			}
		}
		frontier = next
	}
}

// The sliding counter's next unit is the earliest time any schedule of
// calls takes one unit more than it has left, found by trying every
// schedule on small counters from every state they reach.
func TestSlidingCounterNextUnitIsTheEarliestAnyScheduleTakesOneMore(t *testing.T) {
	checked := 0
	for limit := int64(1); limit <= 4; limit++ {
		for w := int64(1); w <= 6; w++ {
			r := counterRate{limit: limit, window: w}
			// Every state: a window open at 0 (or rolled from one open at
			// −w), with prev and cur up to one beyond the limit (a debt),
			// seen at every time e within it.
			for prev := int64(0); prev <= limit+1; prev++ {
				for cur := int64(0); cur <= limit+1; cur++ {
					if prev+cur == 0 {
						continue
					}
					for e := int64(0); e < w; e++ {
						st := counterState{start: 0, expiry: 2 * w, prev: prev, cur: cur}
						if cur == 0 {
							st.expiry = w // a rolled window, nothing counted in it yet
						}
						left := r.left(st, e)
						want := nextUnitByCounterSearch(r, st, left, e)
						assert.Equal(t, want, r.nextUnitAt(st, left), "limit %d, W %d, prev %d, cur %d, e %d", limit, w, prev, cur, e)
						checked++
					}
				}
			}
		}
	}
	t.Logf("%d states checked", checked)
}

// The sliding log's next unit is likewise the earliest any schedule takes
// one unit more than it has left: units taken meanwhile leave after those
// in the log. Every log of entries of 1 or 2 units at distinct times
// within a small window is tried.
func TestSlidingLogNextUnitIsTheEarliestAnyScheduleTakesOneMore(t *testing.T) {
	checked := 0
	for limit := int64(1); limit <= 3; limit++ {
		for w := int64(1); w <= 5; w++ {
			r := logRate{limit: limit, window: w}
			// Entries at times 0 to w−1 of 0, 1 or 2 units each, seen at
			// w−1 (every entry still in the window).
			for code := 1; code < pow3(int(w)); code++ {
				var lg entryLog
				c := code
				for at := int64(0); at < w; at++ {
					if units := int64(c % 3); units > 0 {
						lg.add(at, units, 100)
					}
					c /= 3
				}
				now := w - 1
				left := max(limit-lg.sum, 0)
				want := nextUnitByLogSearch(r, lg, left, now)
				assert.Equal(t, time.Duration(want-now), r.nextUnit(&lg, now, 0), "limit %d, W %d, log %v", limit, w, lg.ring[:lg.n])
				checked++
			}
		}
	}
	t.Logf("%d logs checked", checked)
}

// pow3 returns 3^n.
func pow3(n int) int {
	p := 1
	for range n {
		p *= 3
	}
	return p
}

// nextUnitByLogSearch is nextUnitByCounterSearch for a sliding log: the
// earliest tick from now at which some schedule has taken one unit more
// than left on lg, every schedule tried.
func nextUnitByLogSearch(r logRate, lg entryLog, left, now int64) int64 {
	type node struct {
		entries string // the entries in the window, "at:units " each, oldest first
		taken   int64
	}
	parse := func(s string) []logEntry {
		var out []logEntry
		for _, f := range strings.Fields(s) {
			var e logEntry
			_, _ = fmt.Sscanf(f, "%d:%d", &e.at, &e.units)
			out = append(out, e)
		}
		return out
	}
	format := func(es []logEntry) string {
		var b strings.Builder
		for _, e := range es {
			fmt.Fprintf(&b, "%d:%d ", e.at, e.units)
		}
		return b.String()
	}
	var first []logEntry
	for i := 0; i < lg.n; i++ {
		first = append(first, *lg.entry(i))
	}
	frontier := map[node]bool{{format(first), 0}: true}
	for t := now; ; t++ {
		next := map[node]bool{}
		for nd := range frontier {
			var kept []logEntry
			sum := int64(0)
			for _, e := range parse(nd.entries) {
				if e.at > t-r.window {
					kept = append(kept, e)
					sum += e.units
				}
			}
			for k := int64(0); k <= max(r.limit-sum, 0); k++ {
				if nd.taken+k > left {
					return t
				}
				es := kept
				if k > 0 {
					es = append(append([]logEntry(nil), kept...), logEntry{at: t, units: k})
				}
				next[node{format(es), nd.taken + k}] = true
			}
		}
		frontier = next
	}
}

// A Composite tells each sliding part's next unit: after the units are
// taken when it allows, and each part as it is when it denies, a part
// that would have allowed untouched. A log of 10 and a counter of 5, per
// 10 s: 3 at 0 and 2 at 4 s. In process, on miniredis and on a real server.
func TestCompositeTellsEachSlidingPartsNextUnit(t *testing.T) {
	steps := []struct {
		advance time.Duration
		n       int
		allowed bool
		want    [2]time.Duration
	}{
		{n: 3, allowed: true, want: [2]time.Duration{10 * time.Second, 12 * time.Second}},
		{advance: 4 * time.Second, n: 2, allowed: true, want: [2]time.Duration{6 * time.Second, 8 * time.Second}},
		// The counter denies; the log, which would have allowed, as it is.
		{advance: time.Second, n: 1, allowed: false, want: [2]time.Duration{5 * time.Second, 7 * time.Second}},
		{n: 0, allowed: true, want: [2]time.Duration{5 * time.Second, 7 * time.Second}},
	}
	for _, place := range nextPlaces(t) {
		t.Run(place.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			opts := place.opts(clock)
			var log, counter Limiter
			if place.client != nil {
				log = must(NewRedisSlidingLog(place.client, 10, 10*time.Second, opts...))
				counter = must(NewRedisSlidingCounter(place.client, 5, 10*time.Second, opts...))
			} else {
				log = must(NewSlidingLog(10, 10*time.Second, localOpts(opts)...))
				counter = must(NewSlidingCounter(5, 10*time.Second, localOpts(opts)...))
			}
			c := must(NewComposite(Part{Name: "log", Limiter: log}, Part{Name: "counter", Limiter: counter}))
			ctx := context.Background()
			for j, st := range steps {
				place.advance(clock, st.advance)
				d, err := c.Decide(ctx, "k", st.n)
				require.NoError(t, err, "step %d", j)
				assert.Equal(t, st.allowed, d.Allowed, "step %d", j)
				for i, want := range st.want {
					got, ok := d.NextUnit(i)
					assert.True(t, ok, "step %d part %d: told", j, i)
					assert.Equal(t, want, got, "step %d part %d", j, i)
				}
			}
		})
	}
}

// An empty calendar window tells when it ends, alone and as a Composite's
// part: the next unit taken counts until then. A day in UTC, an hour in.
// In process, on miniredis and on a real server.
func TestEmptyCalendarWindowTellsWhenItEnds(t *testing.T) {
	day := Calendar{Period: CalendarDay, Location: time.UTC}
	for _, place := range nextPlaces(t) {
		t.Run(place.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			opts := place.opts(clock)
			var cal, bucket Limiter
			if place.client != nil {
				// Its windows' bounds on the clock too.
				cal = must(NewRedisCalendarWindow(place.client, 100, day, append(opts, WithClock(clock))...))
				bucket = must(NewRedisTokenBucket(place.client, PerSecond(2), 4, opts...))
			} else {
				cal = must(NewCalendarWindow(100, day, localOpts(opts)...))
				bucket = must(NewTokenBucket(PerSecond(2), 4, localOpts(opts)...))
			}
			c := must(NewComposite(Part{Name: "burst", Limiter: bucket}, Part{Name: "day", Limiter: cal}))
			ctx := context.Background()
			place.advance(clock, time.Hour)
			for _, l := range []Decider{cal.(Decider), c} {
				d, err := l.Decide(ctx, "k", 0)
				require.NoError(t, err)
				got, ok := d.NextUnit(len(d.Policies) - 1)
				assert.True(t, ok, "%T: told", l)
				assert.Equal(t, 23*time.Hour, got, "%T", l)
			}
			// Once the window counts units, its Result tells its end.
			d, err := c.Decide(ctx, "k", 1)
			require.NoError(t, err)
			got, ok := d.NextUnit(1)
			assert.True(t, ok)
			assert.Equal(t, 23*time.Hour, got)
		})
	}
}

// Built WithPolicyFunc, a sliding log's and a sliding counter's next unit
// is that of the key's policy, alone and as a Composite's parts: a free
// key of 5 per 10 s and a pro key of 10 per 20 s, 3 units taken each. In
// process, on miniredis and on a real server.
func TestSlidingNextUnitFollowsTheKeysPolicy(t *testing.T) {
	plans := newPlanMap()
	for _, k := range []string{"free", "free-c"} {
		plans.set(k, Policy{Limit: 5, Window: 10 * time.Second})
	}
	for _, k := range []string{"pro", "pro-c"} {
		plans.set(k, Policy{Limit: 10, Window: 20 * time.Second})
	}
	// The log: until the units taken now leave. The counter: the units
	// left taken at once count with the 3 after the roll, limit of them
	// weighing limit − 1 after (limit − 1) / limit of the window:
	// 2W − ⌊(limit − 1) × W / limit⌋.
	want := map[string][2]time.Duration{
		"free": {10 * time.Second, 12 * time.Second},
		"pro":  {20 * time.Second, 22 * time.Second},
	}
	for _, place := range nextPlaces(t) {
		t.Run(place.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			opts := append(place.opts(clock), WithPolicyFunc(plans.f))
			var log, counter Limiter
			if place.client != nil {
				log = must(NewRedisSlidingLog(place.client, 1, time.Second, opts...))
				counter = must(NewRedisSlidingCounter(place.client, 1, time.Second, opts...))
			} else {
				log = must(NewSlidingLog(1, time.Second, localOpts(opts)...))
				counter = must(NewSlidingCounter(1, time.Second, localOpts(opts)...))
			}
			c := must(NewComposite(Part{Name: "log", Limiter: log}, Part{Name: "counter", Limiter: counter}))
			ctx := context.Background()
			for _, key := range []string{"free", "pro"} {
				for i, l := range []Decider{log.(Decider), counter.(Decider)} {
					d, err := l.Decide(ctx, key, 3)
					require.NoError(t, err)
					got, ok := d.NextUnit(0)
					assert.True(t, ok, "%s %T", key, l)
					assert.Equal(t, want[key][i], got, "%s %T", key, l)
				}
				// The Composite's parts, on keys of their own.
				d, err := c.Decide(ctx, key+"-c", 3)
				require.NoError(t, err)
				for i := range 2 {
					got, ok := d.NextUnit(i)
					assert.True(t, ok, "%s part %d", key, i)
					assert.Equal(t, want[key][i], got, "%s part %d", key, i)
				}
			}
		})
	}
}

// The decorators pass on the sliding kinds' next units: a Shadow as its
// backend tells them, also for a denial it lets through; a DenyCache's
// remembered denial aged, until one unit more than it shows is there; a
// Guard's fallback, a single limiter or a Composite's mirror, each part
// its own, also when only some parts fail over.
func TestSlidingNextUnitThroughDecorators(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	log := must(NewSlidingLog(2, 10*time.Second, WithClock(clock)))
	shadow := must(NewShadow(log, ShadowConfig{}))
	cache := must(NewDenyCache(log, DenyCacheConfig{MaxAge: time.Minute, Clock: clock}))
	next := func(d Decision, i int) time.Duration {
		t.Helper()
		got, ok := d.NextUnit(i)
		assert.True(t, ok, "told")
		return got
	}

	d, err := shadow.Decide(ctx, "a", 2)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, next(d, 0))
	clock.Advance(3 * time.Second)
	d, err = shadow.Decide(ctx, "a", 1)
	require.NoError(t, err)
	require.True(t, d.WouldDeny)
	assert.Equal(t, 7*time.Second, next(d, 0), "a denial let through: the log as it is")

	d, err = cache.Decide(ctx, "a", 1)
	require.NoError(t, err)
	require.Equal(t, FromBackend, d.Source)
	assert.Equal(t, 7*time.Second, next(d, 0))
	clock.Advance(2 * time.Second)
	d, err = cache.Decide(ctx, "a", 1)
	require.NoError(t, err)
	require.Equal(t, FromDenyCache, d.Source)
	assert.Equal(t, 5*time.Second, next(d, 0), "the remembered denial's, aged")

	// A Guard over Redis parts that are down, whose fallback answers.
	// A client that fails at once once its server is gone: no retries.
	m, _, _ := miniredisClock(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	backend := must(NewComposite(
		Part{Name: "log", Limiter: must(NewRedisSlidingLog(client, 10, 10*time.Second))},
		Part{Name: "counter", Limiter: must(NewRedisSlidingCounter(client, 5, 10*time.Second))},
	))
	mirror := func() *Composite {
		return must(NewComposite(
			Part{Name: "log", Limiter: must(NewSlidingLog(10, 10*time.Second, WithClock(clock)))},
			Part{Name: "counter", Limiter: must(NewSlidingCounter(5, 10*time.Second, WithClock(clock)))},
		))
	}
	m.Close()
	whole := must(NewGuard(backend, GuardConfig{OnFailure: FailOver, Fallback: mirror(), Clock: clock}))
	d, err = whole.Decide(ctx, "b", 3)
	require.NoError(t, err)
	require.Equal(t, FromFallback, d.Source)
	assert.Equal(t, 10*time.Second, next(d, 0), "the fallback's log")
	assert.Equal(t, 12*time.Second, next(d, 1), "the fallback's counter")

	parts := must(NewGuard(backend, GuardConfig{OnFailure: FailOver, PartFailure: map[string]FailurePolicy{"log": FailOpen}, Fallback: mirror(), Clock: clock}))
	d, err = parts.Decide(ctx, "b", 3)
	require.NoError(t, err)
	require.Equal(t, FromFallback, d.Source)
	_, ok := d.NextUnit(0)
	assert.False(t, ok, "a part that fails open knows nothing of the key")
	assert.Equal(t, 12*time.Second, next(d, 1), "the fallback's counter")

	single := must(NewGuard(must(NewRedisSlidingLog(client, 10, 10*time.Second)), GuardConfig{OnFailure: FailOver, Fallback: must(NewSlidingLog(10, 10*time.Second, WithClock(clock))), Clock: clock}))
	d, err = single.Decide(ctx, "b", 3)
	require.NoError(t, err)
	require.Equal(t, FromFallback, d.Source)
	assert.Equal(t, 10*time.Second, next(d, 0))
}

// On random schedules (calls of every cost, debts settled, refunds,
// resets, time in whole µs), the Redis sliding log, sliding counter and a
// Composite of both tell the next unit the in-process ones tell, rounded
// up to a whole µs (the script's time unit; a log's is exact), on
// miniredis and on a real server deciding on the same clock.
func TestSlidingNextUnitOnRedisAgreesWithInProcess(t *testing.T) {
	t.Parallel()
	for _, place := range nextPlaces(t)[1:] {
		t.Run(place.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(33, 8))
			for round := range sized(2, 40) {
				limit := 1 + r.IntN(8)
				window := time.Duration(1+r.Int64N(5000)) * time.Millisecond
				if place.name == "real server" {
					// The real server expires keys on its own clock:
					// windows a thousand times longer outlast the run
					// however slowly it goes.
					window *= 1000
				}
				debt := []int{0, 2, UnboundedDebt}[r.IntN(3)]
				clock := ratelimittest.NewClock(epoch)
				prefix := fmt.Sprintf("diff%d:", round)
				remoteOpts := append(place.opts(clock), WithMaxDebt(debt), WithKeyPrefix(prefix))
				localOpts := []Option{WithClock(clock), WithMaxDebt(debt)}
				type pair struct {
					name          string
					local, remote stackLimiter
				}
				log := pair{"log", must(NewSlidingLog(limit, window, localOpts...)), must(NewRedisSlidingLog(place.client, limit, window, remoteOpts...))}
				counter := pair{"counter", must(NewSlidingCounter(limit, window, localOpts...)), must(NewRedisSlidingCounter(place.client, limit, window, remoteOpts...))}
				composite := pair{"composite",
					must(NewComposite(Part{Name: "log", Limiter: must(NewSlidingLog(limit, window, localOpts...))}, Part{Name: "counter", Limiter: must(NewSlidingCounter(limit, window, localOpts...))})),
					must(NewComposite(
						Part{Name: "log", Limiter: must(NewRedisSlidingLog(place.client, limit, window, append(place.opts(clock), WithMaxDebt(debt), WithKeyPrefix(prefix+"c:"))...))},
						Part{Name: "counter", Limiter: must(NewRedisSlidingCounter(place.client, limit, window, append(place.opts(clock), WithMaxDebt(debt), WithKeyPrefix(prefix+"c:"))...))})),
				}
				ctx := context.Background()
				for step := range 200 {
					d := time.Duration(r.Int64N(int64(window)/int64(limit)*2 + 1)).Truncate(time.Microsecond)
					if r.IntN(4) == 0 {
						d = 0
					}
					place.advance(clock, d)
					key := []string{"a", "b"}[r.IntN(2)]
					n := r.IntN(limit + 1)
					what := r.IntN(20)
					for _, p := range []pair{log, counter, composite} {
						msg := fmt.Sprintf("round %d step %d %s: %d per %v, debt %d, key %s, n %d, op %d", round, step, p.name, limit, window, debt, key, n, what)
						switch {
						case what < 3:
							_, errL := p.local.Settle(ctx, key, 0, n+limit)
							_, errR := p.remote.Settle(ctx, key, 0, n+limit)
							require.Equal(t, errL == nil, errR == nil, "%s: %v / %v", msg, errL, errR)
							continue
						case what < 5:
							_, errL := p.local.Refund(ctx, key, n)
							_, errR := p.remote.Refund(ctx, key, n)
							require.Equal(t, errL == nil, errR == nil, "%s: %v / %v", msg, errL, errR)
							continue
						case what < 6:
							require.NoError(t, p.local.Reset(ctx, key), msg)
							require.NoError(t, p.remote.Reset(ctx, key), msg)
							continue
						}
						want, err := p.local.Decide(ctx, key, n)
						require.NoError(t, err, msg)
						got, err := p.remote.Decide(ctx, key, n)
						require.NoError(t, err, msg)
						require.Equal(t, want.Allowed, got.Allowed, msg)
						require.Equal(t, want.Remaining, got.Remaining, msg)
						for i := range want.Policies {
							wn, wok := want.NextUnit(i)
							gn, gok := got.NextUnit(i)
							require.Equal(t, wok, gok, "%s: policy %d told", msg, i)
							require.Equal(t, (wn + time.Microsecond - 1).Truncate(time.Microsecond), gn, "%s: policy %d", msg, i)
						}
					}
				}
			}
		})
	}
}
