package ratelimit

import (
	"context"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The in-process limiters are Adjusters.
var (
	_ Adjuster = (*TokenBucket)(nil)
	_ Adjuster = (*GCRA)(nil)
	_ Adjuster = (*FixedWindow)(nil)
	_ Adjuster = (*Composite)(nil)
)

// scheduleAdjuster is a TokenBucket or GCRA under test, with its engine.
type scheduleAdjuster struct {
	name string
	new  func(t *testing.T, limit int, interval time.Duration, clock Clock, opts ...Option) (Adjuster, *schedule)
}

// scheduleAdjusters make a TokenBucket and a GCRA of limit tokens, one every
// interval, with opts.
var scheduleAdjusters = []scheduleAdjuster{
	{"TokenBucket", func(t *testing.T, limit int, interval time.Duration, clock Clock, opts ...Option) (Adjuster, *schedule) {
		b, err := NewTokenBucket(Every(interval), limit, append(opts, WithClock(clock))...)
		require.NoError(t, err)
		require.Equal(t, int64(interval), b.interval)
		return b, (*schedule)(b)
	}},
	{"GCRA", func(t *testing.T, limit int, interval time.Duration, clock Clock, opts ...Option) (Adjuster, *schedule) {
		g, err := NewGCRA(limit, time.Duration(limit)*interval, append(opts, WithClock(clock))...)
		require.NoError(t, err)
		require.Equal(t, int64(interval), g.interval)
		return g, (*schedule)(g)
	}},
}

// adjustStep is one call in an adjustment scenario: move the clock by
// advance, then call do and expect want.
type adjustStep struct {
	advance time.Duration
	do      func(ctx context.Context, a Adjuster) (Result, error)
	want    Result
}

// allowStep, refundStep, settleStep and resetStep make the steps of the
// calls they name.
func allowStep(advance time.Duration, key string, n int, want Result) adjustStep {
	return adjustStep{advance, func(ctx context.Context, a Adjuster) (Result, error) { return a.Allow(ctx, key, n) }, want}
}

func refundStep(advance time.Duration, key string, n int, want Result, opts ...AdjustOption) adjustStep {
	return adjustStep{advance, func(ctx context.Context, a Adjuster) (Result, error) { return a.Refund(ctx, key, n, opts...) }, want}
}

func settleStep(advance time.Duration, key string, taken, cost int, want Result, opts ...AdjustOption) adjustStep {
	return adjustStep{advance, func(ctx context.Context, a Adjuster) (Result, error) { return a.Settle(ctx, key, taken, cost, opts...) }, want}
}

func resetStep(advance time.Duration, key string) adjustStep {
	return adjustStep{advance, func(ctx context.Context, a Adjuster) (Result, error) { return Result{}, a.Reset(ctx, key) }, Result{}}
}

// runAdjustSteps runs steps on a, moving clock.
func runAdjustSteps(t *testing.T, a Adjuster, clock *ratelimittest.Clock, steps []adjustStep) {
	t.Helper()
	for i, st := range steps {
		clock.Advance(st.advance)
		got, err := st.do(context.Background(), a)
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, st.want, got, "step %d", i)
	}
}

func TestScheduleRefundSettleAndReset(t *testing.T) {
	const q = 250 * ms // 4 tokens, one every 250 ms: full in 1 s
	for _, sa := range scheduleAdjusters {
		t.Run(sa.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			// Debts of more than the limit: without a bound (see
			// TestDebtCap for the bounds).
			a, s := sa.new(t, 4, q, clock, WithMaxDebt(UnboundedDebt))
			runAdjustSteps(t, a, clock, []adjustStep{
				allowStep(0, "k", 3, ok(4, 1, 3*q)),
				refundStep(0, "k", 2, ok(4, 3, q)),
				// A refund never fills above the limit: the key is full,
				// and forgotten.
				refundStep(0, "k", 4, ok(4, 4, 0)),
				refundStep(0, "k", 4, ok(4, 4, 0)),
			})
			assert.Equal(t, 0, s.tats.len(), "a full key is not held")

			runAdjustSteps(t, a, clock, []adjustStep{
				allowStep(0, "k", 1, ok(4, 3, q)),
				// A true cost of 10 for 1 taken: 9 more, 6 in debt.
				settleStep(0, "k", 1, 10, ok(4, 0, 10*q)),
				allowStep(0, "k", 1, no(4, 0, 7*q, 10*q)),
				allowStep(0, "k", 0, ok(4, 0, 10*q)),
				allowStep(7*q-1, "k", 1, no(4, 0, 1, 3*q+1)),
				allowStep(0, "k", 0, ok(4, 0, 3*q+1)),
				allowStep(1, "k", 1, ok(4, 0, 4*q)),
				// Taken equals cost: nothing changes.
				settleStep(q/2, "k", 3, 3, ok(4, 0, 3*q+q/2)),
				// A cost below what was taken gives the difference back.
				settleStep(0, "k", 3, 1, ok(4, 2, q+q/2)),
			})
			require.NoError(t, a.Reset(context.Background(), "k"))
			assert.Equal(t, 0, s.tats.len())
			runAdjustSteps(t, a, clock, []adjustStep{
				allowStep(0, "k", 0, ok(4, 4, 0)),
				// Reset on a full or absent key does nothing.
				resetStep(0, "k"),
				resetStep(0, "never"),
				allowStep(0, "k", 4, ok(4, 0, 4*q)),
				// Settling into debt from a full key.
				settleStep(0, "other", 0, 6, ok(4, 0, 6*q)),
				allowStep(0, "other", 1, no(4, 0, 3*q, 6*q)),
				refundStep(0, "other", 3, ok(4, 1, 3*q)),
			})
		})
	}
}

func TestScheduleAdjustmentsCountTheClockLag(t *testing.T) {
	for _, sa := range scheduleAdjusters {
		t.Run(sa.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			a, _ := sa.new(t, 4, 250*ms, clock)
			runAdjustSteps(t, a, clock, []adjustStep{
				allowStep(0, "k", 4, ok(4, 0, time.Second)),
				// Time stands still for the key while the clock is behind,
				// and every wait counts the catching up.
				refundStep(-time.Hour, "k", 1, ok(4, 1, time.Hour+750*ms)),
				settleStep(0, "k", 0, 3, ok(4, 0, time.Hour+1500*ms)),
				allowStep(0, "k", 1, no(4, 0, time.Hour+750*ms, time.Hour+1500*ms)),
				// Back to full: nothing to wait for.
				refundStep(0, "k", 4, ok(4, 2, time.Hour+500*ms)),
				refundStep(0, "k", 4, ok(4, 4, 0)),
			})
		})
	}
}

func TestScheduleDebtSaturates(t *testing.T) {
	for _, sa := range scheduleAdjusters {
		t.Run(sa.name, func(t *testing.T) {
			ctx := context.Background()
			clock := ratelimittest.NewClock(epoch)
			a, s := sa.new(t, 4, time.Second, clock, WithMaxDebt(UnboundedDebt), WithMaxSettle(UnboundedSettle))
			res, err := a.Settle(ctx, "k", 0, maxSettleCost)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 0, time.Duration(maxSpan)), res, "at most maxSpan ahead")
			res, err = a.Settle(ctx, "k", 4, maxSettleCost)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 0, time.Duration(maxSpan)), res)
			res, err = a.Allow(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, no(4, 0, time.Duration(maxSpan-3*s.interval), time.Duration(maxSpan)), res)
			res, err = a.Refund(ctx, "k", 4)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 0, time.Duration(maxSpan-4*s.interval)), res)

			// Near the end of what a clock reading can hold, a debt stops
			// short of overflowing, and decisions stay sane.
			clock.Set(epoch.Add(time.Duration(math.MaxInt64 - int64(time.Hour))))
			// The debt ends where taking the whole limit on top of it
			// reaches the largest reading: an hour, less the fill time.
			res, err = a.Settle(ctx, "late", 0, maxSettleCost)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 0, time.Hour-4*time.Second), res)
			res, err = a.Allow(ctx, "late", 4)
			require.NoError(t, err)
			assert.Equal(t, no(4, 0, time.Hour-4*time.Second, time.Hour-4*time.Second), res)
		})
	}
}

// TestAScheduleKeyInDebtOutlivesItsGenerations checks that a key whose debt
// lasts many fill times is kept by the key table as its generations turn,
// and forgotten once paid.
func TestAScheduleKeyInDebtOutlivesItsGenerations(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	b, err := NewTokenBucket(PerSecond(100), 2, WithClock(clock), WithMaxDebt(UnboundedDebt), WithMaxSettle(UnboundedSettle)) // 10 ms a token, full in 20 ms
	require.NoError(t, err)
	_, err = b.Settle(ctx, "debtor", 0, 100) // 1 s of debt: 50 fill times
	require.NoError(t, err)
	left := time.Second
	for i := 0; left > 0; i++ {
		// Other keys on every shard, and every shard moved, so that
		// generations turn everywhere.
		for j := range 50 {
			_, err := b.Allow(ctx, strconv.Itoa(i*50+j), 1)
			require.NoError(t, err)
		}
		for k := range b.tats.shards {
			sh := &b.tats.shards[k]
			sh.mu.Lock()
			b.tats.advance(sh, int64(clock.Now().Sub(epoch)), b.maxNow)
			sh.mu.Unlock()
		}
		res, err := b.Allow(ctx, "debtor", 0)
		require.NoError(t, err)
		remaining := int(max(20*ms-left, 0) / (10 * ms))
		require.Equal(t, ok(2, remaining, left), res, "after %v", time.Second-left)
		clock.Advance(7 * ms)
		left -= 7 * ms
	}
	clock.Advance(time.Second)
	for k := range b.tats.shards {
		sh := &b.tats.shards[k]
		sh.mu.Lock()
		b.tats.advance(sh, int64(clock.Now().Sub(epoch)), b.maxNow)
		b.tats.advance(sh, int64(clock.Now().Sub(epoch))+int64(time.Second), b.maxNow)
		sh.mu.Unlock()
	}
	assert.Equal(t, 0, b.tats.len(), "every debt paid, every key full")
}

func TestKeyTableKeepsStatesThatOutliveTheirSpan(t *testing.T) {
	const span = int64(time.Second)
	table := newKeyTable[int64](span).outliving(func(e int64) int64 { return e })
	write := func(key string, now, expiry int64) {
		sh, shardNow := table.lock(key, now, maxSpan)
		require.Equal(t, now, shardNow)
		_, w := sh.lookup(key)
		sh.write(key, w, expiry, expiry)
		sh.mu.Unlock()
	}
	find := func(key string, now int64) (int64, bool) {
		sh, _ := table.lock(key, now, maxSpan)
		defer sh.mu.Unlock()
		state, w := sh.lookup(key)
		return state, w != absent
	}
	write("long", 0, 10*span)
	write("short", 0, span)
	for now := span / 2; now < 10*span; now += span / 2 {
		state, found := find("long", now)
		require.True(t, found, "at %d", now)
		assert.Equal(t, 10*span, state)
		if now > 3*span {
			_, found := find("short", now)
			assert.False(t, found, "short at %d", now)
		}
	}
	// Once expired, it goes with its generation, as any other state.
	for now := 10 * span; now < 14*span; now += span / 2 {
		find("long", now)
	}
	assert.Equal(t, 0, table.len())
}

func TestAdjustmentErrorsChangeNothing(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	tb, err := NewTokenBucket(PerSecond(4), 4, WithClock(clock))
	require.NoError(t, err)
	gcra, err := NewGCRA(4, time.Second, WithClock(clock))
	require.NoError(t, err)
	window, err := NewFixedWindow(4, time.Second, WithClock(clock))
	require.NoError(t, err)
	longToken := strings.Repeat("t", maxTokenLen+1)
	for _, a := range []Adjuster{tb, gcra, window} {
		_, err := a.Allow(ctx, "k", 2)
		require.NoError(t, err)
		before, err := a.Allow(ctx, "k", 0)
		require.NoError(t, err)
		for _, c := range []struct {
			name  string
			do    func() (Result, error)
			isErr error
		}{
			{"negative taken", func() (Result, error) { return a.Settle(ctx, "k", -1, 0) }, ErrInvalidCost},
			{"negative cost", func() (Result, error) { return a.Settle(ctx, "k", 0, -1) }, ErrInvalidCost},
			{"cost above 2^52", func() (Result, error) { return a.Settle(ctx, "k", 0, maxSettleCost+1) }, ErrInvalidCost},
			{"taken above the limit", func() (Result, error) { return a.Settle(ctx, "k", 5, 0) }, ErrCostExceedsLimit},
			{"negative refund", func() (Result, error) { return a.Refund(ctx, "k", -1) }, ErrInvalidCost},
			{"refund above the limit", func() (Result, error) { return a.Refund(ctx, "k", 5) }, ErrCostExceedsLimit},
			{"nil option", func() (Result, error) { return a.Refund(ctx, "k", 1, nil) }, nil},
			{"empty token", func() (Result, error) { return a.Settle(ctx, "k", 1, 0, WithToken("")) }, nil},
			{"long token", func() (Result, error) { return a.Settle(ctx, "k", 1, 0, WithToken(longToken)) }, nil},
		} {
			res, err := c.do()
			require.Error(t, err, "%T: %s", a, c.name)
			if c.isErr != nil {
				assert.ErrorIs(t, err, c.isErr, "%T: %s", a, c.name)
			}
			assert.Equal(t, Result{Limit: 4}, res, "%T: %s", a, c.name)
			after, err := a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, before, after, "%T: %s changed the key", a, c.name)
		}
		// A valid token is accepted and otherwise ignored in process.
		res, err := a.Refund(ctx, "k", 2, WithToken("req-1"), TakenAt(clock.Now()))
		require.NoError(t, err)
		assert.Equal(t, ok(4, 4, 0), res, "%T", a)
	}
}

func TestFixedWindowRefundSettleAndReset(t *testing.T) {
	const w = 10 * time.Second
	clock := ratelimittest.NewClock(epoch)
	fw, err := NewFixedWindow(3, w, WithClock(clock), WithMaxDebt(UnboundedDebt), WithMaxSettle(UnboundedSettle))
	require.NoError(t, err)
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	runAdjustSteps(t, fw, clock, []adjustStep{
		allowStep(0, "k", 2, ok(3, 1, w)),
		refundStep(time.Second, "k", 1, ok(3, 2, w-time.Second)),
		// Taken before the window opened: not its units.
		refundStep(0, "k", 1, ok(3, 2, w-time.Second), TakenAt(at(-time.Nanosecond))),
		// Taken as it opened: given back; at 0 the window ends.
		refundStep(0, "k", 1, ok(3, 3, 0), TakenAt(at(0))),
	})
	assert.Equal(t, 0, fw.windows.len(), "an ended window is not held")

	runAdjustSteps(t, fw, clock, []adjustStep{
		// No window open: a refund changes nothing and creates nothing.
		refundStep(0, "k", 2, ok(3, 3, 0)),
		allowStep(0, "k", 3, ok(3, 0, w)), // window [1 s, 11 s)
		// 4 more than taken: counted past the limit, until the window ends.
		settleStep(time.Second, "k", 1, 5, ok(3, 0, w-time.Second)),
		allowStep(0, "k", 1, no(3, 0, w-time.Second, w-time.Second)),
		allowStep(0, "k", 0, ok(3, 0, w-time.Second)),
		refundStep(0, "k", 3, ok(3, 0, w-time.Second)), // 4 counted of 3
		refundStep(0, "k", 2, ok(3, 1, w-time.Second)),
		allowStep(0, "k", 1, ok(3, 0, w-time.Second)),
		// The window ends with its debt.
		settleStep(0, "k", 0, 100, ok(3, 0, w-time.Second)),
		allowStep(w-time.Second-1, "k", 1, no(3, 0, 1, 1)),
		allowStep(1, "k", 1, ok(3, 2, w)), // window [11 s, 21 s)
		// Units taken in the earlier window are not given to this one.
		refundStep(time.Second, "k", 1, ok(3, 2, w-time.Second), TakenAt(at(5*time.Second))),
		refundStep(0, "k", 1, ok(3, 3, 0), TakenAt(at(11*time.Second))),
		// A settle with no window open opens one.
		settleStep(0, "k", 0, 2, ok(3, 1, w)),
		settleStep(0, "k", 2, 2, ok(3, 1, w)),
		resetStep(0, "k"),
		allowStep(0, "k", 0, ok(3, 3, 0)),
		resetStep(0, "k"),
	})
	assert.Equal(t, 0, fw.windows.len())

	// A window that has ended, though still held, is closed: a settle
	// opens a new one, a refund changes nothing.
	runAdjustSteps(t, fw, clock, []adjustStep{
		allowStep(0, "a", 1, ok(3, 2, w)),
		allowStep(0, "b", 1, ok(3, 2, w)),
		settleStep(w, "a", 0, 1, ok(3, 2, w)),
		refundStep(0, "b", 1, ok(3, 3, 0)),
	})
}

func TestFixedWindowAdjustmentsCountTheClockLag(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	fw, err := NewFixedWindow(3, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	runAdjustSteps(t, fw, clock, []adjustStep{
		allowStep(0, "k", 2, ok(3, 1, 10*time.Second)),
		refundStep(-time.Hour, "k", 1, ok(3, 2, time.Hour+10*time.Second)),
		settleStep(0, "k", 0, 5, ok(3, 0, time.Hour+10*time.Second)),
		allowStep(0, "k", 1, no(3, 0, time.Hour+10*time.Second, time.Hour+10*time.Second)),
	})
}

func TestFixedWindowDebtSaturates(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	fw, err := NewFixedWindow(3, time.Minute, WithClock(clock), WithMaxDebt(UnboundedDebt), WithMaxSettle(UnboundedSettle))
	require.NoError(t, err)
	count := func(key string) int64 {
		sh, _ := fw.windows.lock(key, int64(clock.Now().Sub(epoch)), fw.maxNow)
		defer sh.mu.Unlock()
		win, _ := sh.lookup(key)
		return win.count
	}
	for range 3 {
		res, err := fw.Settle(ctx, "k", 0, maxSettleCost)
		require.NoError(t, err)
		assert.Equal(t, ok(3, 0, time.Minute), res)
	}
	assert.Equal(t, int64(maxSettleCost), count("k"))

	// A limit above 2^52 is never cut down to it.
	big, err := NewFixedWindow(1<<60, time.Minute, WithClock(clock))
	require.NoError(t, err)
	res, err := big.Allow(ctx, "k", 1<<59)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = big.Settle(ctx, "k", 0, maxSettleCost)
	require.NoError(t, err)
	assert.Equal(t, ok(1<<60, 1<<60-1<<59-maxSettleCost, time.Minute), res)
	res, err = big.Settle(ctx, "k", 0, maxSettleCost)
	require.NoError(t, err)
	assert.Equal(t, ok(1<<60, 1<<60-1<<59-2*maxSettleCost, time.Minute), res)
}

// counterAdjuster is a sliding counter under test, with the functions that
// move the time it sees, read it, and turn a time it saw into one for
// TakenAt (on Redis, the age of a TakenAt is reckoned from the time the
// process reads, not the server's).
type counterAdjuster struct {
	name    string
	a       Adjuster
	advance func(time.Duration)
	now     func() time.Time
	takenAt func(time.Time) AdjustOption
}

// counterAdjusters returns a SlidingCounter and a RedisSlidingCounter on
// miniredis of limit per window, built with opts, both at epoch.
func counterAdjusters(t *testing.T, limit int, window time.Duration, opts ...Option) []counterAdjuster {
	clock := ratelimittest.NewClock(epoch)
	local, err := NewSlidingCounter(limit, window, append(opts[:len(opts):len(opts)], WithClock(clock))...)
	require.NoError(t, err)
	_, client, advance := miniredisClock(t)
	remote, err := NewRedisSlidingCounter(client, limit, window, redisOpts(opts)...)
	require.NoError(t, err)
	now := epoch
	return []counterAdjuster{
		{"SlidingCounter", local, clock.Advance, clock.Now, TakenAt},
		{"RedisSlidingCounter", remote, func(d time.Duration) { now = now.Add(d); advance(d) }, func() time.Time { return now },
			func(at time.Time) AdjustOption { return TakenAt(time.Now().Add(at.Sub(now))) }},
	}
}

func TestSlidingCounterRefundGoesBackOnlyToTheWindowThatTookIt(t *testing.T) {
	ctx := context.Background()
	for _, x := range counterAdjusters(t, 10, 10*time.Second) {
		t.Run(x.name, func(t *testing.T) {
			takenPrev := x.now()
			_, err := x.a.Allow(ctx, "k", 4)
			require.NoError(t, err)
			x.advance(10 * time.Second) // the window moves on: prev 4
			takenCur := x.now()
			_, err = x.a.Allow(ctx, "k", 2)
			require.NoError(t, err)
			x.advance(5 * time.Second) // prev weighs ⌈4 × 5/10⌉ = 2

			res, err := x.a.Refund(ctx, "k", 1, x.takenAt(takenCur.Add(time.Millisecond)))
			require.NoError(t, err)
			assert.Equal(t, ok(10, 10-1-2, 15*time.Second), res, "to the window open now")
			res, err = x.a.Refund(ctx, "k", 2, x.takenAt(takenPrev.Add(time.Millisecond)))
			require.NoError(t, err)
			assert.Equal(t, ok(10, 10-1-1, 15*time.Second), res, "to the previous window: prev 2 weighs 1")
			res, err = x.a.Refund(ctx, "k", 5, x.takenAt(takenPrev.Add(-time.Second)))
			require.NoError(t, err)
			assert.Equal(t, ok(10, 8, 15*time.Second), res, "to no window: it was taken before both")
			res, err = x.a.Refund(ctx, "k", 5)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 9, 5*time.Second), res, "without TakenAt, to the window open now, never below 0")
			res, err = x.a.Refund(ctx, "k", 2, x.takenAt(takenPrev.Add(time.Millisecond)))
			require.NoError(t, err)
			assert.Equal(t, ok(10, 10, 0), res, "the key holds nothing")
			res, err = x.a.Allow(ctx, "k", 10)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 20*time.Second), res, "a new window opens at the next counted request")
		})
	}
}

func TestSlidingCounterSettleCountsAtOnceWithinTheDebtBound(t *testing.T) {
	ctx := context.Background()
	for _, x := range counterAdjusters(t, 10, 10*time.Second, WithMaxDebt(1)) {
		t.Run(x.name, func(t *testing.T) {
			res, err := x.a.Settle(ctx, "k", 0, 4)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 6, 20*time.Second), res, "a Settle opens a window")
			res, err = x.a.Settle(ctx, "k", 4, 100)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 20*time.Second), res, "in debt, at most 2 limits counted")
			res, err = x.a.Allow(ctx, "k", 1)
			require.NoError(t, err)
			assert.False(t, res.Allowed)
			x.advance(10 * time.Second)
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 10*time.Second), res, "20 units weigh 20 in the next window")
			res, err = x.a.Settle(ctx, "k", 10, 0)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 10*time.Second), res, "a refund without TakenAt goes to the window open now, which holds none")
			require.NoError(t, x.a.Reset(ctx, "k"))
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 10, 0), res, "Reset forgets the key")
		})
	}
}

func TestSlidingCountersDecideLargeNumbersAlike(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 6))
	ctx := context.Background()
	for round := 0; round < sized(40, 200); round++ {
		L := maxRedisLimit - r.IntN(1000)
		if round%2 == 1 {
			L = 1 + r.IntN(maxRedisLimit)
		}
		W := time.Duration(1+r.Int64N(1<<51/1000)) * time.Millisecond
		if round%4 == 0 {
			W = (1 << 51 / 1000) * time.Millisecond
		}
		prev, cur := r.Int64N(int64(L)+1), r.Int64N(int64(L)+1)
		e := time.Duration(r.Int64N(int64(W/time.Microsecond))) * time.Microsecond
		n := 1 + r.IntN(L)
		var got [2]Result
		for i, x := range counterAdjusters(t, L, W, WithMaxDebt(UnboundedDebt)) {
			// prev in the window before, cur in the window open now.
			_, err := x.a.Settle(ctx, "k", 0, int(prev))
			require.NoError(t, err)
			x.advance(W)
			_, err = x.a.Settle(ctx, "k", 0, int(cur))
			require.NoError(t, err)
			x.advance(e)
			got[i], err = x.a.Allow(ctx, "k", n)
			require.NoError(t, err)
		}
		msg := []any{"round %d: L %d, W %v, prev %d, cur %d, e %v, n %d", round, L, W, prev, cur, e, n}
		// The estimate, exactly.
		num := new(big.Int).Mul(big.NewInt(prev), big.NewInt(int64(W-e)))
		num.Add(num, big.NewInt(int64(W)-1))
		estimate := cur + num.Quo(num, big.NewInt(int64(W))).Int64()
		if prev == 0 && cur == 0 {
			estimate = 0
		}
		local, remote := got[0], got[1]
		assert.Equal(t, estimate+int64(n) <= int64(L), local.Allowed, msg...)
		if local.Allowed {
			assert.Equal(t, max(int64(L)-estimate-int64(n), 0), int64(local.Remaining), msg...)
		} else {
			assert.Equal(t, max(int64(L)-estimate, 0), int64(local.Remaining), msg...)
		}
		local.RetryAfter = (local.RetryAfter + time.Microsecond - 1).Truncate(time.Microsecond)
		assert.Equal(t, local, remote, msg...)
	}
}
