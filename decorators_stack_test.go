package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// The decorators over the sliding log, the sliding counter and the
// calendar window, in process and on miniredis: a Shadow, a DenyCache and
// a Guard answer as the bare limiter does on the same schedule, pass
// adjustments through, and report each call once.

// stackHooks counts what it hears, decisions and adjustments.
type stackHooks struct {
	mu      sync.Mutex
	events  []Event
	adjusts []AdjustEvent
}

func (h *stackHooks) Decided(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

func (h *stackHooks) BreakerChanged(BreakerState, BreakerState) {}

func (h *stackHooks) Adjusted(ev AdjustEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.adjusts = append(h.adjusts, ev)
}

// since returns the events and adjustments heard from the counts e and a
// on, and the counts now.
func (h *stackHooks) since(e, a int) ([]Event, []AdjustEvent, int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Event(nil), h.events[e:]...), append([]AdjustEvent(nil), h.adjusts[a:]...), len(h.events), len(h.adjusts)
}

// stackSubject is the name every subject limiter reports under.
const stackSubject = "subject"

// stackStart is where the stack tests' clocks start: 8 s before a minute
// ends, so the schedule crosses a calendar minute's boundary at 8 s.
var stackStart = epoch.Add(-8 * time.Second)

// stackLimiter is a limiter of the table: a Decider that adjusts.
type stackLimiter interface {
	Decider
	Adjuster
}

// stackEnv is one subject limiter and its clocks.
type stackEnv struct {
	l      stackLimiter
	clock  *ratelimittest.Clock
	m      *miniredis.Miniredis // nil in process
	client *redis.Client        // to m
	move   func(time.Duration)  // miniredis's time; nil in process
	fleet  *Fleet               // on Redis: a fleet of one live replica
	down   bool                 // m is closed
	// local builds the in-process limiter of the same policy on clock.
	local func(t *testing.T, clock Clock) stackLimiter
}

// advance moves the env's clocks to stackStart + at (and miniredis's while
// it is up).
func (e *stackEnv) advance(at time.Duration) {
	d := stackStart.Add(at).Sub(e.clock.Now())
	if d <= 0 {
		return
	}
	e.clock.Advance(d)
	if e.move != nil && !e.down {
		e.move(d)
	}
}

// stackKind is a subject of the table.
type stackKind struct {
	name  string
	redis bool
	// parts is how many limiters report each call: a Composite's parts
	// each report their own share.
	parts int
	build func(t *testing.T, h Hooks) *stackEnv
}

// stackKinds are the six new limiters: limit 4, a window of 10 s, and a
// calendar minute in UTC, each built with hooks under stackSubject's name;
// and a Composite of a sliding log of 4 in 10 s ("per-user") and a
// calendar minute of 6 ("minute"), in process and on Redis.
func stackKinds() []stackKind {
	const limit, window = 4, 10 * time.Second
	opts := func(c Clock, h Hooks) []Option {
		o := []Option{WithClock(c), WithName(stackSubject)}
		if h != nil {
			o = append(o, WithHooks(h))
		}
		return o
	}
	log := func(t *testing.T, c Clock) stackLimiter {
		l, err := NewSlidingLog(limit, window, WithClock(c))
		require.NoError(t, err)
		return l
	}
	counter := func(t *testing.T, c Clock) stackLimiter {
		l, err := NewSlidingCounter(limit, window, WithClock(c))
		require.NoError(t, err)
		return l
	}
	cal := func(t *testing.T, c Clock) stackLimiter {
		l, err := NewCalendarWindow(limit, Calendar{Period: CalendarMinute}, WithClock(c))
		require.NoError(t, err)
		return l
	}
	// A key's own zone, 30 s ahead of UTC: its minutes end 30 s after
	// UTC's, so the schedule crosses none.
	inAKeysZone := keyedTo(Policy{Limit: limit, Window: time.Minute, Zone: "UTC+000030"})
	zonedCal := func(t *testing.T, c Clock) stackLimiter {
		l, err := NewCalendarWindow(limit, Calendar{Period: CalendarMinute}, WithClock(c), inAKeysZone)
		require.NoError(t, err)
		return l
	}
	inProcess := func(build func(*testing.T, Clock, []Option) stackLimiter, local func(*testing.T, Clock) stackLimiter) func(*testing.T, Hooks) *stackEnv {
		return func(t *testing.T, h Hooks) *stackEnv {
			clock := ratelimittest.NewClock(stackStart)
			return &stackEnv{l: build(t, clock, opts(clock, h)), clock: clock, local: local}
		}
	}
	onRedis := func(build func(*testing.T, *stackEnv, []Option) stackLimiter, local func(*testing.T, Clock) stackLimiter) func(*testing.T, Hooks) *stackEnv {
		return func(t *testing.T, h Hooks) *stackEnv {
			m, _, move := redistest.Miniredis(t, stackStart)
			// No retries: a closed miniredis fails each call at once.
			client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { _ = client.Close() })
			e := &stackEnv{clock: ratelimittest.NewClock(stackStart), m: m, client: client, move: move, local: local}
			f, err := NewFleet(client, FleetConfig{Name: "fleet", ID: "a"})
			require.NoError(t, err)
			require.NoError(t, f.Beat(context.Background()))
			require.Equal(t, 1, f.Live())
			e.fleet = f
			o := opts(e.clock, h)[1:] // a Redis limiter's decisions use the server's clock
			e.l = build(t, e, o)
			return e
		}
	}
	composite := func(t *testing.T, perUser, minute Limiter) stackLimiter {
		c, err := NewComposite(Part{Name: "per-user", Limiter: perUser}, Part{Name: "minute", Limiter: minute})
		require.NoError(t, err)
		return c
	}
	localComposite := func(t *testing.T, c Clock) stackLimiter {
		perUser, err := NewSlidingLog(limit, window, WithClock(c))
		require.NoError(t, err)
		minute, err := NewCalendarWindow(6, Calendar{Period: CalendarMinute}, WithClock(c))
		require.NoError(t, err)
		return composite(t, perUser, minute)
	}
	return []stackKind{
		{"SlidingLog", false, 1, inProcess(func(t *testing.T, _ Clock, o []Option) stackLimiter {
			l, err := NewSlidingLog(limit, window, o...)
			require.NoError(t, err)
			return l
		}, log)},
		{"SlidingCounter", false, 1, inProcess(func(t *testing.T, _ Clock, o []Option) stackLimiter {
			l, err := NewSlidingCounter(limit, window, o...)
			require.NoError(t, err)
			return l
		}, counter)},
		{"CalendarWindow", false, 1, inProcess(func(t *testing.T, _ Clock, o []Option) stackLimiter {
			l, err := NewCalendarWindow(limit, Calendar{Period: CalendarMinute}, o...)
			require.NoError(t, err)
			return l
		}, cal)},
		{"RedisSlidingLog", true, 1, onRedis(func(t *testing.T, e *stackEnv, o []Option) stackLimiter {
			l, err := NewRedisSlidingLog(e.client, limit, window, redisOpts(o)...)
			require.NoError(t, err)
			return l
		}, log)},
		{"RedisSlidingCounter", true, 1, onRedis(func(t *testing.T, e *stackEnv, o []Option) stackLimiter {
			l, err := NewRedisSlidingCounter(e.client, limit, window, redisOpts(o)...)
			require.NoError(t, err)
			return l
		}, counter)},
		{"RedisCalendarWindow", true, 1, onRedis(func(t *testing.T, e *stackEnv, o []Option) stackLimiter {
			// The client computes the bounds from a clock that reads
			// miniredis's time.
			l, err := NewRedisCalendarWindow(e.client, limit, Calendar{Period: CalendarMinute}, append(redisOpts(o), WithClock(e.clock))...)
			require.NoError(t, err)
			return l
		}, cal)},
		{"CalendarWindowInAKeysZone", false, 1, inProcess(func(t *testing.T, _ Clock, o []Option) stackLimiter {
			l, err := NewCalendarWindow(limit, Calendar{Period: CalendarMinute}, append(o, inAKeysZone)...)
			require.NoError(t, err)
			return l
		}, zonedCal)},
		{"RedisCalendarWindowInAKeysZone", true, 1, onRedis(func(t *testing.T, e *stackEnv, o []Option) stackLimiter {
			l, err := NewRedisCalendarWindow(e.client, limit, Calendar{Period: CalendarMinute}, append(redisOpts(o), WithClock(e.clock), inAKeysZone)...)
			require.NoError(t, err)
			return l
		}, zonedCal)},
		{"Composite", false, 2, inProcess(func(t *testing.T, _ Clock, o []Option) stackLimiter {
			perUser, err := NewSlidingLog(limit, window, o...)
			require.NoError(t, err)
			minute, err := NewCalendarWindow(6, Calendar{Period: CalendarMinute}, o...)
			require.NoError(t, err)
			return composite(t, perUser, minute)
		}, localComposite)},
		{"RedisComposite", true, 2, onRedis(func(t *testing.T, e *stackEnv, o []Option) stackLimiter {
			perUser, err := NewRedisSlidingLog(e.client, limit, window, redisOpts(o)...)
			require.NoError(t, err)
			minute, err := NewRedisCalendarWindow(e.client, 6, Calendar{Period: CalendarMinute}, append(redisOpts(o), WithClock(e.clock))...)
			require.NoError(t, err)
			return composite(t, perUser, minute)
		}, localComposite)},
	}
}

// stackStep is one call of the schedule: at stackStart + at, a Decide of
// n.
type stackStep struct {
	at time.Duration
	n  int
}

// stackSchedule is the table's schedule, with what each kind answers (log,
// counter, calendar):
//   - 0 s, 1 s: 1 and 3 are taken; all allow;
//   - 2 s, 3 s, 4 s: 2, 2, 1 are denied (a DenyCache answers the second
//     from memory, and the third for the calendar, whose count stays);
//   - 8 s: a calendar minute begins: the calendar allows 1, the others
//     deny it (a DenyCache over the log answers it from its denial of 1);
//   - 10.5 s: the log holds 3 (its first unit has left): 2 is denied and 1
//     passes, which a DenyCache must ask, and then 2 is denied again; the
//     counter weighs its previous window at ⌈4 × 9.5/10⌉ = 4 and denies;
//     the calendar takes 2 and 1 and denies the next 2;
//   - 16 s: the log holds 1 and takes 2 and 1; the counter weighs ⌈1.6⌉ =
//     2 and takes 2, then denies 1; the calendar's count stays at 4.
var stackSchedule = []stackStep{
	{0, 1}, {time.Second, 3}, {2 * time.Second, 2}, {3 * time.Second, 2}, {4 * time.Second, 1},
	{8 * time.Second, 1},
	{10500 * ms, 2}, {10500 * ms, 1}, {10500 * ms, 2},
	{16 * time.Second, 2}, {16 * time.Second, 1},
}

// stackAllowed is what each algorithm answers on stackSchedule.
var stackAllowed = map[string][]bool{
	"SlidingLog":     {true, true, false, false, false, false, false, true, false, true, true},
	"SlidingCounter": {true, true, false, false, false, false, false, false, false, true, false},
	"CalendarWindow": {true, true, false, false, false, true, true, true, false, false, false},
	// A key whose zone is 30 s ahead of UTC crosses no minute's end.
	"CalendarWindowInAKeysZone": {true, true, false, false, false, false, false, false, false, false, false},
	// The sliding log binds the Composite; the minute of 6 takes the 4
	// units of its first window and the 4 of its next.
	"Composite": {true, true, false, false, false, false, false, true, false, true, true},
}

// stackLocal is the steps of stackSchedule a DenyCache answers from
// memory, by algorithm: a sliding window's denial of n answers only calls
// of n, until its RetryAfter (steps 3 and 5; the call of 1 at step 4, and
// those at 10.5 s, go to the backend); a calendar window's answers any
// cost until its window ends (steps 3 and 4, then 9 and 10 after the
// denial at 10.5 s).
var stackLocal = map[string][]int{
	"SlidingLog":     {3, 5},
	"SlidingCounter": {3, 5},
	"CalendarWindow": {3, 4, 9, 10},
	// Its window lasts the whole schedule: its denial answers every later
	// call.
	"CalendarWindowInAKeysZone": {3, 4, 5, 6, 7, 8, 9, 10},
	"Composite":                 {3, 5},
}

// stackDecorator is a decorator of the table around a subject.
type stackDecorator struct {
	name      string
	redisOnly bool
	wrap      func(t *testing.T, e *stackEnv, h Hooks) stackLimiter
	// reportsAll says the decorator reports every call to its hooks (a
	// DenyCache reports only those it answers).
	reportsAll bool
}

func stackDecorators() []stackDecorator {
	return []stackDecorator{
		{"Shadow", false, func(t *testing.T, e *stackEnv, h Hooks) stackLimiter {
			s, err := NewShadow(e.l, ShadowConfig{Hooks: h, Clock: e.clock})
			require.NoError(t, err)
			return s
		}, true},
		{"DenyCache", false, func(t *testing.T, e *stackEnv, h Hooks) stackLimiter {
			c, err := NewDenyCache(e.l, DenyCacheConfig{MaxAge: time.Minute, Hooks: h, Clock: e.clock})
			require.NoError(t, err)
			return c
		}, false},
		{"Guard", false, func(t *testing.T, e *stackEnv, h Hooks) stackLimiter {
			g, err := NewGuard(e.l, GuardConfig{OnFailure: FailClosed, Hooks: h, Clock: e.clock})
			require.NoError(t, err)
			return g
		}, true},
		{"Guard(FailOver)", true, func(t *testing.T, e *stackEnv, h Hooks) stackLimiter {
			fb, err := e.fleet.Fallback(e.l, WithClock(e.clock))
			require.NoError(t, err)
			g, err := NewGuard(e.l, GuardConfig{OnFailure: FailOver, Fallback: fb, Hooks: h, Name: "Guard(FailOver)", Clock: e.clock})
			require.NoError(t, err)
			return g
		}, true},
	}
}

// algorithm returns the name of the algorithm of a kind of the table.
func algorithm(kind string) string {
	if len(kind) > 5 && kind[:5] == "Redis" {
		return kind[5:]
	}
	return kind
}

// TestDecoratorsAnswerAsTheNewLimitersOnTheSameSchedule runs each of the
// six new limiters, and a Composite of a sliding log and a calendar
// minute in process and on Redis, bare and inside each decorator, on the same schedule
// (a sliding denial whose smaller cost passes, a calendar boundary):
// every Decision is the bare limiter's (a Shadow lets denials through with
// the denial in Enforced; a DenyCache's remembered denial denies with a
// RetryAfter no shorter than the backend's), Refund, Settle and Reset pass
// through to the same Results, and the limiter and the decorator each
// report every call once (each part of a Composite its share), under
// their names.
func TestDecoratorsAnswerAsTheNewLimitersOnTheSameSchedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, kind := range stackKinds() {
		for _, dec := range stackDecorators() {
			if dec.redisOnly && !kind.redis {
				continue
			}
			t.Run(kind.name+"/"+dec.name, func(t *testing.T) {
				bare := kind.build(t, nil)
				lh, dh := &stackHooks{}, &stackHooks{}
				env := kind.build(t, lh)
				wrapped := dec.wrap(t, env, dh)
				decName := dec.name
				want := stackAllowed[algorithm(kind.name)]
				var local []int
				told := 0 // the next units a DenyCache's local answers told
				for i, st := range stackSchedule {
					bare.advance(st.at)
					env.advance(st.at)
					bd, err := bare.l.Decide(ctx, "k", st.n)
					require.NoError(t, err, "step %d", i)
					_, _, le, _ := lh.since(0, 0)
					_, _, de, _ := dh.since(0, 0)
					d, err := wrapped.Decide(ctx, "k", st.n)
					require.NoError(t, err, "step %d", i)
					assert.Equal(t, want[i], bd.Allowed, "step %d: the scenario", i)

					switch {
					case dec.name == "Shadow" && !bd.Allowed:
						w := bd
						w.Allowed, w.RetryAfter, w.WouldDeny, w.Source = true, 0, true, FromShadow
						assert.Equal(t, w, d, "step %d: a denial let through, the backend's in Enforced", i)
					case d.Source == FromDenyCache:
						local = append(local, i)
						assert.False(t, d.Allowed, "step %d", i)
						assert.Equal(t, bd.Allowed, d.Allowed, "step %d: as the backend answers", i)
						assert.GreaterOrEqual(t, d.RetryAfter, bd.RetryAfter, "step %d: no shorter a wait than the backend's", i)
						assert.Equal(t, bd.Policies, d.Policies, "step %d", i)
						assert.Equal(t, bd.Policy, d.Policy, "step %d", i)
					default:
						assert.Equal(t, bd, d, "step %d: the backend's Decision", i)
					}
					// The effective window the middlewares send is the
					// backend's, policy by policy; a DenyCache's remembered
					// denial tells it aged, while the key is as it was (and
					// nothing once one unit more than it shows is there).
					for p := range bd.Policies {
						bn, bok := bd.NextUnit(p)
						dn, dok := d.NextUnit(p)
						if d.Source != FromDenyCache || dok {
							assert.Equal(t, [2]any{bn, bok}, [2]any{dn, dok}, "step %d: policy %d's NextUnit", i, p)
						}
						if d.Source == FromDenyCache && dok {
							told++
						}
					}

					evs, _, _, _ := lh.since(le, 0)
					if d.Source == FromDenyCache {
						assert.Empty(t, evs, "step %d: answered from memory, the backend is not asked", i)
					} else if assert.Len(t, evs, kind.parts, "step %d: the limiter (each part) reports the call once", i) {
						for _, ev := range evs {
							assert.Equal(t, stackSubject, ev.Limiter, "step %d", i)
						}
						if kind.parts == 1 {
							assert.Equal(t, bd, evs[0].Decision, "step %d: the limiter reports its own Decision", i)
						}
					}
					devs, _, _, _ := dh.since(de, 0)
					if dec.reportsAll || d.Source == FromDenyCache {
						if assert.Len(t, devs, 1, "step %d: the decorator reports the call once", i) {
							assert.Equal(t, decName, devs[0].Limiter, "step %d", i)
							assert.Equal(t, d, devs[0].Decision, "step %d", i)
						}
					} else {
						assert.Empty(t, devs, "step %d: a DenyCache reports only what it answers", i)
					}
				}
				if dec.name == "DenyCache" {
					assert.Equal(t, stackLocal[algorithm(kind.name)], local, "the steps answered from memory")
					if len(local) > 0 {
						assert.Positive(t, told, "a remembered denial tells the next unit, aged")
					}
				}

				// Adjustments pass through to the same Results, once per call
				// in each report.
				adjust := []struct {
					op AdjustOp
					do func(l stackLimiter) (Result, error)
				}{
					{AdjustRefund, func(l stackLimiter) (Result, error) { return l.Refund(ctx, "k", 1) }},
					{AdjustSettle, func(l stackLimiter) (Result, error) { return l.Settle(ctx, "k", 2, 1) }},
					{AdjustReset, func(l stackLimiter) (Result, error) { return Result{}, l.Reset(ctx, "k") }},
				}
				for _, a := range adjust {
					want, err := a.do(bare.l)
					require.NoError(t, err, "%v", a.op)
					_, _, le, la := lh.since(0, 0)
					_, _, _, da := dh.since(0, 0)
					got, err := a.do(wrapped)
					require.NoError(t, err, "%v", a.op)
					assert.Equal(t, want, got, "%v", a.op)
					_, ladj, _, _ := lh.since(le, la)
					if assert.Len(t, ladj, kind.parts, "%v: the limiter (each part) reports it once", a.op) {
						for _, ev := range ladj {
							assert.Equal(t, stackSubject, ev.Limiter)
							assert.Equal(t, a.op, ev.Op)
						}
						if kind.parts == 1 {
							assert.Equal(t, want, ladj[0].Result)
						}
					}
					_, dadj, _, _ := dh.since(0, da)
					if assert.Len(t, dadj, 1, "%v: the decorator reports it once", a.op) {
						assert.Equal(t, decName, dadj[0].Limiter)
						assert.Equal(t, a.op, dadj[0].Op)
					}
					bd, err := bare.l.Decide(ctx, "k", 4)
					require.NoError(t, err)
					d, err := wrapped.Decide(ctx, "k", 4)
					require.NoError(t, err)
					if dec.name == "Shadow" && !bd.Allowed {
						assert.Equal(t, bd.Result, d.Enforced, "after %v", a.op)
					} else {
						assert.Equal(t, bd, d, "after %v: the backend is asked, and answers as the bare one", a.op)
					}
				}

				// A Settle above its bound (ten limits of 4) is the
				// caller's mistake through every decorator, as for the bare
				// limiter: refused with ErrInvalidCost, never ErrBackend
				// (a Guard neither answers it by its failure policy nor
				// counts it), reported once, and nothing changes.
				wantRefused, err := bare.l.Settle(ctx, "k", 1, 41)
				require.ErrorIs(t, err, ErrInvalidCost)
				_, _, _, da := dh.since(0, 0)
				refused, err := wrapped.Settle(ctx, "k", 1, 41)
				require.ErrorIs(t, err, ErrInvalidCost)
				require.ErrorIs(t, err, ErrCaller)
				assert.NotErrorIs(t, err, ErrBackend)
				assert.Equal(t, wantRefused, refused)
				_, dadj, _, _ := dh.since(0, da)
				if assert.Len(t, dadj, 1, "the decorator reports the refused Settle once") {
					assert.ErrorIs(t, dadj[0].Err, ErrInvalidCost)
				}
				bd, err := bare.l.Decide(ctx, "k", 4)
				require.NoError(t, err)
				d, err := wrapped.Decide(ctx, "k", 4)
				require.NoError(t, err)
				if dec.name == "Shadow" && !bd.Allowed {
					assert.Equal(t, bd.Result, d.Enforced, "after a refused Settle")
				} else {
					assert.Equal(t, bd, d, "after a refused Settle: the backend answers, as the bare one")
				}
			})
		}
	}
}

// TestGuardAnswersForTheNewRedisLimitersWhileRedisIsDown closes the
// miniredis of each new Redis limiter inside a Guard and runs the
// schedule a minute on (the same second of the minute): FailClosed denies
// every call under the backend's policy (a calendar window's the length
// of the window open now), and FailOver answers as the in-process limiter
// of the same policy does on the same schedule (Fleet.Fallback's share of
// one live replica is the whole policy), under the backend's policy, so
// the sliding denial whose smaller cost passes and the calendar boundary
// hold on the fallback too. The limiter reports each failed call once,
// and the Guard each answer once, with the backend's error.
func TestGuardAnswersForTheNewRedisLimitersWhileRedisIsDown(t *testing.T) {
	ctx := context.Background()
	for _, kind := range stackKinds() {
		if !kind.redis {
			continue
		}
		for _, policy := range []FailurePolicy{FailClosed, FailOver} {
			t.Run(kind.name+"/"+[]string{FailClosed: "FailClosed", FailOver: "FailOver"}[policy], func(t *testing.T) {
				lh, dh := &stackHooks{}, &stackHooks{}
				env := kind.build(t, lh)
				cfg := GuardConfig{OnFailure: policy, Hooks: dh, Clock: env.clock}
				if policy == FailOver {
					fb, err := env.fleet.Fallback(env.l, WithClock(env.clock))
					require.NoError(t, err)
					cfg.Fallback = fb
				}
				g, err := NewGuard(env.l, cfg)
				require.NoError(t, err)
				env.m.Close()
				env.down = true
				env.advance(time.Minute)
				refClock := ratelimittest.NewClock(env.clock.Now())
				ref := env.local(t, refClock)
				want := stackAllowed[algorithm(kind.name)]
				for i, st := range stackSchedule {
					env.advance(time.Minute + st.at)
					refClock.Set(env.clock.Now())
					rd, err := ref.Decide(ctx, "k", st.n)
					require.NoError(t, err, "step %d", i)
					policies, err := env.l.Policies(ctx, "k")
					require.NoError(t, err)
					_, _, le, _ := lh.since(0, 0)
					_, _, de, _ := dh.since(0, 0)
					d, err := g.Decide(ctx, "k", st.n)
					require.NoError(t, err, "step %d", i)
					assert.Equal(t, rd.Policies, policies, "step %d: the backend's policy is the in-process one's, the window open now", i)
					assert.Equal(t, policies, d.Policies, "step %d: the backend's policies", i)
					assert.Equal(t, policies[d.PolicyIndex], d.Policy, "step %d", i)
					if policy == FailOver {
						assert.Equal(t, rd.PolicyIndex, d.PolicyIndex, "step %d: the part that bound the fallback's decision", i)
						assert.Equal(t, want[i], d.Allowed, "step %d: the scenario, on the fallback", i)
						assert.Equal(t, FromFallback, d.Source, "step %d", i)
						assert.Equal(t, rd.Result, d.Result, "step %d: the fallback answers as the in-process limiter", i)
					} else {
						assert.Equal(t, Result{Limit: 4, RetryAfter: time.Second, ResetAfter: time.Second}, d.Result, "step %d", i)
						assert.Equal(t, FromFailClosed, d.Source, "step %d", i)
					}
					evs, _, _, _ := lh.since(le, 0)
					if assert.Len(t, evs, kind.parts, "step %d: the limiter (each part) reports its failure once", i) {
						for _, ev := range evs {
							assert.Equal(t, stackSubject, ev.Limiter)
							assert.ErrorIs(t, ev.Err, ErrBackend)
						}
					}
					devs, _, _, _ := dh.since(de, 0)
					if assert.Len(t, devs, 1, "step %d: the Guard reports its answer once", i) {
						assert.Equal(t, "Guard", devs[0].Limiter)
						assert.Equal(t, d, devs[0].Decision)
						assert.ErrorIs(t, devs[0].BackendErr, ErrBackend)
					}
				}
			})
		}
	}
}

// TestPrefetchInStacksAdmitsAsTheBareLimiterWithinABlocksLife runs the token bucket, GCRA
// and fixed window, in process and on miniredis, bare and as
// Prefetch(limiter) inside a Guard, a DenyCache and a Shadow: on one
// schedule (limit 10, calls of 1 a millisecond apart), the leased stack
// allows exactly the calls the bare limiter allows, answers Source
// FromBackend (or the outer decorator's own Source for a denial it
// answers), reports each call once to the Prefetch's hooks, and passes
// Refund, Settle and Reset through.
func TestPrefetchInStacksAdmitsAsTheBareLimiterWithinABlocksLife(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type subject struct {
		name  string
		build func(t *testing.T, clock *ratelimittest.Clock, m *miniredis.Miniredis) Limiter
	}
	inProc := func(f func(c *ratelimittest.Clock) (Limiter, error)) func(*testing.T, *ratelimittest.Clock, *miniredis.Miniredis) Limiter {
		return func(t *testing.T, c *ratelimittest.Clock, _ *miniredis.Miniredis) Limiter {
			l, err := f(c)
			require.NoError(t, err)
			return l
		}
	}
	onRedis := func(f func(c redis.Scripter) (Limiter, error)) func(*testing.T, *ratelimittest.Clock, *miniredis.Miniredis) Limiter {
		return func(t *testing.T, _ *ratelimittest.Clock, m *miniredis.Miniredis) Limiter {
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			t.Cleanup(func() { _ = c.Close() })
			l, err := f(c)
			require.NoError(t, err)
			return l
		}
	}
	subjects := []subject{
		{"TokenBucket", inProc(func(c *ratelimittest.Clock) (Limiter, error) { return NewTokenBucket(PerSecond(1), 10, WithClock(c)) })},
		{"GCRA", inProc(func(c *ratelimittest.Clock) (Limiter, error) { return NewGCRA(10, 10*time.Second, WithClock(c)) })},
		{"FixedWindow", inProc(func(c *ratelimittest.Clock) (Limiter, error) { return NewFixedWindow(10, 10*time.Second, WithClock(c)) })},
		{"RedisTokenBucket", onRedis(func(c redis.Scripter) (Limiter, error) { return NewRedisTokenBucket(c, PerSecond(1), 10) })},
		{"RedisGCRA", onRedis(func(c redis.Scripter) (Limiter, error) { return NewRedisGCRA(c, 10, 10*time.Second) })},
		{"RedisFixedWindow", onRedis(func(c redis.Scripter) (Limiter, error) { return NewRedisFixedWindow(c, 10, 10*time.Second) })},
	}
	wraps := map[string]func(t *testing.T, l *Prefetch, clock Clock) stackLimiter{
		"Prefetch": func(_ *testing.T, l *Prefetch, _ Clock) stackLimiter { return l },
		"Guard(Prefetch)": func(t *testing.T, l *Prefetch, clock Clock) stackLimiter {
			g, err := NewGuard(l, GuardConfig{OnFailure: FailClosed, Clock: clock})
			require.NoError(t, err)
			return g
		},
		"DenyCache(Prefetch)": func(t *testing.T, l *Prefetch, clock Clock) stackLimiter {
			c, err := NewDenyCache(l, DenyCacheConfig{Clock: clock})
			require.NoError(t, err)
			return c
		},
		"Shadow(Prefetch)": func(t *testing.T, l *Prefetch, clock Clock) stackLimiter {
			s, err := NewShadow(l, ShadowConfig{Clock: clock, Enforce: true})
			require.NoError(t, err)
			return s
		},
	}
	for _, sub := range subjects {
		for wname, wrap := range wraps {
			t.Run(sub.name+"/"+wname, func(t *testing.T) {
				bareClock, clock := ratelimittest.NewClock(stackStart), ratelimittest.NewClock(stackStart)
				bm, _, bmove := redistest.Miniredis(t, stackStart)
				m, _, move := redistest.Miniredis(t, stackStart)
				bare := sub.build(t, bareClock, bm)
				backend := sub.build(t, clock, m)
				hooks := &stackHooks{}
				cfg := PrefetchConfig{HotCalls: 2, MinBlock: 3, MaxShare: 2, Hooks: hooks}
				if _, local := backend.(*TokenBucket); !local {
					if _, gcra := backend.(*GCRA); !gcra {
						if _, fw := backend.(*FixedWindow); !fw {
							cfg.Clock = clock
						}
					}
				}
				l, err := NewPrefetch(backend, cfg)
				require.NoError(t, err)
				stack := wrap(t, l, clock)
				for i := range 30 {
					bd, err := decideAny(ctx, bare, "k", 1)
					require.NoError(t, err)
					d, err := stack.Decide(ctx, "k", 1)
					require.NoError(t, err)
					assert.Equal(t, bd.Allowed, d.Allowed, "call %d", i)
					assert.Equal(t, bd.Policy, d.Policy, "call %d", i)
					if d.Allowed {
						assert.Equal(t, FromBackend, d.Source, "call %d", i)
					}
					if !d.Allowed && d.Source == FromBackend {
						assert.Equal(t, bd.RetryAfter, d.RetryAfter, "call %d: a denial is the shared key's own", i)
					}
					for _, c := range []*ratelimittest.Clock{bareClock, clock} {
						c.Advance(time.Millisecond)
					}
					bmove(time.Millisecond)
					move(time.Millisecond)
				}
				evs, _, _, _ := hooks.since(0, 0)
				local := 0
				for _, ev := range evs {
					if ev.Limiter == "Prefetch" {
						local++
					}
				}
				if wname == "DenyCache(Prefetch)" {
					assert.LessOrEqual(t, local, 30, "the Prefetch reports the calls that reach it")
				} else {
					assert.Equal(t, 30, local, "the Prefetch reports each call once")
				}
				_, err = stack.Refund(ctx, "k", 1)
				require.NoError(t, err)
				_, err = stack.Settle(ctx, "k", 1, 2)
				require.NoError(t, err)
				// A Settle above ten limits (of 10) is the caller's
				// mistake, through every stack.
				_, err = stack.Settle(ctx, "k", 1, 101)
				require.ErrorIs(t, err, ErrInvalidCost)
				require.ErrorIs(t, err, ErrCaller)
				assert.NotErrorIs(t, err, ErrBackend)
				require.NoError(t, stack.Reset(ctx, "k"))
				d, err := stack.Decide(ctx, "k", 10)
				require.NoError(t, err)
				assert.True(t, d.Allowed, "after Reset, the key is full")
			})
		}
	}
}
