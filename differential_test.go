// This file holds the random differentials of the calendar window (in
// process against miniredis) and of the concurrency limiter (against its
// model, in process and on Redis); the other kinds' models are in
// model_test.go.

package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// calendarPair is a CalendarWindow and a RedisCalendarWindow on miniredis
// of one calendar, whose clocks (the in-process clock, the Redis client's
// and the server's TIME) move together.
type calendarPair struct {
	local   *CalendarWindow
	remote  *RedisCalendarWindow
	advance func(time.Duration)
}

func newCalendarPair(t *testing.T, limit int, cal Calendar, at time.Time, opts ...Option) calendarPair {
	t.Helper()
	clock := ratelimittest.NewClock(at)
	_, client, move := redistest.Miniredis(t, at)
	local, err := NewCalendarWindow(limit, cal, append(opts[:len(opts):len(opts)], WithClock(clock))...)
	require.NoError(t, err)
	remote, err := NewRedisCalendarWindow(client, limit, cal, append(redisOpts(opts), WithClock(clock))...)
	require.NoError(t, err)
	return calendarPair{local, remote, func(d time.Duration) {
		clock.Advance(d)
		move(d)
	}}
}

// calendarOp is one call of a differential schedule on both limiters.
func calendarOp(ctx context.Context, l interface {
	Decider
	Adjuster
}, kind int, key string, n int, takenAt time.Time) (Decision, error) {
	switch kind {
	case 0:
		res, err := l.Refund(ctx, key, n, TakenAt(takenAt))
		return Decision{Result: res}, err
	case 1:
		res, err := l.Settle(ctx, key, n, n+2)
		return Decision{Result: res}, err
	case 2:
		return Decision{}, l.Reset(ctx, key)
	}
	return l.Decide(ctx, key, n)
}

func TestCalendarWindowInProcessAndOnMiniredisDecideAlike(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	berlin := zone(t, "Europe/Berlin")
	sydney := zone(t, "Australia/Sydney")
	cases := []struct {
		cal  Calendar
		at   time.Time
		step time.Duration // the most a step moves the clocks
	}{
		{Calendar{Period: CalendarHour, Location: berlin}, utc(2026, 10, 24, 23, 0), 7 * time.Minute},
		{Calendar{Period: CalendarDay, Location: berlin}, utc(2026, 3, 28, 12, 0), 2 * time.Hour},
		{Calendar{Period: CalendarHour, Location: sydney}, utc(2026, 10, 3, 14, 0), 7 * time.Minute},
		{Calendar{Period: CalendarMinute, Location: sydney}, utc(2026, 4, 4, 15, 55), 5 * time.Second},
		{Calendar{Period: CalendarWeek, FirstWeekday: time.Monday}, utc(2026, 11, 27, 0, 0), 9 * time.Hour},
		{Calendar{Period: CalendarMonth}, utc(2028, 2, 27, 0, 0), 11 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v %v", tc.cal.Period, tc.cal.location()), func(t *testing.T) {
			p := newCalendarPair(t, 5, tc.cal, tc.at)
			rng := rand.New(rand.NewPCG(uint64(tc.at.Unix()), 7))
			now := tc.at
			seen := map[bool]int{}
			for i := range sized(150, 300) {
				// Whole milliseconds, the unit of Redis expiry.
				d := time.Duration(rng.Int64N(int64(tc.step/time.Millisecond))) * time.Millisecond
				p.advance(d)
				now = now.Add(d)
				kind := 3 + rng.IntN(6) // mostly Decides
				if rng.IntN(10) == 0 {
					kind = rng.IntN(3)
				}
				key := string(rune('a' + rng.IntN(3)))
				n := rng.IntN(4)
				takenAt := now.Add(-time.Duration(rng.Int64N(int64(2 * tc.step))))
				want, werr := calendarOp(ctx, p.local, kind, key, n, takenAt)
				got, gerr := calendarOp(ctx, p.remote, kind, key, n, takenAt)
				msg := fmt.Sprintf("call %d at %v: op %d, key %q, n %d", i, now, kind, key, n)
				require.Equal(t, werr, gerr, msg)
				require.Equal(t, want.Result, got.Result, msg)
				require.Equal(t, want.Policies, got.Policies, msg)
				if kind >= 3 && n > 0 {
					seen[got.Allowed]++
				}
			}
			assert.Positive(t, seen[true], "allowed some")
			assert.Positive(t, seen[false], "denied some")
		})
	}
}

func TestRedisCalendarWindowFailsOnClockSkew(t *testing.T) {
	ctx := context.Background()
	_, client, _ := redistest.Miniredis(t, epoch)
	clock := ratelimittest.NewClock(epoch.Add(-2 * time.Hour))
	w, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarHour}, WithClock(clock))
	require.NoError(t, err)
	_, err = w.Allow(ctx, "k", 1)
	require.ErrorIs(t, err, ErrBackend)
	assert.Contains(t, err.Error(), "clock skew")
	clock.Set(epoch.Add(-time.Hour + time.Second)) // one window apart: fine
	res, err := w.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 2, time.Hour), res, "the server's hour")
}

func TestRedisCalendarWindowRefusesOtherState(t *testing.T) {
	ctx := context.Background()
	m, client, _ := redistest.Miniredis(t, epoch)
	w, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarHour}, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:cal:3:hour:UTC:", w.KeyPrefix())
	for name, set := range map[string]func(key string){
		"a count alone":   func(key string) { require.NoError(t, m.Set(key, "3")); m.SetTTL(key, time.Hour) },
		"a count of 0":    func(key string) { require.NoError(t, m.Set(key, "1764460800000000:0")); m.SetTTL(key, time.Hour) },
		"no TTL":          func(key string) { require.NoError(t, m.Set(key, "1764460800000000:1")) },
		"another type":    func(key string) { m.HSet(key, "a", "1") },
		"a signed count":  func(key string) { require.NoError(t, m.Set(key, "1764460800000000:-1")); m.SetTTL(key, time.Hour) },
		"trailing spaces": func(key string) { require.NoError(t, m.Set(key, "1764460800000000:1 ")); m.SetTTL(key, time.Hour) },
	} {
		key := storedKey(w.KeyPrefix(), name)
		set(key)
		before := m.Dump()
		_, err := w.Allow(ctx, name, 1)
		require.ErrorIs(t, err, ErrCorruptState, name)
		_, err = w.Settle(ctx, name, 1, 2)
		require.ErrorIs(t, err, ErrCorruptState, name)
		require.ErrorIs(t, w.Reset(ctx, name), ErrCorruptState, name)
		assert.Equal(t, before, m.Dump(), name+": left as it was")
	}
}

func TestRedisCalendarWindowKeepsStartAndCountUntilTheWindowEnds(t *testing.T) {
	ctx := context.Background()
	m, client, _ := redistest.Miniredis(t, epoch.Add(30*time.Minute+time.Microsecond))
	w, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarHour}, WithClock(ratelimittest.NewClock(epoch.Add(30*time.Minute))))
	require.NoError(t, err)
	_, err = w.Allow(ctx, "k", 2)
	require.NoError(t, err)
	v, err := m.Get(storedKey(w.KeyPrefix(), "k"))
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d:2", epoch.UnixMicro()), v)
	assert.Equal(t, 30*time.Minute, m.TTL(storedKey(w.KeyPrefix(), "k")), "until the hour ends, whole ms rounded up")
}

// plainLeases is the exact rule of a concurrency limit, written as plainly
// as possible: a list of leases, each with its expiry.
type plainLeases struct {
	limit int64
	ttl   time.Duration
	held  map[string][]plainLease
}

type plainLease struct {
	id     int
	units  int64
	expiry time.Duration
}

// live returns key's leases that have not expired at now.
func (m *plainLeases) live(key string, now time.Duration) []plainLease {
	var out []plainLease
	for _, l := range m.held[key] {
		if l.expiry > now {
			out = append(out, l)
		}
	}
	m.held[key] = out
	return out
}

func (m *plainLeases) acquire(key string, n int64, id int, now time.Duration) Result {
	ls := m.live(key, now)
	var used int64
	var latest time.Duration
	for _, l := range ls {
		used += l.units
		latest = max(latest, l.expiry)
	}
	res := Result{Limit: int(m.limit)}
	if n == 0 || used+n <= m.limit {
		res.Allowed = true
		if n > 0 {
			m.held[key] = append(ls, plainLease{id: id, units: n, expiry: now + m.ttl})
			used += n
			latest = now + m.ttl
		}
	} else {
		byExpiry := slices.Clone(ls)
		slices.SortFunc(byExpiry, func(a, b plainLease) int { return int(a.expiry - b.expiry) })
		free := m.limit - used
		for _, l := range byExpiry {
			free += l.units
			if free >= n {
				res.RetryAfter = l.expiry - now
				break
			}
		}
	}
	res.Remaining = int(max(m.limit-used, 0))
	if used > 0 {
		res.ResetAfter = latest - now
	}
	return res
}

func (m *plainLeases) release(key string, id int) {
	m.held[key] = slices.DeleteFunc(m.held[key], func(l plainLease) bool { return l.id == id })
}

func (m *plainLeases) extend(key string, id int, now time.Duration) bool {
	ls := m.live(key, now)
	for i := range ls {
		if ls[i].id == id {
			ls[i].expiry = now + m.ttl
			return true
		}
	}
	return false
}

func TestConcurrencyDecidesAsTheModelOnRandomSchedules(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 23))
		limit := 1 + rng.IntN(5)
		ttl := time.Duration(1+rng.IntN(5)) * time.Second
		start := epoch
		clock := ratelimittest.NewClock(start)
		c, err := NewConcurrency(limit, ttl, WithClock(clock))
		require.NoError(t, err)
		m := &plainLeases{limit: int64(limit), ttl: ttl, held: map[string][]plainLease{}}
		type held struct {
			lease Lease
			id    int
		}
		var leases []held
		for step := range 400 {
			now := clock.Now().Sub(start)
			key := []string{"a", "b"}[rng.IntN(2)]
			switch op := rng.IntN(10); {
			case op < 5:
				n := rng.IntN(limit + 1)
				lease, d, err := c.Acquire(ctx, key, n)
				require.NoError(t, err)
				want := m.acquire(key, int64(n), step, now)
				require.Equal(t, want, d.Result, "seed %d step %d: acquire %d of %q at %v", seed, step, n, key, now)
				assert.Equal(t, want.Allowed && n > 0, lease.Held())
				if lease.Held() {
					leases = append(leases, held{lease, step})
				}
			case op < 7 && len(leases) > 0:
				i := rng.IntN(len(leases))
				require.NoError(t, leases[i].lease.Release(ctx))
				m.release(leases[i].lease.Key(), leases[i].id)
			case op < 8 && len(leases) > 0:
				i := rng.IntN(len(leases))
				renewed, err := leases[i].lease.Extend(ctx)
				if m.extend(leases[i].lease.Key(), leases[i].id, now) {
					require.NoError(t, err, "seed %d step %d", seed, step)
					leases[i].lease = renewed
				} else {
					require.ErrorIs(t, err, ErrLeaseExpired, "seed %d step %d", seed, step)
				}
			default:
				clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			}
		}
	}
}

func TestConcurrencyNeverHoldsMoreThanItsLimitUnderContention(t *testing.T) {
	const limit, keys, workers = 3, 4, 64
	c, err := NewConcurrency(limit, time.Minute)
	require.NoError(t, err)
	ctx := context.Background()
	var inFlight [keys]atomic.Int64
	var peak [keys]atomic.Int64
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range 300 {
				k := (w + i) % keys
				lease, d, err := c.Acquire(ctx, string(rune('a'+k)), 1)
				if err != nil || !d.Allowed {
					continue
				}
				allowed.Add(1)
				now := inFlight[k].Add(1)
				for p := peak[k].Load(); now > p && !peak[k].CompareAndSwap(p, now); p = peak[k].Load() {
				}
				inFlight[k].Add(-1)
				_ = lease.Release(ctx)
			}
		})
	}
	wg.Wait()
	assert.Positive(t, allowed.Load(), "some acquires were allowed")
	for k := range keys {
		assert.Positive(t, peak[k].Load())
		assert.LessOrEqual(t, peak[k].Load(), int64(limit))
		_, d, err := c.Acquire(ctx, string(rune('a'+k)), 0)
		require.NoError(t, err)
		assert.Equal(t, limit, d.Remaining, "every unit came back")
	}
}

func TestConcurrencyForgetsKeysWhoseLeasesEnded(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	c, err := NewConcurrency(2, time.Second, WithClock(clock))
	require.NoError(t, err)
	for i := range 5000 {
		lease, _, err := c.Acquire(ctx, "old:"+string(rune(i)), 1)
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, lease.Release(ctx))
		}
	}
	clock.Advance(3 * time.Second)
	// As many new keys as old ones, so that every shard is used again
	// (500 left one of the 64 shards untouched in about one run in 40,
	// with its old keys not yet swept).
	for i := range 5000 {
		_, _, err := c.Acquire(ctx, "new:"+string(rune(i)), 1)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, c.keys.len(), 5000, "only the keys that hold leases now are kept")
}

// The differential test of the concurrency limiters: random Acquires,
// Allows, Releases, Extends and Resets with time moving, made on an exact
// model, on a Concurrency with a fake clock and on a RedisConcurrency on
// miniredis, comparing every Result, Lease and error.

// heldModel is the exact model of a concurrency limiter: each key's
// leases, by index among every lease the run granted; times in µs.
type heldModel struct {
	now    int64
	leases map[string]map[int]modelLease
}

type modelLease struct{ units, expiry int64 }

// acquire decides n for key under limit and ttl (µs); a granted lease is
// number id.
func (m *heldModel) acquire(key string, n, limit, ttl int64, id int) Result {
	ls := m.leases[key]
	var held, latest int64
	for i, l := range ls {
		if l.expiry <= m.now {
			delete(ls, i)
			continue
		}
		held += l.units
		latest = max(latest, l.expiry)
	}
	res := Result{Limit: int(limit)}
	switch {
	case n > 0 && held+n <= limit:
		if ls == nil {
			ls = map[int]modelLease{}
			m.leases[key] = ls
		}
		ls[id] = modelLease{n, m.now + ttl}
		held += n
		latest = max(latest, m.now+ttl)
		res.Allowed = true
	case n == 0:
		res.Allowed = true
	default:
		exps := make([]modelLease, 0, len(ls))
		for _, l := range ls {
			exps = append(exps, l)
		}
		slices.SortFunc(exps, func(a, b modelLease) int { return cmp.Compare(a.expiry, b.expiry) })
		free := limit - held
		for _, l := range exps {
			if free += l.units; free >= n {
				res.RetryAfter = time.Duration(l.expiry-m.now) * time.Microsecond
				break
			}
		}
	}
	res.Remaining = int(max(limit-held, 0))
	if held > 0 {
		res.ResetAfter = time.Duration(latest-m.now) * time.Microsecond
	}
	return res
}

// extend renews lease id of key for ttl µs, and reports whether it held.
func (m *heldModel) extend(key string, id int, ttl int64) bool {
	l, ok := m.leases[key][id]
	if !ok || l.expiry <= m.now {
		delete(m.leases[key], id)
		return false
	}
	m.leases[key][id] = modelLease{l.units, m.now + ttl}
	return true
}

// held returns the units key's leases hold now.
func (m *heldModel) held(key string) int64 {
	var units int64
	for _, l := range m.leases[key] {
		if l.expiry > m.now {
			units += l.units
		}
	}
	return units
}

// heldStep is one step of a run: move the clock, maybe give the key
// another plan, then call.
type heldStep struct {
	advance time.Duration
	change  bool
	plan    Policy
	kind    string // acquire, allow, release, extend, reset
	key     string
	n       int
	lease   int // the index of the lease a release or extend is of
}

func (s heldStep) String() string {
	p := ""
	if s.change {
		p = fmt.Sprintf(" plan %d/%v;", s.plan.Limit, s.plan.Window)
	}
	return fmt.Sprintf("+%v;%s %s(%q, n=%d, lease=%d)", s.advance, p, s.kind, s.key, s.n, s.lease)
}

func TestConcurrencyDecidesAsTheModelInProcessAndOnRedis(t *testing.T) {
	t.Parallel()
	// Plans of 2, 5 and 20 in flight, each with a TTL of its own, and the
	// zero Policy: the limiter's own, 5 with leases of 3 s.
	plans := []Policy{{}, {Limit: 2, Window: 2 * time.Second}, {Limit: 5, Window: 700 * time.Millisecond}, {Limit: 20, Window: 5 * time.Second}}
	for _, tc := range []struct {
		name  string
		plans []Policy
	}{{"one policy", nil}, {"plans", plans}} {
		t.Run(tc.name, func(t *testing.T) {
			// 1 run of 250 steps (5 of 3000 under -soak).
			for seed := range uint64(sized(1, 5)) {
				t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
					runHeldDifferential(t, rand.New(rand.NewPCG(seed, 23)), sized(250, 3000), tc.plans)
				})
			}
		})
	}
}

// runHeldDifferential makes steps random steps on the model and both
// limiters, with plans (none: the limiters' own policy alone), and
// compares them after each.
func runHeldDifferential(t *testing.T, r *rand.Rand, steps int, plans []Policy) {
	ctx := context.Background()
	own := Policy{Limit: 5, Window: 3 * time.Second}
	table := newPlanMap()
	var opts []Option
	if plans != nil {
		opts = append(opts, WithPolicyFunc(table.f))
	}
	clock := ratelimittest.NewClock(epoch)
	local, err := NewConcurrency(own.Limit, own.Window, append([]Option{WithClock(clock)}, opts...)...)
	require.NoError(t, err)
	m, client, advance := miniredisClock(t)
	remote, err := NewRedisConcurrency(client, own.Limit, own.Window, redisOpts(opts)...)
	require.NoError(t, err)
	model := &heldModel{now: epoch.UnixMicro(), leases: map[string]map[int]modelLease{}}
	keys := []string{"a", "b", "c"}
	policy := func(key string) Policy {
		if p := table.get(key); p != (Policy{}) {
			return p
		}
		return own
	}

	type granted struct {
		key    string
		local  Lease
		remote Lease
	}
	var leases []granted
	for i := range steps {
		st := heldStep{key: keys[r.IntN(len(keys))]}
		switch x := r.IntN(20); {
		case x < 6: // a burst: no time passes
		case x == 6:
			st.advance = time.Duration(r.Int64N(int64(6 * time.Second)))
		default:
			st.advance = time.Duration(r.Int64N(int64(400 * time.Millisecond)))
		}
		st.advance = st.advance.Truncate(time.Microsecond)
		if plans != nil && r.IntN(8) == 0 {
			st.change, st.plan = true, plans[r.IntN(len(plans))]
		}
		switch x := r.IntN(20); {
		case x < 8:
			st.kind, st.n = "acquire", r.IntN(4)
			if r.IntN(10) == 0 {
				st.n = r.IntN(22)
			}
		case x < 10:
			st.kind, st.n = "allow", r.IntN(3)
		case x < 15:
			st.kind = "release"
		case x < 19:
			st.kind = "extend"
		default:
			st.kind = "reset"
		}
		if (st.kind == "release" || st.kind == "extend") && len(leases) == 0 {
			st.kind = "acquire"
		}
		if st.kind == "release" || st.kind == "extend" {
			// Mostly recent leases, which may still hold.
			st.lease = len(leases) - 1 - min(r.IntN(len(leases)), r.IntN(8))
			st.key = leases[st.lease].key
		}
		where := fmt.Sprintf("step %d: %v", i, st)

		clock.Advance(st.advance)
		advance(st.advance)
		model.now += st.advance.Microseconds()
		if st.change {
			table.set(st.key, st.plan)
		}
		p := policy(st.key)
		limit, ttl := int64(p.Limit), p.Window.Microseconds()

		switch st.kind {
		case "acquire", "allow":
			var want Result
			var wantErr error
			if int64(st.n) > limit {
				want, wantErr = Result{Limit: int(limit)}, ErrCostExceedsLimit
			} else {
				want = model.acquire(st.key, int64(st.n), limit, ttl, len(leases))
			}
			var gl, gr Lease
			var dl, dr Decision
			var el, er error
			if st.kind == "acquire" {
				gl, dl, el = local.Acquire(ctx, st.key, st.n)
				gr, dr, er = remote.Acquire(ctx, st.key, st.n)
			} else {
				dl, el = local.Decide(ctx, st.key, st.n)
				dr, er = remote.Decide(ctx, st.key, st.n)
			}
			checkErr(t, wantErr, el, "in process, "+where)
			checkErr(t, wantErr, er, "on Redis, "+where)
			require.Equal(t, want, dl.Result, "in process, %s", where)
			require.Equal(t, want, dr.Result, "on Redis, %s", where)
			require.Equal(t, p, dl.Policy.Policy, where)
			require.Equal(t, p, dr.Policy.Policy, where)
			require.True(t, dr.Policy.InFlight, where)
			leased := st.kind == "acquire" && want.Allowed && st.n > 0
			require.Equal(t, leased, gl.Held(), "in process, %s", where)
			require.Equal(t, leased, gr.Held(), "on Redis, %s", where)
			if want.Allowed && st.n > 0 {
				if leased {
					require.Equal(t, st.key, gr.Key(), where)
					require.Equal(t, st.n, gr.Units(), where)
					require.Equal(t, p.Window, gr.TTL(), where)
					require.Equal(t, gl.TTL(), gr.TTL(), where)
				}
				leases = append(leases, granted{st.key, gl, gr})
			}
		case "release":
			g := leases[st.lease]
			if g.local.Held() { // Allow's units are no one's to release
				delete(model.leases[st.key], st.lease)
			}
			require.NoError(t, g.local.Release(ctx), "in process, %s", where)
			require.NoError(t, g.remote.Release(ctx), "on Redis, %s", where)
		case "extend":
			g := leases[st.lease]
			var wantErr error
			if g.local.Held() && !model.extend(st.key, st.lease, ttl) {
				wantErr = ErrLeaseExpired
			}
			nl, el := g.local.Extend(ctx)
			nr, er := g.remote.Extend(ctx)
			checkErr(t, wantErr, el, "in process, "+where)
			checkErr(t, wantErr, er, "on Redis, "+where)
			if wantErr == nil && g.local.Held() {
				require.Equal(t, p.Window, nl.TTL(), where)
				require.Equal(t, p.Window, nr.TTL(), where)
			}
		case "reset":
			delete(model.leases, st.key)
			require.NoError(t, local.Reset(ctx, st.key), where)
			require.NoError(t, remote.Reset(ctx, st.key), where)
		}
		checkHeldKeys(t, m, remote.KeyPrefix(), keys, model, where)
	}
}

// checkErr checks that err is nil when want is, and wraps want otherwise.
func checkErr(t *testing.T, want, err error, where string) {
	t.Helper()
	if want == nil {
		require.NoError(t, err, where)
		return
	}
	require.ErrorIs(t, err, want, where)
}

// leaseValue reads the value of a lease in its key's HASH: its expiry
// (µs) for one unit, "units:expiry" for more.
func leaseValue(t *testing.T, v string) (units, expiry int64) {
	t.Helper()
	units, text := 1, v
	if a, b, found := strings.Cut(v, ":"); found {
		n, err := strconv.ParseInt(a, 10, 64)
		require.NoError(t, err, v)
		require.Greater(t, n, int64(1), "one unit is written as its expiry alone: %q", v)
		units, text = n, b
	}
	expiry, err := strconv.ParseInt(text, 10, 64)
	require.NoError(t, err, v)
	return units, expiry
}

// checkHeldKeys checks the state of every key on the server: a STRING's
// lease, or a HASH whose fields agree (u the sum of the leases' units, x
// their latest expiry, e at or before every expiry); its leases that hold
// are the model's; its TTL lasts until its latest lease expires and no
// longer than that time's whole ms; and a key that holds nothing is gone
// once its latest lease has expired.
func checkHeldKeys(t *testing.T, m *miniredis.Miniredis, prefix string, keys []string, model *heldModel, where string) {
	t.Helper()
	for _, key := range keys {
		k := storedKey(prefix, key)
		if !m.Exists(k) {
			require.Zero(t, model.held(key), "%s: %q holds leases but its key is gone", where, key)
			continue
		}
		ttl := m.TTL(k)
		require.Positive(t, ttl, "%s: %q has a TTL", where, key)
		if v, err := m.Get(k); err == nil {
			// One lease, "lease:value".
			_, value, found := strings.Cut(v, ":")
			require.True(t, found, "%s: %q: %q", where, key, v)
			units, expiry := leaseValue(t, value)
			if expiry <= model.now {
				units = 0
			}
			assert.Equal(t, model.held(key), units, "%s: %q: its lease is the model's", where, key)
			left := time.Duration(expiry-model.now) * time.Microsecond
			assert.GreaterOrEqual(t, ttl, left, "%s: %q lasts until its lease expires", where, key)
			assert.Less(t, ttl, max(left, 0)+time.Millisecond, "%s: %q lasts no longer than its lease's whole ms", where, key)
			continue
		}
		fields, err := m.HKeys(k)
		require.NoError(t, err)
		var sum, live, lo, hi int64
		lo = 1 << 62
		head := map[string]int64{}
		for _, f := range fields {
			v := m.HGet(k, f)
			if f == "u" || f == "e" || f == "x" {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, where)
				head[f] = n
				continue
			}
			u, e := leaseValue(t, v)
			sum, lo, hi = sum+u, min(lo, e), max(hi, e)
			if e > model.now {
				live += u
			}
		}
		require.Len(t, head, 3, "%s: %q has u, e and x", where, key)
		assert.Equal(t, sum, head["u"], "%s: %q: u is the sum of its leases", where, key)
		assert.Equal(t, hi, head["x"], "%s: %q: x is the latest expiry", where, key)
		assert.LessOrEqual(t, head["e"], lo, "%s: %q: e is at or before every expiry", where, key)
		assert.Equal(t, model.held(key), live, "%s: %q: its leases that hold are the model's", where, key)
		left := time.Duration(hi-model.now) * time.Microsecond
		assert.GreaterOrEqual(t, ttl, left, "%s: %q lasts until its latest lease expires", where, key)
		assert.Less(t, ttl, max(left, 0)+time.Millisecond, "%s: %q lasts no longer than its latest lease's whole ms", where, key)
	}
}
