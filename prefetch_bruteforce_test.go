package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A brute-force check of the Prefetch's exactness: tiny shared limiters
// (capacity 2 to 6, a unit back every millisecond, windows of a few
// milliseconds) on a fake clock, 2 or 3 replicas that lease from the first
// calls, and many short random schedules of clock steps, calls, Refunds,
// Settles and replicas closing, each run on the bare shared limiter too.
// After each schedule every span and every window is checked against the
// shared limiter's bound, net of the callers' refunds (docs/leases.md:
// "refunded units no longer count as admitted"). Reset is left out: the
// docs say a Reset through one replica may let the fleet admit the other
// replicas' blocks on top of a full key.

// bfKind is a shared limiter kind of the brute force.
type bfKind int

const (
	bfBucket bfKind = iota
	bfGCRA
	bfWindow
)

func (k bfKind) String() string { return [...]string{"TokenBucket", "GCRA", "FixedWindow"}[k] }

// bfOp is one step of a schedule: the clock moves step ms, then op runs on
// replica r.
type bfOp struct {
	step int64 // ms
	op   byte  // 'c' call, 'r' refund, 's' settle, 'x' close and replace
	r    int
	n, m int  // call: cost n; refund: n units of call m; settle: taken n, cost m of call i
	i    int  // settle: which call
	at   bool // refund, settle: with TakenAt the call's time
}

func (o bfOp) String() string {
	s := fmt.Sprintf("+%dms ", o.step)
	switch o.op {
	case 'c':
		return s + fmt.Sprintf("r%d.Allow(%d)", o.r, o.n)
	case 'r':
		return s + fmt.Sprintf("r%d.Refund(%d of call #%d, TakenAt %v)", o.r, o.n, o.m, o.at)
	case 's':
		return s + fmt.Sprintf("r%d.Settle(taken %d, cost %d of call #%d, TakenAt %v)", o.r, o.n, o.m, o.i, o.at)
	}
	return s + fmt.Sprintf("r%d.Close, replaced", o.r)
}

// bfSchedule is a random schedule over one shared limiter of capacity c
// (window: limit c per window ms).
type bfSchedule struct {
	kind   bfKind
	c      int
	window int64 // ms, fixed window
	cfgs   []PrefetchConfig
	ops    []bfOp
	// shared, when set, builds the shared limiter instead (a Redis one,
	// deciding on clock); the Prefetches then take clock as their Clock.
	shared func(t *testing.T, clock *ratelimittest.Clock, h Hooks) bfReplica
}

func (s bfSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s C=%d", s.kind, s.c)
	if s.kind == bfWindow {
		fmt.Fprintf(&b, " window=%dms", s.window)
	}
	for r, cfg := range s.cfgs {
		fmt.Fprintf(&b, "\n  r%d: HotCalls %d HotSpan %v MinBlock %d MaxShare %d GiveBackGrace %v", r, cfg.HotCalls, cfg.HotSpan, cfg.MinBlock, cfg.MaxShare, cfg.GiveBackGrace)
	}
	for i, o := range s.ops {
		fmt.Fprintf(&b, "\n  %d: %s", i, o)
	}
	return b.String()
}

// bfRandomSchedule returns a schedule of steps ops over a limiter of kind:
// with callers' Refunds and Settles when adjust, each with TakenAt when
// allAt and half of them otherwise.
func bfRandomSchedule(rng *rand.Rand, kind bfKind, steps int, adjust, allAt bool) bfSchedule {
	s := bfSchedule{kind: kind, c: 2 + rng.IntN(5), window: 2 + rng.Int64N(5)}
	for range 2 + rng.IntN(2) {
		s.cfgs = append(s.cfgs, PrefetchConfig{
			HotCalls:      1 + rng.IntN(2),
			HotSpan:       time.Duration(1+rng.IntN(4)) * time.Millisecond,
			MinBlock:      2 + rng.IntN(s.c-1),
			MaxShare:      1,
			GiveBackGrace: []time.Duration{time.Nanosecond, time.Millisecond, 0}[rng.IntN(3)],
		})
	}
	// Each schedule has its pace, and half of them a replica that makes
	// most of the calls: a key is leased only where a replica's calls
	// come about as fast as its units come back.
	paces := [][]int64{{0, 0, 1, 1, 2, 3}, {1, 1, 1, 2}, {0, 1, 1, 1, 2, 3}, {1}}
	pace := paces[rng.IntN(len(paces))]
	hot := -1
	if rng.IntN(2) == 0 {
		hot = rng.IntN(len(s.cfgs))
	}
	for range steps {
		o := bfOp{step: pace[rng.IntN(len(pace))], r: rng.IntN(len(s.cfgs))}
		if hot >= 0 && rng.IntN(4) != 0 {
			o.r = hot
		}
		p := rng.IntN(100)
		if !adjust && p >= 72 && p < 94 {
			p = 0
		}
		switch {
		case p < 72:
			o.op, o.n = 'c', max(1+rng.IntN(s.c)-rng.IntN(s.c), 1) // 1 half the time
		case p < 84:
			o.op, o.n, o.m, o.at = 'r', 1+rng.IntN(s.c), rng.IntN(1<<20), allAt || rng.IntN(2) == 0
		case p < 94:
			o.op, o.n, o.m, o.i, o.at = 's', 1+rng.IntN(s.c), rng.IntN(s.c), rng.IntN(1<<20), allAt || rng.IntN(2) == 0
		default:
			o.op = 'x'
		}
		s.ops = append(s.ops, o)
	}
	return s
}

// bfLog records what the shared limiter's hooks heard (for the windows it
// opened) and what the callers were answered, in order.
type bfLog struct {
	clock   *ratelimittest.Clock
	events  []bfEvent
	calls   int // the callers' calls
	decided int // the shared limiter's decisions
	local   int // the callers' calls answered without one
}

type bfEvent struct {
	at      int64 // ns since epoch
	what    byte  // 'a' admitted (n), 'f' refunded by a caller (n, takenAt), 'b' backend allowed, 'g' backend adjusted
	n       int64
	takenAt int64 // 'f' with TakenAt; -1 without
	res     Result
}

func (g *bfLog) now() int64 { return int64(g.clock.Now().Sub(epoch)) }

func (g *bfLog) Decided(ev Event) {
	g.decided++
	if ev.Err == nil && ev.Allowed && ev.Cost > 0 {
		g.events = append(g.events, bfEvent{at: g.now(), what: 'b', n: int64(ev.Cost), res: ev.Result})
	}
}

func (g *bfLog) BreakerChanged(BreakerState, BreakerState) {}

func (g *bfLog) Adjusted(ev AdjustEvent) {
	if ev.Err == nil && (ev.Op == AdjustRefund || ev.Op == AdjustSettle) {
		g.events = append(g.events, bfEvent{at: g.now(), what: 'g', res: ev.Result})
	}
}

// bfReplica is what a caller calls: a Prefetch, or the bare shared limiter.
type bfReplica interface {
	Decider
	Adjuster
}

// bfCall is an admitted call whose units may be given back.
type bfCall struct {
	at   int64
	left int64
}

// bfRun runs s, through Prefetches when leased and on the bare shared limiter
// otherwise, and returns what was recorded.
func bfRun(t *testing.T, s bfSchedule, leased bool) *bfLog {
	t.Helper()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	log := &bfLog{clock: clock}
	var shared bfReplica
	var err error
	switch {
	case s.shared != nil:
		shared = s.shared(t, clock, log)
	case s.kind == bfBucket:
		shared, err = NewTokenBucket(PerSecond(1000), s.c, WithClock(clock), WithHooks(log))
	case s.kind == bfGCRA:
		shared, err = NewGCRA(s.c, time.Duration(s.c)*time.Millisecond, WithClock(clock), WithHooks(log))
	default:
		shared, err = NewFixedWindow(s.c, time.Duration(s.window)*time.Millisecond, WithClock(clock), WithHooks(log))
	}
	require.NoError(t, err)
	replica := func(r int) bfReplica {
		if !leased {
			return shared
		}
		cfg := s.cfgs[r]
		if s.shared != nil {
			cfg.Clock, cfg.GiveBackGrace = clock, 2*time.Millisecond
		}
		l, err := NewPrefetch(shared, cfg)
		require.NoError(t, err)
		return l
	}
	replicas := make([]bfReplica, len(s.cfgs))
	for r := range replicas {
		replicas[r] = replica(r)
	}
	calls := make([][]*bfCall, len(s.cfgs))
	// giveBack records a caller's give-back of n units of c, with
	// TakenAt when at.
	giveBack := func(c *bfCall, n int64, at bool) []AdjustOption {
		c.left -= n
		ev := bfEvent{at: log.now(), what: 'f', n: n, takenAt: -1}
		if at {
			ev.takenAt = c.at
		}
		log.events = append(log.events, ev)
		if at {
			return []AdjustOption{TakenAt(epoch.Add(time.Duration(c.at)))}
		}
		return nil
	}
	for _, o := range s.ops {
		clock.Advance(time.Duration(o.step) * time.Millisecond)
		rep := replicas[o.r]
		switch o.op {
		case 'c':
			before := log.decided
			d, err := rep.Decide(ctx, "k", o.n)
			require.NoError(t, err)
			log.calls++
			if log.decided == before {
				log.local++
			}
			if d.Allowed {
				log.events = append(log.events, bfEvent{at: log.now(), what: 'a', n: int64(o.n)})
				calls[o.r] = append(calls[o.r], &bfCall{at: log.now(), left: int64(o.n)})
			}
		case 'r':
			if len(calls[o.r]) == 0 {
				continue
			}
			c := calls[o.r][o.m%len(calls[o.r])]
			n := min(int64(o.n), c.left)
			if n == 0 {
				continue
			}
			// The event goes first: a refund's effect is on the key
			// once it returns.
			opts := giveBack(c, n, o.at)
			_, err := rep.Refund(ctx, "k", int(n), opts...)
			require.NoError(t, err)
		case 's':
			if len(calls[o.r]) == 0 {
				continue
			}
			c := calls[o.r][o.i%len(calls[o.r])]
			taken := min(int64(o.n), c.left)
			cost := min(int64(o.m), taken-1)
			if taken == 0 || cost < 0 {
				continue
			}
			opts := giveBack(c, taken-cost, o.at)
			_, err := rep.Settle(ctx, "k", int(taken), int(cost), opts...)
			require.NoError(t, err)
		case 'x':
			if l, ok := rep.(*Prefetch); ok {
				if err := l.Close(ctx); s.shared == nil || !errors.Is(err, ErrBackend) {
					// On Redis a give-back may outlast its grace, a real
					// 2 ms: its units then decay.
					require.NoError(t, err)
				}
				replicas[o.r] = replica(o.r)
			}
		}
	}
	return log
}

// bfOverBucket returns a span [a, b] (ns) in which the callers were
// admitted more than c + ⌊(b − a)/unit⌋ units net of their refunds, and
// the units over; ok false when there is none.
func bfOverBucket(events []bfEvent, c, unit int64) (a, b, over int64, ok bool) {
	type at struct{ t, net int64 }
	var net []at
	for _, ev := range events {
		var d int64
		switch ev.what {
		case 'a':
			d = ev.n
		case 'f':
			d = -ev.n
		default:
			continue
		}
		if len(net) > 0 && net[len(net)-1].t == ev.at {
			net[len(net)-1].net += d
		} else {
			net = append(net, at{ev.at, d})
		}
	}
	for i := range net {
		var sum int64
		for j := i; j < len(net); j++ {
			sum += net[j].net
			if o := sum - c - (net[j].t-net[i].t)/unit; o > over {
				a, b, over, ok = net[i].t, net[j].t, o, true
			}
		}
	}
	return a, b, over, ok
}

// bfOverWindow returns the start of a window (as the shared limiter's own
// answers tell its windows: one opens at an allowed call when none is
// open, and ends ResetAfter later, or when a refund or settle takes its
// count to 0) in which the callers were admitted more than limit units
// net of their refunds, the units over, and the units admitted while no
// window was open; a caller's refund counts in the window open when it is
// made, unless its TakenAt is before that window opened, which the bare
// FixedWindow ignores.
func bfOverWindow(events []bfEvent, limit, window int64) (start, over, outside int64) {
	end := int64(-1)
	var units int64
	for _, ev := range events {
		open := end >= 0 && ev.at < end
		switch ev.what {
		case 'a':
			if !open {
				outside += ev.n
				continue
			}
			units += ev.n
			if units-limit > over {
				start, over = end-window, units-limit
			}
		case 'f':
			if open && (ev.takenAt < 0 || ev.takenAt >= end-window) {
				units -= ev.n
			}
		case 'g':
			if open && int64(ev.res.Remaining) == limit {
				end = -1 // its count fell to 0: it ended
			}
		case 'b':
			if e := ev.at + int64(ev.res.ResetAfter); !open || e != end {
				end, units = e, 0 // a new window
			}
		}
	}
	return start, over, outside
}

// bfViolation returns what s's run breaks of the shared limiter's bound
// by more than slack units, or "".
func bfViolation(t *testing.T, s bfSchedule, leased bool, slack int64) string {
	v, _ := bfCheck(t, s, leased, slack)
	return v
}

// bfCheck is bfViolation that also returns the run's log.
func bfCheck(t *testing.T, s bfSchedule, leased bool, slack int64) (string, *bfLog) {
	log := bfRun(t, s, leased)
	v := bfLogViolation(log, s, slack)
	return v, log
}

// bfLogViolation returns what log breaks of s's shared limiter's bound by
// more than slack units, or "".
func bfLogViolation(log *bfLog, s bfSchedule, slack int64) string {
	ms := int64(time.Millisecond)
	if s.kind == bfWindow {
		start, over, outside := bfOverWindow(log.events, int64(s.c), s.window*ms)
		if over > slack || outside > slack {
			return fmt.Sprintf("%d units over the limit in the window opened at %v, %d admitted outside any window", over, time.Duration(start), outside)
		}
		return ""
	}
	if a, b, over, ok := bfOverBucket(log.events, int64(s.c), ms); ok && over > slack {
		return fmt.Sprintf("%d units over C + ⌊(b − a)/1ms⌋ in [%v, %v]", over, time.Duration(a), time.Duration(b))
	}
	return ""
}

// bfMinimise drops ops from s, and shortens its clock steps, while the
// leased run still breaks the bound by more than slack.
func bfMinimise(t *testing.T, s bfSchedule, slack int64) bfSchedule {
	for changed := true; changed; {
		changed = false
		for i := len(s.ops) - 1; i >= 0; i-- {
			try := s
			try.ops = slices.Delete(slices.Clone(s.ops), i, i+1)
			if bfViolation(t, try, true, slack) != "" {
				s, changed = try, true
			}
		}
		for i := range s.ops {
			if s.ops[i].step == 0 {
				continue
			}
			try := s
			try.ops = slices.Clone(s.ops)
			try.ops[i].step--
			if bfViolation(t, try, true, slack) != "" {
				s, changed = try, true
			}
		}
	}
	return s
}

// TestPrefetchBruteForceNeverExceedsTheSharedBound: for each kind, many
// random schedules, run on the bare shared limiter, which must always keep
// within the bound (this checks the checker: C + ⌊(b − a)/T⌋ is the bare
// bucket's and GCRA's exact bound on a clock of whole units), and through
// the prefetch fleet:
//
//   - calls and replicas closing only: the fleet keeps within the bound;
//   - with callers' Refunds and Settles that give units back, each with
//     TakenAt: a fixed window's fleet keeps within it (a block takes back
//     only units of calls made since its take); a token bucket's or
//     GCRA's may exceed it by the units the replicas hold, never more
//     (the backend caps a Refund at C, not knowing what replicas hold:
//     see docs/leases.md);
//   - with half of them without TakenAt: a fixed window's fleet, too, may
//     exceed it by the units the replicas hold (a Refund of units of an
//     earlier window takes the count of the window open now below what
//     the blocks hold), never more.
//
// The schedules that exceed the bound, within that slack, are counted in
// the log.
func TestPrefetchBruteForceNeverExceedsTheSharedBound(t *testing.T) {
	t.Parallel()
	schedules, steps := sized(80, 1500), 60
	modes := []struct {
		name          string
		adjust, allAt bool
	}{
		{"calls", false, false},
		{"refunds with TakenAt", true, true},
		{"refunds", true, false},
	}
	for _, kind := range []bfKind{bfBucket, bfGCRA, bfWindow} {
		for mi, mode := range modes {
			t.Run(kind.String()+"/"+mode.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(kind)+1, uint64(mi)))
				exceeded, calls, local := 0, 0, 0
				for i := range schedules {
					s := bfRandomSchedule(rng, kind, steps, mode.adjust, mode.allAt)
					if v := bfViolation(t, s, false, 0); v != "" {
						t.Fatalf("schedule %d: the bare shared limiter: %s\n%s", i, v, s)
					}
					var slack int64 // the units the replicas can hold
					if mode.adjust && (kind != bfWindow || !mode.allAt) {
						slack = int64(len(s.cfgs) * s.c) // MaxShare 1: a block holds at most C
					}
					v, log := bfCheck(t, s, true, slack)
					calls, local = calls+log.calls, local+log.local
					if v != "" {
						m := bfMinimise(t, s, slack)
						t.Fatalf("schedule %d: the prefetch fleet: %s\nminimised (%s):\n%s", i, v, bfViolation(t, m, true, slack), m)
					}
					if slack > 0 && bfViolation(t, s, true, 0) != "" {
						exceeded++
					}
				}
				assert.Greater(t, local*50, calls, "at least 2%% of the calls answered from a block: the fleet leases")
				t.Logf("%d of %d schedules exceeded the bare bound, within the units held; %d of %d calls answered from a block", exceeded, schedules, local, calls)
			})
		}
	}
}

// TestPrefetchWindowBlockTakesBackOnlyItsWindowsUnits: a Refund whose
// TakenAt is in an earlier window, which the bare FixedWindow ignores,
// does not go to the block of the window open now, so that the window
// still admits its limit and no more (the brute force found a Prefetch that
// took it into the block, and admitted limit + 1).
func TestPrefetchWindowBlockTakesBackOnlyItsWindowsUnits(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	fw, err := NewFixedWindow(4, 10*time.Millisecond, WithClock(clock))
	require.NoError(t, err)
	l, err := NewPrefetch(fw, PrefetchConfig{HotCalls: 1, MinBlock: 2, MaxShare: 1})
	require.NoError(t, err)

	d, err := l.Decide(ctx, "k", 1) // the backend's: a window opens
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clock.Advance(10 * time.Millisecond) // that window ends
	d, err = l.Decide(ctx, "k", 1)       // a block of 2, in a new window
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, err = l.Refund(ctx, "k", 1, TakenAt(epoch)) // of the first call
	require.NoError(t, err)

	admitted := 1
	for range 6 {
		d, err := l.Decide(ctx, "k", 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 4, admitted, "the window's limit")
}

// TestPrefetchCallersRefundWhileABlockIsHeldExceedsTheBoundByTheUnitsHeld
// replays the schedule docs/leases.md gives (the brute force's, minimised):
// r1 takes a block of 6 at 4 ms, leaving the bucket of 6 empty; at 5 ms a
// caller of r0 refunds 3 units of its call at 0 ms, which the bucket,
// not knowing what r1 holds, takes from 1 to 4; at 6 ms r1 spends 2 from
// its block and r2 takes and spends 5: 7 units in one instant, 1 over the
// bound, which the bare bucket keeps on the same schedule.
func TestPrefetchCallersRefundWhileABlockIsHeldExceedsTheBoundByTheUnitsHeld(t *testing.T) {
	cfg := func(hot, span, minBlock int, grace time.Duration) PrefetchConfig {
		return PrefetchConfig{HotCalls: hot, HotSpan: time.Duration(span) * time.Millisecond, MinBlock: minBlock, MaxShare: 1, GiveBackGrace: grace}
	}
	s := bfSchedule{kind: bfBucket, c: 6,
		cfgs: []PrefetchConfig{cfg(2, 4, 3, 0), cfg(1, 2, 6, time.Millisecond), cfg(2, 4, 4, time.Millisecond)},
		ops: []bfOp{
			{step: 0, op: 'c', r: 0, n: 4},
			{step: 1, op: 'c', r: 2, n: 3},
			{step: 1, op: 'c', r: 1, n: 3},                 // denied: 1 left
			{step: 2, op: 'r', r: 2, n: 3, at: true},       // the bucket goes from 3 to 6
			{step: 0, op: 'c', r: 1, n: 1},                 // r1 takes a block of 6
			{step: 1, op: 'r', r: 0, n: 3, m: 0, at: true}, // the bucket goes from 1 to 4
			{step: 1, op: 'c', r: 1, n: 2},                 // from r1's block
			{step: 0, op: 'c', r: 2, n: 5},                 // r2 takes 5
		},
	}
	ms := int64(time.Millisecond)
	_, _, over, _ := bfOverBucket(bfRun(t, s, false).events, 6, ms)
	assert.Zero(t, over, "the bare bucket")
	a, b, over, _ := bfOverBucket(bfRun(t, s, true).events, 6, ms)
	assert.Equal(t, []int64{6 * ms, 6 * ms, 1}, []int64{a, b, over}, "the fleet: 7 units at 6 ms")
}

// TestPrefetchOverARedisLimiterOnTheCallersClockKeepsTheBound runs the brute
// force's schedules (calls and replicas closing) through Prefetches over a
// RedisTokenBucket and a RedisGCRA built WithCallerClock of the fake
// clock, which is also the Prefetches' Clock, on a miniredis whose TIME
// stays at epoch: the fleet keeps within C + ⌊(b − a)/T⌋.
func TestPrefetchOverARedisLimiterOnTheCallersClockKeepsTheBound(t *testing.T) {
	t.Parallel()
	schedules := sized(5, 25) // a miniredis each: about 40 ms
	for _, kind := range []bfKind{bfBucket, bfGCRA} {
		t.Run(kind.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(kind)+1, 9))
			for i := range schedules {
				s := bfRandomSchedule(rng, kind, 60, false, false)
				s.shared = func(t *testing.T, clock *ratelimittest.Clock, h Hooks) bfReplica {
					_, client, _ := miniredisClock(t)
					var l bfReplica
					var err error
					if kind == bfBucket {
						l, err = NewRedisTokenBucket(client, PerSecond(1000), s.c, WithCallerClock(clock), WithHooks(h), WithoutCoalescing())
					} else {
						l, err = NewRedisGCRA(client, s.c, time.Duration(s.c)*time.Millisecond, WithCallerClock(clock), WithHooks(h), WithoutCoalescing())
					}
					require.NoError(t, err)
					return l
				}
				if v := bfViolation(t, s, false, 0); v != "" {
					t.Fatalf("schedule %d: the bare shared limiter: %s\n%s", i, v, s)
				}
				if v := bfViolation(t, s, true, 0); v != "" {
					t.Fatalf("schedule %d: the prefetch fleet: %s\n%s", i, v, s)
				}
			}
		})
	}
}

// TestPrefetchReadsTakenAtOnTheRedisBackendsCallerClock: over a
// RedisFixedWindow built WithCallerClock(c), a Refund's TakenAt is a time
// of c, which the backend turns into an age on c; the Prefetch reads it on
// c too, so a Refund of a call of an earlier window goes to the backend,
// which ignores it, even when c is a year ahead of the system clock (read
// on the system clock, it was a time to come, and the block took it).
func TestPrefetchReadsTakenAtOnTheRedisBackendsCallerClock(t *testing.T) {
	ctx := context.Background()
	m, client, _ := miniredisClock(t)
	c := ratelimittest.NewClock(time.Now().AddDate(1, 0, 0))
	fw, err := NewRedisFixedWindow(client, 4, 10*time.Millisecond, WithCallerClock(c))
	require.NoError(t, err)
	l, err := NewPrefetch(fw, PrefetchConfig{HotCalls: 1, MinBlock: 2, MaxShare: 1, Clock: c})
	require.NoError(t, err)

	first := c.Now()
	d, err := l.Decide(ctx, "k", 1) // the backend's: a window opens
	require.NoError(t, err)
	require.True(t, d.Allowed)
	c.Advance(10 * time.Millisecond)
	m.FastForward(10 * time.Millisecond) // that window ends
	d, err = l.Decide(ctx, "k", 1)       // a block of 2, in a new window
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, err = l.Refund(ctx, "k", 1, TakenAt(first))
	require.NoError(t, err)

	admitted := 1
	for range 6 {
		d, err := l.Decide(ctx, "k", 1)
		require.NoError(t, err)
		if d.Allowed {
			admitted++
		}
	}
	assert.Equal(t, 4, admitted, "the window's limit")
}
