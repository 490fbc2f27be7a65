package ratelimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Prefetch decorator: several replicas, each a Prefetch over one shared
// limiter, on a fake clock, never admit more than the shared limiter's own
// bound, whatever the schedule, and admit nearly all of it at full load.

// leaseLog is what a fleet test records, in the order it happened: every
// admission a replica answered, and every call and refund the shared
// backend answered (heard through its hooks).
type leaseLog struct {
	mu     sync.Mutex
	clock  *ratelimittest.Clock
	admits []leaseAdmit
	// backend events, for a fixed window's model
	events []leaseEvent
	calls  int // backend calls (decisions)
}

type leaseAdmit struct {
	at int64 // ns since epoch
	n  int64
}

type leaseEvent struct {
	at     int64
	admit  bool   // a replica's admission (n units)
	n      int64  //
	res    Result // the backend's (decision or refund)
	refund bool
}

func (g *leaseLog) now() int64 {
	if g.clock == nil {
		return 0
	}
	return int64(g.clock.Now().Sub(epoch))
}

func (g *leaseLog) Decided(ev Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls++
	if ev.Err == nil && ev.Allowed && ev.Cost > 0 {
		g.events = append(g.events, leaseEvent{at: g.now(), n: int64(ev.Cost), res: ev.Result})
	}
}

func (g *leaseLog) BreakerChanged(BreakerState, BreakerState) {}

func (g *leaseLog) Adjusted(ev AdjustEvent) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ev.Err == nil && ev.Op == AdjustRefund {
		g.events = append(g.events, leaseEvent{at: g.now(), n: int64(ev.Taken), res: ev.Result, refund: true})
	}
}

func (g *leaseLog) admitted(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at := g.now()
	g.admits = append(g.admits, leaseAdmit{at, int64(n)})
	g.events = append(g.events, leaseEvent{at: at, admit: true, n: int64(n)})
}

// overBucket returns the most by which the admissions exceed, in some span
// [a, b], a bucket's bound of capacity + (b-a)/unit units, in units·unit
// ns (0 when never): sum(n)·unit ≤ capacity·unit + (b - a) for every span.
func (g *leaseLog) overBucket(capacity, unit int64) int64 {
	var sum, worst int64
	minStart := int64(1) << 62 // min over i of (units before i)·unit - at_i
	for _, a := range g.admits {
		minStart = min(minStart, sum*unit-a.at)
		sum += a.n
		over := (sum*unit - a.at) - minStart - capacity*unit
		worst = max(worst, over)
	}
	return worst
}

// overWindow checks the admissions against the windows the backend
// opened, as its own answers tell them (a window ends ResetAfter after the
// call that counted in it, and holds limit - Remaining): it returns the
// units admitted beyond limit in any window, and those admitted while no
// window was open.
func (g *leaseLog) overWindow(limit int64) (over, outside int64) {
	var end int64 = -1
	var units int64
	for _, ev := range g.events {
		switch {
		case ev.admit:
			if end < 0 || ev.at >= end {
				outside += ev.n
				continue
			}
			units += ev.n
			over = max(over, units-limit)
		case ev.refund:
			if end >= 0 && ev.at < end && int64(ev.res.Remaining) == limit {
				end = -1 // the window's count fell to 0: it ended
			}
		default:
			e := ev.at + int64(ev.res.ResetAfter)
			if end < 0 || ev.at >= end || e != end {
				end, units = e, 0 // a new window
			}
		}
	}
	return over, outside
}

// leaseShared is a shared limiter of one of the kinds a Prefetch takes,
// with its policy.
type leaseShared struct {
	name     string
	backend  Limiter
	window   bool
	capacity int64
	unit     int64 // ns per unit (bucket), or the window
	clock    *ratelimittest.Clock
	redis    *miniredis.Miniredis
	advance  func(time.Duration)
}

// leaseBackends builds the shared limiters the fleet tests run over, all of
// capacity 100 refilling one unit every 10 ms (GCRA: 100 per second) or
// 100 per second (window), reporting to log; on miniredis too when redis.
func leaseBackends(t *testing.T, log *leaseLog, withRedis bool) []leaseShared {
	t.Helper()
	var out []leaseShared
	mk := func(name string, window bool, build func(clock *ratelimittest.Clock) (Limiter, error)) {
		clock := ratelimittest.NewClock(epoch)
		l, err := build(clock)
		require.NoError(t, err)
		unit := int64(10 * time.Millisecond)
		if window {
			unit = int64(time.Second)
		}
		out = append(out, leaseShared{name: name, backend: l, window: window, capacity: 100, unit: unit, clock: clock, advance: clock.Advance})
	}
	hooks := WithHooks(log)
	mk("TokenBucket", false, func(c *ratelimittest.Clock) (Limiter, error) {
		return NewTokenBucket(PerSecond(100), 100, WithClock(c), hooks)
	})
	mk("GCRA", false, func(c *ratelimittest.Clock) (Limiter, error) { return NewGCRA(100, time.Second, WithClock(c), hooks) })
	mk("FixedWindow", true, func(c *ratelimittest.Clock) (Limiter, error) {
		return NewFixedWindow(100, time.Second, WithClock(c), hooks)
	})
	if !withRedis {
		return out
	}
	mkRedis := func(name string, window bool, build func(*miniredis.Miniredis) (Limiter, error)) {
		m, _, move := miniredisClock(t)
		clock := ratelimittest.NewClock(epoch)
		l, err := build(m)
		require.NoError(t, err)
		unit := int64(10 * time.Millisecond)
		if window {
			unit = int64(time.Second)
		}
		out = append(out, leaseShared{name: name, backend: l, window: window, capacity: 100, unit: unit, clock: clock, redis: m,
			advance: func(d time.Duration) { clock.Advance(d); move(d) }})
	}
	client := func(m *miniredis.Miniredis) *redis.Client { return newTestClient(t, m) }
	mkRedis("RedisTokenBucket", false, func(m *miniredis.Miniredis) (Limiter, error) {
		return NewRedisTokenBucket(client(m), PerSecond(100), 100, hooks)
	})
	mkRedis("RedisGCRA", false, func(m *miniredis.Miniredis) (Limiter, error) {
		return NewRedisGCRA(client(m), 100, time.Second, hooks)
	})
	mkRedis("RedisFixedWindow", true, func(m *miniredis.Miniredis) (Limiter, error) {
		return NewRedisFixedWindow(client(m), 100, time.Second, hooks)
	})
	return out
}

// newPrefetchOver returns a Prefetch over sh, with the fake clock for a
// Redis backend.
func newPrefetchOver(t *testing.T, sh leaseShared, cfg PrefetchConfig) *Prefetch {
	t.Helper()
	if sh.redis != nil {
		cfg.Clock = sh.clock
	}
	l, err := NewPrefetch(sh.backend, cfg)
	require.NoError(t, err)
	return l
}

// leaseCheck asserts that log's admissions keep within sh's bound.
func leaseCheck(t *testing.T, sh leaseShared, log *leaseLog) {
	t.Helper()
	if sh.window {
		over, outside := log.overWindow(sh.capacity)
		assert.Equal(t, int64(0), over, "%s: units admitted beyond a window's limit", sh.name)
		assert.Equal(t, int64(0), outside, "%s: units admitted outside any window", sh.name)
		return
	}
	assert.Equal(t, int64(0), log.overBucket(sh.capacity, sh.unit), "%s: admissions beyond capacity + rate·span (in unit·ns)", sh.name)
}

// TestPrefetchFleetNeverExceedsSharedBound runs random schedules of calls
// of random costs, bursts and pauses on several replicas, some of which
// close (giving back) and are replaced, and checks every span.
func TestPrefetchFleetNeverExceedsSharedBound(t *testing.T) {
	t.Parallel()
	for _, withRedis := range []bool{false, true} {
		probe := &leaseLog{}
		for i := range leaseBackends(t, probe, withRedis) {
			seeds := uint64(sized(1, 3))
			for seed := uint64(1); seed <= seeds; seed++ {
				log := &leaseLog{}
				sh := leaseBackends(t, log, withRedis)[i]
				log.clock = sh.clock
				if sh.redis == nil && seed > 1 && withRedis {
					continue // the in-process ones ran already
				}
				rng := rand.New(rand.NewPCG(seed, 7))
				cfg := PrefetchConfig{HotCalls: 2, HotSpan: time.Second, MinBlock: 4, MaxShare: 4}
				replicas := make([]*Prefetch, 4)
				for r := range replicas {
					replicas[r] = newPrefetchOver(t, sh, cfg)
				}
				ctx := context.Background()
				steps := sized(1500, 6000)
				if sh.redis != nil {
					steps = sized(500, 2000)
				}
				// Phases of random length, each with its own total rate
				// and its own share per replica, so that some replicas
				// hold blocks they spend slowly while others drain the
				// key, then pauses in which keys cool.
				var weights []int
				var gap, phaseLeft time.Duration
				for range steps {
					if phaseLeft <= 0 {
						phaseLeft = time.Duration(200+rng.IntN(2800)) * time.Millisecond
						rate := []int{10, 30, 60, 150, 600}[rng.IntN(5)]
						gap = time.Second / time.Duration(rate)
						weights = weights[:0]
						for range replicas {
							weights = append(weights, []int{0, 1, 4, 20}[rng.IntN(4)])
						}
						weights[rng.IntN(len(weights))]++
						switch rng.IntN(4) {
						case 0:
							sh.advance(time.Duration(100+rng.IntN(400)) * time.Millisecond) // a pause: keys cool
						case 1:
							r := rng.IntN(len(replicas))
							require.NoError(t, replicas[r].Close(ctx))
							replicas[r] = newPrefetchOver(t, sh, cfg)
						}
					}
					d := time.Duration(rng.Int64N(int64(2 * gap)))
					if sh.redis != nil {
						d = d.Truncate(time.Millisecond)
					}
					sh.advance(d)
					phaseLeft -= max(d, time.Millisecond)
					total := 0
					for _, w := range weights {
						total += w
					}
					pick := rng.IntN(total)
					r := 0
					for pick >= weights[r] {
						pick -= weights[r]
						r++
					}
					n := 1 + rng.IntN(3)
					res, err := replicas[r].Allow(ctx, "k", n)
					require.NoError(t, err)
					if res.Allowed {
						log.admitted(n)
					}
				}
				leaseCheck(t, sh, log)
				assert.NotEmpty(t, log.admits, sh.name)
				t.Logf("%s seed %d: %d calls, %d backend calls, %d admitted", sh.name, seed, steps, log.calls, len(log.admits))
			}
		}
	}
}

// TestPrefetchDecidesHotKeyWithoutBackend checks that a hot key's calls are
// answered from blocks: far fewer backend calls than decisions, with the
// Decision of a block spend telling the policy's Limit, Source
// FromBackend, and Remaining what the block has left.
func TestPrefetchDecidesHotKeyWithoutBackend(t *testing.T) {
	log := &leaseLog{}
	clock := ratelimittest.NewClock(epoch)
	log.clock = clock
	tb, err := NewTokenBucket(PerSecond(1000), 1_000_000, WithClock(clock), WithHooks(log))
	require.NoError(t, err)
	hooks := &recordingHooks{}
	l, err := NewPrefetch(tb, PrefetchConfig{Hooks: hooks, Name: "lease"})
	require.NoError(t, err)
	ctx := context.Background()
	for range 10_000 {
		d, err := l.Decide(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		assert.Equal(t, 1_000_000, d.Limit)
		assert.Equal(t, FromBackend, d.Source)
		clock.Advance(10 * time.Microsecond)
	}
	assert.Less(t, log.calls, 100, "backend calls for 10,000 decisions")
	assert.Len(t, hooks.events, 10_000, "one event per decision")
	assert.Equal(t, "lease", hooks.events[0].Limiter)
	last := hooks.events[len(hooks.events)-1]
	assert.GreaterOrEqual(t, last.Remaining, 0)
	assert.Less(t, last.Remaining, 1_000_000/16)
}

// TestPrefetchRefusesBackendsItCannotFollow checks the configuration errors.
func TestPrefetchRefusesBackendsItCannotFollow(t *testing.T) {
	tb, err := NewTokenBucket(PerSecond(1), 10)
	require.NoError(t, err)
	dc, err := NewDenyCache(tb, DenyCacheConfig{})
	require.NoError(t, err)
	sl, err := NewSlidingLog(10, time.Second)
	require.NoError(t, err)
	cc, err := NewConcurrency(10, time.Second)
	require.NoError(t, err)
	comp, err := NewComposite(Part{Name: "a", Limiter: tb})
	require.NoError(t, err)
	for name, backend := range map[string]Limiter{"DenyCache": dc, "SlidingLog": sl, "Concurrency": cc, "Composite": comp, "zero TokenBucket": &TokenBucket{}, "nil": nil} {
		_, err := NewPrefetch(backend, PrefetchConfig{})
		require.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	_, err = NewPrefetch(tb, PrefetchConfig{Clock: ratelimittest.NewClock(epoch)})
	require.ErrorIs(t, err, ErrInvalidConfig, "a Clock with an in-process backend")
	_, err = NewPrefetch(tb, PrefetchConfig{MaxShare: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	var zero *Prefetch
	_, err = zero.Allow(context.Background(), "k", 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// TestPrefetchDeadReplicaUnitsComeBack checks that a replica that stops
// holding a block (it dies: no Close, no more calls) keeps nothing from
// the others once the block's life has passed: they then admit the
// bucket's whole capacity at once, and the window's limit in a new window.
func TestPrefetchDeadReplicaUnitsComeBack(t *testing.T) {
	t.Parallel()
	for _, sh := range leaseBackends(t, &leaseLog{}, true) {
		log := &leaseLog{clock: sh.clock}
		sh.backend = rehook(t, sh, log)
		cfg := PrefetchConfig{HotCalls: 2, MinBlock: 25, MaxShare: 4}
		dead, other := newPrefetchOver(t, sh, cfg), newPrefetchOver(t, sh, cfg)
		ctx := context.Background()
		for range 4 {
			res, err := dead.Allow(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, res.Allowed)
			log.admitted(1)
		}
		// dead now holds a block of 25 (less what it spent), and dies.
		// The other drains the key, and after a block's life (25 units'
		// refill, or the window's end) gets everything back.
		if sh.window {
			sh.advance(time.Second)
		} else {
			sh.advance(time.Duration(sh.capacity * sh.unit)) // full again
		}
		got := 0
		for range 300 {
			res, err := other.Allow(ctx, "k", 1)
			require.NoError(t, err)
			if res.Allowed {
				got++
				log.admitted(1)
			}
		}
		assert.Equal(t, int(sh.capacity), got, "%s: units the other admits at once", sh.name)
		leaseCheck(t, sh, log)
	}
}

// rehook rebuilds sh's backend reporting to log.
func rehook(t *testing.T, sh leaseShared, log *leaseLog) Limiter {
	t.Helper()
	var l Limiter
	var err error
	switch sh.backend.(type) {
	case *TokenBucket:
		l, err = NewTokenBucket(PerSecond(100), 100, WithClock(sh.clock), WithHooks(log))
	case *GCRA:
		l, err = NewGCRA(100, time.Second, WithClock(sh.clock), WithHooks(log))
	case *FixedWindow:
		l, err = NewFixedWindow(100, time.Second, WithClock(sh.clock), WithHooks(log))
	case *RedisTokenBucket:
		l, err = NewRedisTokenBucket(newTestClient(t, sh.redis), PerSecond(100), 100, WithHooks(log))
	case *RedisGCRA:
		l, err = NewRedisGCRA(newTestClient(t, sh.redis), 100, time.Second, WithHooks(log))
	case *RedisFixedWindow:
		l, err = NewRedisFixedWindow(newTestClient(t, sh.redis), 100, time.Second, WithHooks(log))
	}
	require.NoError(t, err)
	return l
}

// TestPrefetchFullLoadUnderAdmitsLittle offers twice the limit's rate,
// spread over 2 and over 10 replicas, for 100 s of fake time (200 s under
// -soak), and checks that the fleet admits at least 95% of what the shared
// limiter allows in that time (its capacity plus its rate times the span),
// and never more.
func TestPrefetchFullLoadUnderAdmitsLittle(t *testing.T) {
	t.Parallel()
	for _, replicas := range []int{2, 10} {
		for _, sh := range leaseBackends(t, &leaseLog{}, false) {
			log := &leaseLog{clock: sh.clock}
			sh.backend = rehook(t, sh, log)
			fleet := make([]*Prefetch, replicas)
			for i := range fleet {
				fleet[i] = newPrefetchOver(t, sh, PrefetchConfig{})
			}
			rng := rand.New(rand.NewPCG(uint64(replicas), 3))
			ctx := context.Background()
			span := time.Duration(sized(100, 200)) * time.Second
			// 200 calls per second offered against 100 allowed, at
			// random moments.
			var elapsed time.Duration
			var admitted int64
			for elapsed < span {
				gap := time.Duration(rng.IntN(int(10*time.Millisecond))) + time.Microsecond
				sh.advance(gap)
				elapsed += gap
				res, err := fleet[rng.IntN(replicas)].Allow(ctx, "k", 1)
				require.NoError(t, err)
				if res.Allowed {
					admitted++
					log.admitted(1)
				}
			}
			var allowance int64
			if sh.window {
				allowance = sh.capacity * int64(span/time.Second)
			} else {
				allowance = sh.capacity + int64(elapsed)/sh.unit
			}
			short := allowance - admitted
			t.Logf("%s, %d replicas: admitted %d of %d (%.2f%% short), %d backend calls", sh.name, replicas, admitted, allowance, 100*float64(short)/float64(allowance), log.calls)
			assert.LessOrEqual(t, short*100, allowance*5, "%s, %d replicas: under-admission", sh.name, replicas)
			leaseCheck(t, sh, log)
		}
	}
}

// TestPrefetchGuardAnswersWhenRedisFailsWhileBlocksAreHeld checks the
// stack Guard(Prefetch(redis)) when Redis fails (an injected error on
// every command): the held block keeps answering until it decays, then
// the take's error reaches the Guard, which fails closed, or over to its
// fallback, as configured; once Redis is back, the Prefetch decides again.
func TestPrefetchGuardAnswersWhenRedisFailsWhileBlocksAreHeld(t *testing.T) {
	for _, policy := range []FailurePolicy{FailClosed, FailOver} {
		m, client, move := miniredisClock(t)
		clock := ratelimittest.NewClock(epoch)
		rb, err := NewRedisTokenBucket(client, PerSecond(100), 1000)
		require.NoError(t, err)
		l, err := NewPrefetch(rb, PrefetchConfig{HotCalls: 2, MinBlock: 50, Clock: clock})
		require.NoError(t, err)
		cfg := GuardConfig{OnFailure: policy, Clock: clock}
		want := FromFailClosed
		if policy == FailOver {
			fb, err := NewTokenBucket(PerSecond(1), 10, WithClock(clock))
			require.NoError(t, err)
			cfg.Fallback, want = fb, FromFallback
		}
		g, err := NewGuard(l, cfg)
		require.NoError(t, err)
		ctx := context.Background()
		for range 3 {
			d, err := g.Decide(ctx, "k", 1)
			require.NoError(t, err)
			require.Equal(t, FromBackend, d.Source)
		}
		m.SetError("LOADING injected")
		// The block (50 units, 10 ms each) holds 48 more, decaying: spend 10.
		for range 10 {
			d, err := g.Decide(ctx, "k", 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "a held block answers while Redis fails")
			assert.Equal(t, FromBackend, d.Source)
		}
		clock.Advance(time.Second) // the block has decayed
		move(time.Second)
		d, err := g.Decide(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, want, d.Source, "the take's error reached the Guard")
		assert.Equal(t, policy == FailOver, d.Allowed)
		m.SetError("")
		d, err = g.Decide(ctx, "k", 1)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "Redis is back")
		assert.Equal(t, FromBackend, d.Source)
	}
}

// TestPrefetchRefundAndSettleGoToTheBlock checks the adjustments: a refund
// of units spent from a live block makes them spendable again without a
// backend call; one without a block goes to the backend.
func TestPrefetchRefundAndSettleGoToTheBlock(t *testing.T) {
	log := &leaseLog{}
	clock := ratelimittest.NewClock(epoch)
	log.clock = clock
	tb, err := NewTokenBucket(PerSecond(10), 1000, WithClock(clock), WithHooks(log))
	require.NoError(t, err)
	l, err := NewPrefetch(tb, PrefetchConfig{HotCalls: 1, MinBlock: 20})
	require.NoError(t, err)
	ctx := context.Background()
	d, err := l.Decide(ctx, "k", 1) // learns the policy: direct
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = l.Decide(ctx, "k", 5) // takes a block of 20, spends 5
	require.NoError(t, err)
	assert.Equal(t, 15, d.Remaining)
	calls := log.calls
	res, err := l.Refund(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, 20, res.Remaining, "the block can spend them again")
	res, err = l.Settle(ctx, "k", 2, 7)
	require.NoError(t, err)
	assert.Equal(t, 15, res.Remaining, "the extra 5 spent from the block")
	assert.Equal(t, calls, log.calls, "no backend call")
	res, err = l.Refund(ctx, "other", 1)
	require.NoError(t, err)
	assert.Equal(t, 1000, res.Remaining, "the backend's answer for a key without a block")
	require.NoError(t, l.Reset(ctx, "k"))
	require.NoError(t, l.Close(ctx))
	d, err = l.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, 999, d.Remaining, "after Close, the backend answers")
}

// TestPrefetchCloseGivesBackTheRemainder checks that Close gives the
// undecayed remainder of a block back to the shared key.
func TestPrefetchCloseGivesBackTheRemainder(t *testing.T) {
	for _, sh := range leaseBackends(t, &leaseLog{}, true) {
		l := newPrefetchOver(t, sh, PrefetchConfig{HotCalls: 1, MinBlock: 20, MaxShare: 4})
		ctx := context.Background()
		for range 2 {
			res, err := l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, res.Allowed)
		}
		require.NoError(t, l.Close(ctx))
		d, err := decideAny(ctx, sh.backend, "k", 0)
		require.NoError(t, err)
		// The first call learns the policy on the backend, the second
		// takes a block of 20 and spends 1: the 19 left come back, less
		// those that decay within the give-back's 50 ms grace (5 of a
		// bucket's, the first of them the one spent).
		want := 98
		if !sh.window {
			want = 94
		}
		assert.Equal(t, want, d.Remaining, sh.name)
	}
}

// TestPrefetchConcurrentCallersOnOneHotKey runs goroutines on one hot key
// of an in-process bucket on the system clock (under -race in CI): the
// admissions stay within capacity + rate × the time the run took.
func TestPrefetchConcurrentCallersOnOneHotKey(t *testing.T) {
	tb, err := NewTokenBucket(PerSecond(100_000), 10_000)
	require.NoError(t, err)
	l, err := NewPrefetch(tb, PrefetchConfig{HotSpan: 10 * time.Millisecond})
	require.NoError(t, err)
	ctx := context.Background()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := 0
			for i := range 20_000 {
				res, err := l.Allow(ctx, "k", 1+i%2)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					mine += 1 + i%2
				}
				if i%5000 == 0 {
					_, _ = l.Refund(ctx, "k", 1)
					mine--
				}
			}
			mu.Lock()
			admitted += mine
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	bound := 10_000 + int(elapsed.Seconds()*100_000) + 1
	assert.LessOrEqual(t, admitted, bound)
	assert.Positive(t, admitted)
	require.NoError(t, l.Close(ctx))
	require.False(t, errors.Is(l.Close(ctx), ErrBackend))
}

// newTestClient returns a client to m, closed when the test ends.
func newTestClient(t *testing.T, m *miniredis.Miniredis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestPrefetchHeldBlockCannotOutliveTheRefill holds a block on one replica
// while the key refills and another replica drains it: the held units
// must have decayed (token bucket, GCRA) or expired with their window
// (fixed window) by then, so the span bound holds.
func TestPrefetchHeldBlockCannotOutliveTheRefill(t *testing.T) {
	t.Parallel()
	for _, sh := range leaseBackends(t, &leaseLog{}, true) {
		log := &leaseLog{clock: sh.clock}
		sh.backend = rehook(t, sh, log)
		cfg := PrefetchConfig{HotCalls: 1, HotSpan: time.Hour, MinBlock: 25, MaxShare: 4}
		holder, drainer := newPrefetchOver(t, sh, cfg), newPrefetchOver(t, sh, cfg)
		ctx := context.Background()
		spend := func(l *Prefetch, calls int) int {
			got := 0
			for range calls {
				res, err := l.Allow(ctx, "k", 1)
				require.NoError(t, err)
				if res.Allowed {
					got++
					log.admitted(1)
				}
			}
			return got
		}
		require.Equal(t, 2, spend(holder, 2)) // learns, then takes a block of 25
		// A bucket refills 15 units in 150 ms, while the block loses 15
		// to decay; a window ends after 1 s, and the block with it.
		if sh.window {
			sh.advance(time.Second)
		} else {
			sh.advance(150 * time.Millisecond)
		}
		drained := spend(drainer, 200)
		held := spend(holder, 30)
		assert.LessOrEqual(t, drained+held, int(sh.capacity), "%s: units admitted at once after the refill", sh.name)
		leaseCheck(t, sh, log)
	}
}

// TestPrefetchFollowsEachKeysPolicy runs a fleet over a GCRA built
// WithPolicyFunc, whose keys have different limits and periods: each
// key's admissions keep within its own policy's bound, and the blocks are
// sized by it.
func TestPrefetchFollowsEachKeysPolicy(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	policies := map[string]Policy{
		"big":   {Limit: 200, Window: time.Second},    // a unit every 5 ms
		"small": {Limit: 40, Window: 2 * time.Second}, // a unit every 50 ms
	}
	g, err := NewGCRA(10, time.Second, WithClock(clock), WithPolicyFunc(func(_ context.Context, key string) (Policy, error) {
		return policies[key], nil
	}))
	require.NoError(t, err)
	replicas := make([]*Prefetch, 3)
	for i := range replicas {
		replicas[i], err = NewPrefetch(g, PrefetchConfig{HotCalls: 2, MinBlock: 4, MaxShare: 4})
		require.NoError(t, err)
	}
	logs := map[string]*leaseLog{"big": {clock: clock}, "small": {clock: clock}}
	rng := rand.New(rand.NewPCG(5, 5))
	ctx := context.Background()
	for range 6000 {
		clock.Advance(time.Duration(rng.IntN(3000)) * time.Microsecond)
		key := "big"
		if rng.IntN(3) == 0 {
			key = "small"
		}
		n := 1 + rng.IntN(2)
		d, err := replicas[rng.IntN(len(replicas))].Decide(ctx, key, n)
		require.NoError(t, err)
		assert.Equal(t, policies[key].Limit, d.Limit, key)
		if d.Allowed {
			logs[key].admitted(n)
		}
	}
	for key, p := range policies {
		unit := int64(p.Window) / int64(p.Limit)
		assert.Equal(t, int64(0), logs[key].overBucket(int64(p.Limit), unit), key)
		assert.NotEmpty(t, logs[key].admits, key)
	}
}
