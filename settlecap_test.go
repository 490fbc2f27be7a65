package ratelimit

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// randomSettleCap returns a bound on one Settle for a limiter under test,
// in limits, and its options: the default (no option), none, 1, 2 or 3
// limits.
func randomSettleCap(r *rand.Rand) (int, []Option) {
	switch x := r.IntN(5); x {
	case 0:
		return DefaultMaxSettle, nil
	case 1:
		return UnboundedSettle, []Option{WithMaxSettle(UnboundedSettle)}
	default:
		return x - 1, []Option{WithMaxSettle(x - 1)}
	}
}

// calendarDaySubjects are the calendar windows of limit a UTC day, in
// process and on miniredis.
func calendarDaySubjects() []subject {
	cal := Calendar{Period: CalendarDay, Location: time.UTC}
	return []subject{
		inProcessSubject("CalendarWindow", func(limit int, _ time.Duration, opts ...Option) (Limiter, error) {
			return NewCalendarWindow(limit, cal, opts...)
		}),
		{"RedisCalendarWindow/miniredis", func(t *testing.T, limit int, _ time.Duration, opts ...Option) (Limiter, func(time.Duration)) {
			clock := ratelimittest.NewClock(epoch)
			_, client, step := miniredisClock(t)
			l, err := NewRedisCalendarWindow(client, limit, cal, append(redisOpts(opts), WithClock(clock))...)
			require.NoError(t, err)
			return l, func(d time.Duration) { clock.Advance(d); step(d) }
		}},
	}
}

// settleCapSubjects are every rate limiter of the package, in process and
// on miniredis, each of limit per period (a calendar window's a day),
// alone and as a Composite's one part.
func settleCapSubjects() []subject {
	var all []subject
	for _, group := range [][]subject{bucketSubjects, windowSubjects, logSubjects, counterSubjects, calendarDaySubjects()} {
		all = append(all, group...)
	}
	return append(all, compositeOfOne(all)...)
}

// TestASettleAboveItsBoundIsRefusedAndChangesNothing: on every rate
// limiter, in process and on miniredis, alone and as a Composite's one
// part, a Settle whose cost is above ten limits (the default) is refused
// with an error of the caller's class wrapping ErrInvalidCost that names
// WithMaxSettle, and the key is as it was; ten limits are charged (as far
// as the debt bound allows); WithMaxSettle(2) refuses above two limits,
// and UnboundedSettle refuses nothing up to 2^52.
func TestASettleAboveItsBoundIsRefusedAndChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, sub := range settleCapSubjects() {
		t.Run(sub.name, func(t *testing.T) {
			const limit = 4
			l, _ := sub.newLimiter(t, limit, time.Minute)
			a := l.(Adjuster)
			_, err := a.Allow(ctx, "k", 1)
			require.NoError(t, err)
			before, err := a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			for _, cost := range []int{10*limit + 1, 100_000_000, maxSettleCost} {
				res, err := a.Settle(ctx, "k", 1, cost)
				require.ErrorIs(t, err, ErrInvalidCost, "cost %d", cost)
				require.ErrorIs(t, err, ErrCaller, "cost %d", cost)
				assert.False(t, errors.Is(err, ErrBackend), "cost %d", cost)
				assert.Contains(t, err.Error(), "WithMaxSettle")
				assert.Equal(t, Result{Limit: limit}, res)
				after, err := a.Allow(ctx, "k", 0)
				require.NoError(t, err)
				assert.Equal(t, before, after, "cost %d: the key is as it was", cost)
			}
			res, err := a.Settle(ctx, "k", 1, 10*limit)
			require.NoError(t, err, "ten limits are charged")
			assert.Equal(t, 0, res.Remaining)

			two, _ := sub.newLimiter(t, limit, time.Minute, WithMaxSettle(2))
			_, err = two.(Adjuster).Settle(ctx, "k", 0, 2*limit+1)
			require.ErrorIs(t, err, ErrInvalidCost)
			_, err = two.(Adjuster).Settle(ctx, "k", 0, 2*limit)
			require.NoError(t, err)

			unbounded, _ := sub.newLimiter(t, limit, time.Minute, WithMaxSettle(UnboundedSettle))
			_, err = unbounded.(Adjuster).Settle(ctx, "k", 0, maxSettleCost)
			require.NoError(t, err)
		})
	}
}

func TestWithMaxSettleRefusesBoundsBelowOneAndConcurrencyLimiters(t *testing.T) {
	for _, limits := range []int{0, -2, math.MinInt} {
		_, err := NewGCRA(10, time.Minute, WithMaxSettle(limits))
		require.ErrorIs(t, err, ErrInvalidConfig, "WithMaxSettle(%d)", limits)
		assert.Contains(t, err.Error(), "WithMaxSettle")
	}
	for _, limits := range []int{1, 10, math.MaxInt, UnboundedSettle} {
		_, err := NewGCRA(10, time.Minute, WithMaxSettle(limits))
		require.NoError(t, err, "WithMaxSettle(%d)", limits)
	}
	_, err := NewConcurrency(3, time.Minute, WithMaxSettle(2))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithMaxSettle does not apply")
	_, client, _ := miniredisClock(t)
	_, err = NewRedisConcurrency(client, 3, time.Minute, WithMaxSettle(2))
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// TestAGiveBackIsNeverRefusedByTheBoundOnASettle: on a limiter built
// WithPolicyFunc, units taken under a larger plan may be settled at a
// cost above ten limits of the key's plan now, as long as the Settle
// gives back (its cost at most what was taken).
func TestAGiveBackIsNeverRefusedByTheBoundOnASettle(t *testing.T) {
	ctx := context.Background()
	plans := newPlanMap()
	plans.set("k", Policy{Limit: 1000, Window: time.Minute})
	l, err := NewGCRA(10, time.Minute, WithClock(ratelimittest.NewClock(epoch)), WithPolicyFunc(plans.f))
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 1000)
	require.NoError(t, err)
	plans.set("k", Policy{Limit: 10, Window: time.Minute})
	_, err = l.Settle(ctx, "k", 1000, 500)
	require.NoError(t, err, "500 is above 10 × 10, but gives 500 back")
	_, err = l.Settle(ctx, "k", 500, 501)
	require.ErrorIs(t, err, ErrInvalidCost, "one more than taken, above 10 × 10: a charge")
}

func TestSettleCapArithmeticSaturatesWithoutOverflow(t *testing.T) {
	for _, c := range []struct {
		cap         settleCap
		limit, most int64
	}{
		{1, 10, 10},
		{10, 10, 100},
		{UnboundedSettle, 10, maxSettleCost},
		{math.MaxInt64, 10, maxSettleCost},
		{10, maxSettleCost, maxSettleCost},
		{2, 1 << 51, maxSettleCost},
		{2, 1<<51 - 1, 1<<52 - 2},
		{1, math.MaxInt64, maxSettleCost},
	} {
		assert.Equal(t, c.most, c.cap.most(c.limit), "cap %d, limit %d", c.cap, c.limit)
	}
}

// monthlyComposite is the Composite: 5 a second (a token bucket)
// and 120 a calendar month in Berlin, in process on clock or on Redis
// through client (miniredis: windows' bounds on clock; a real server:
// clock nil, the system clock), each part built with opts.
func monthlyComposite(t *testing.T, client redis.Scripter, clock Clock, opts ...Option) *Composite {
	t.Helper()
	month := Calendar{Period: CalendarMonth, Location: zone(t, "Europe/Berlin")}
	var rps, quota Limiter
	var err error
	switch {
	case client == nil:
		rps, err = NewTokenBucket(PerSecond(5), 5, append(opts, WithClock(clock))...)
		require.NoError(t, err)
		quota, err = NewCalendarWindow(120, month, append(opts, WithClock(clock))...)
	default:
		rps, err = NewRedisTokenBucket(client, PerSecond(5), 5, redisOpts(opts)...)
		require.NoError(t, err)
		if clock != nil {
			opts = append(opts, WithClock(clock))
		}
		quota, err = NewRedisCalendarWindow(client, 120, month, redisOpts(opts)...)
	}
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "rps", Limiter: rps}, Part{Name: "month", Limiter: quota})
	require.NoError(t, err)
	return c
}

// TestABogusSettleOnACompositeWithAMonthlyPartLeavesRetryAfterWithinTheBound
// is the case: Settle(1, 100000000) on a Composite of 5 a second
// and 120 a month once left RetryAfter 652 h, the rest of the month. It
// is refused now (above ten limits of the per-second part, the smallest
// bound of the parts) and changes nothing; the largest Settle a Composite
// takes (ten limits of that part, 50) leaves RetryAfter within what the
// per-second part's debt bound says, 2 s, and the month 69 left; without
// the bound (UnboundedSettle on its parts), the month's debt lasts to its
// end. In process and on miniredis, 2026-11-03 10:00 UTC (the month ends
// in 661 h), and on a real server at its own time.
func TestABogusSettleOnACompositeWithAMonthlyPartLeavesRetryAfterWithinTheBound(t *testing.T) {
	ctx := context.Background()
	start := utc(2026, 11, 3, 10, 0)
	monthEnd := time.Date(2026, 12, 1, 0, 0, 0, 0, zone(t, "Europe/Berlin")).Sub(start)
	for _, where := range []string{"in process", "miniredis", "real Redis"} {
		t.Run(where, func(t *testing.T) {
			build := func(opts ...Option) *Composite {
				switch where {
				case "in process":
					return monthlyComposite(t, nil, ratelimittest.NewClock(start), opts...)
				case "miniredis":
					_, client, _ := redistest.Miniredis(t, start)
					return monthlyComposite(t, client, ratelimittest.NewClock(start), opts...)
				}
				return monthlyComposite(t, redistest.Shared(t).Client(t), nil, opts...)
			}
			c := build()
			d, err := c.Decide(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			_, err = c.Settle(ctx, "k", 1, 100_000_000)
			require.ErrorIs(t, err, ErrInvalidCost)
			require.ErrorIs(t, err, ErrCaller)
			assert.Contains(t, err.Error(), `part "rps"`)
			d, err = c.Decide(ctx, "k", 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed, "the refused Settle charged nothing")
			assert.Zero(t, d.RetryAfter)
			assert.Equal(t, 118, d.Parts[1].Remaining)

			_, err = c.Settle(ctx, "k", 1, 50) // ten limits of rps: the most it takes
			require.NoError(t, err)
			d, err = c.Decide(ctx, "k", 1)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Equal(t, "rps", d.Policy.Name)
			assert.LessOrEqual(t, d.RetryAfter, 2*time.Second, "the per-second part's debt: at most one limit, paid in 1 s, and the unit's 200 ms")
			assert.Equal(t, 69, d.Parts[1].Remaining, "the month: 120 - 2 calls - 49 more")

			unbounded := build(WithMaxSettle(UnboundedSettle))
			_, err = unbounded.Settle(ctx, "u", 0, 100_000_000)
			require.NoError(t, err)
			d, err = unbounded.Decide(ctx, "u", 1)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Equal(t, "month", d.Policy.Name, "without the bound, the month is spent")
			if where != "real Redis" {
				assert.Equal(t, monthEnd, d.RetryAfter, "to the month's end")
			} else {
				assert.Greater(t, d.RetryAfter, time.Duration(0))
				assert.LessOrEqual(t, d.RetryAfter, 31*24*time.Hour)
			}
		})
	}
}

// TestPrefetchSendsASettleAboveTheLimitToItsBackend: a Prefetch whose key
// holds a block spends a Settle's extra cost from the block when it holds
// enough, but a cost above the key's limit goes to the backend, which
// bounds it: over a bucket built WithMaxSettle(1), a Settle of 10 units
// taken an earlier second and a cost of 10 plus what the block holds is
// refused there, and the block is untouched.
func TestPrefetchSendsASettleAboveTheLimitToItsBackend(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewTokenBucket(PerSecond(10), 10, WithClock(clock), WithMaxSettle(1))
	require.NoError(t, err)
	l, err := NewPrefetch(backend, PrefetchConfig{HotCalls: 2, MinBlock: 8, MaxShare: 1})
	require.NoError(t, err)
	d, err := l.Decide(ctx, "k", 10) // cold: the backend's
	require.NoError(t, err)
	require.True(t, d.Allowed)
	clock.Advance(time.Second) // full again
	for range 4 {
		clock.Advance(time.Millisecond)
		d, err := l.Decide(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	v, ok := l.keys.Load("k")
	require.True(t, ok)
	lk := v.(*leaseKey)
	usable := func() int64 {
		lk.mu.Lock()
		defer lk.mu.Unlock()
		require.NotNil(t, lk.blk, "the key holds a block")
		return lk.blk.usable(l.base.elapsed())
	}
	held := usable()
	require.Positive(t, held)
	_, err = l.Settle(ctx, "k", 10, 10+int(held))
	require.ErrorIs(t, err, ErrInvalidCost, "above one limit: the backend refuses it")
	require.ErrorIs(t, err, ErrCaller)
	assert.Equal(t, held, usable(), "the block is untouched")
	_, err = l.Settle(ctx, "k", 1, 1+int(held)) // within the limit: from the block
	require.NoError(t, err)
	assert.Zero(t, usable())
}

// TestFleetFallbacksKeepTheBackendsBoundOnASettle: a Fleet's fallback
// mirrors its backend's WithMaxSettle (the default, or the backend's
// own), in multiples of the share's limit, unless its options say
// otherwise; a Composite's concurrency part, which has no Settle, takes
// none.
func TestFleetFallbacksKeepTheBackendsBoundOnASettle(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	f, err := NewFleet(client, FleetConfig{Name: "fleet", ID: "a"})
	require.NoError(t, err)
	require.NoError(t, f.Beat(ctx))
	settle := func(l Limiter, cost int) error {
		_, err := l.(Adjuster).Settle(ctx, "k", 0, cost)
		return err
	}
	byDefault, err := NewRedisGCRA(client, 10, time.Minute)
	require.NoError(t, err)
	fb, err := f.Fallback(byDefault)
	require.NoError(t, err)
	require.ErrorIs(t, settle(fb, 101), ErrInvalidCost)
	require.NoError(t, settle(fb, 100))

	two, err := NewRedisGCRA(client, 10, time.Minute, WithMaxSettle(2))
	require.NoError(t, err)
	fb, err = f.Fallback(two)
	require.NoError(t, err)
	require.ErrorIs(t, settle(fb, 21), ErrInvalidCost)
	fb, err = f.Fallback(two, WithMaxSettle(UnboundedSettle))
	require.NoError(t, err)
	require.NoError(t, settle(fb, 1_000_000))

	inFlight, err := NewRedisConcurrency(client, 3, time.Minute)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "rate", Limiter: two}, Part{Name: "inflight", Limiter: inFlight})
	require.NoError(t, err)
	fb, err = f.Fallback(c, WithMaxSettle(3))
	require.NoError(t, err, "the concurrency part is left without it")
	require.ErrorIs(t, settle(fb, 31), ErrInvalidCost)
	require.NoError(t, settle(fb, 30))
}

// TestADebtLastsAsWithMaxDebtSays: a Settle of ten limits on a fresh key
// of 4 per 10 s (its debt bounded at one limit) leaves each kind full
// again when WithMaxDebt's godoc says, in process and on miniredis: a
// token bucket or GCRA within two windows, a fixed window and a sliding
// log within one, a sliding counter within two windows of the start of
// the window that counted it, and a calendar day at the day's end.
func TestADebtLastsAsWithMaxDebtSays(t *testing.T) {
	ctx := context.Background()
	const limit, window = 4, 10 * time.Second
	day := epoch.Add(24 * time.Hour).Sub(epoch) // the fake clocks start at midnight UTC
	groups := []struct {
		subjects []subject
		full     time.Duration
	}{
		{bucketSubjects, 2 * window},
		{windowSubjects, window},
		{logSubjects, window},
		{counterSubjects, 2 * window},
	}
	groups = append(groups, struct {
		subjects []subject
		full     time.Duration
	}{calendarDaySubjects(), day})
	for _, g := range groups {
		for _, sub := range g.subjects {
			t.Run(sub.name, func(t *testing.T) {
				l, advance := sub.newLimiter(t, limit, window)
				a := l.(Adjuster)
				res, err := a.Settle(ctx, "k", 0, 10*limit)
				require.NoError(t, err)
				assert.Equal(t, 0, res.Remaining)
				assert.LessOrEqual(t, res.ResetAfter, g.full, "the Settle's own ResetAfter")
				advance(g.full - time.Millisecond)
				peek, err := a.Allow(ctx, "k", 0)
				require.NoError(t, err)
				assert.Less(t, peek.Remaining, limit, "not full yet, 1 ms before")
				advance(time.Millisecond)
				peek, err = a.Allow(ctx, "k", 0)
				require.NoError(t, err)
				assert.Equal(t, limit, peek.Remaining, "full after %v", g.full)
			})
		}
	}
}
