package ratelimit

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logModel is the reference sliding log: every allowed call's time and
// units per key, and the definition written out by brute force. Like the
// limiters, it lets time stand still while the clock reads earlier than
// the latest decision.
type logModel struct {
	limit, window int64
	now, latest   int64
	logs          map[string][]logEntry
}

func newLogModel(limit int, window time.Duration) *logModel {
	return &logModel{limit: int64(limit), window: int64(window), logs: map[string][]logEntry{}}
}

func (m *logModel) advance(d time.Duration) { m.now += int64(d) }

// inWindow returns the units of key's calls that count at t, those taken
// after t - window.
func (m *logModel) inWindow(key string, t int64) int64 {
	var sum int64
	for _, e := range m.logs[key] {
		if e.at+m.window > t {
			sum += e.units
		}
	}
	return sum
}

func (m *logModel) allow(key string, n int) Result {
	res := Result{Limit: int(m.limit)}
	if int64(n) > m.limit {
		return res
	}
	m.latest = max(m.latest, m.now)
	at, lag := m.latest, m.latest-m.now
	sum := m.inWindow(key, at)
	if sum+int64(n) <= m.limit {
		res.Allowed = true
		if n > 0 {
			m.logs[key] = append(m.logs[key], logEntry{at: at, units: int64(n)})
			sum += int64(n)
		}
	} else {
		// The first moment at which some entry leaves and n fits.
		for _, e := range m.logs[key] {
			if end := e.at + m.window; end > at && m.inWindow(key, end)+int64(n) <= m.limit {
				res.RetryAfter = time.Duration(end - at + lag)
				break
			}
		}
	}
	res.Remaining = int(max(m.limit-sum, 0))
	if sum > 0 {
		last := m.logs[key][len(m.logs[key])-1]
		res.ResetAfter = time.Duration(last.at + m.window - at + lag)
	}
	return res
}

func TestSlidingLogsMatchTheModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 1))
	for round := 0; round < sized(20, 80); round++ {
		limit := 1 + r.IntN(10)
		window := time.Duration(1+r.Int64N(5000)) * time.Millisecond
		back := round%2 == 0
		keys := []string{"a", "b", "c"}
		if back {
			keys = keys[:1]
		}
		clock := ratelimittest.NewClock(epoch)
		l, err := NewSlidingLog(limit, window, WithClock(clock))
		require.NoError(t, err)
		model := newLogModel(limit, window)
		for i, c := range randomSchedule(r, 300, limit, window/time.Duration(limit), back, keys...) {
			clock.Advance(c.advance)
			model.advance(c.advance)
			got, err := l.Allow(context.Background(), c.key, c.n)
			if c.n > limit {
				require.ErrorIs(t, err, ErrCostExceedsLimit)
			} else {
				require.NoError(t, err)
			}
			if !assert.Equal(t, model.allow(c.key, c.n), got, "round %d step %d: limit %d, window %v, %v", round, i, limit, window, c) {
				return
			}
		}
	}
}

// FuzzSlidingLog checks the in-process sliding log against its model on
// arbitrary schedules of one key, the clock stepping back now and then.
func FuzzSlidingLog(f *testing.F) {
	f.Add(uint8(20), uint16(30000), []byte{0, 1, 0, 1, 0, 25, 255, 1})
	f.Add(uint8(3), uint16(10), []byte{5, 3, 5, 3, 250, 1, 1, 1, 40, 2})
	f.Fuzz(func(t *testing.T, limit uint8, windowMs uint16, program []byte) {
		if limit == 0 || windowMs == 0 || len(program) > 400 {
			return
		}
		window := time.Duration(windowMs) * time.Millisecond
		clock := ratelimittest.NewClock(epoch)
		l, err := NewSlidingLog(int(limit), window, WithClock(clock))
		if err != nil {
			t.Fatalf("NewSlidingLog(%d, %v): %v", limit, window, err)
		}
		model := newLogModel(int(limit), window)
		// Each pair of bytes is one call: a clock step of 0..255 tenths of
		// a window's limit-th part (the top values step back), then a cost.
		for i := 0; i+1 < len(program); i += 2 {
			step := time.Duration(program[i]) * window / time.Duration(10*int(limit))
			if program[i] >= 250 {
				step = -step
			}
			n := int(program[i+1]) % (int(limit) + 2)
			clock.Advance(step)
			model.advance(step)
			got, err := l.Allow(context.Background(), "k", n)
			want := model.allow("k", n)
			if (err != nil) != (n > int(limit)) || got != want {
				t.Fatalf("call %d: Allow(%d) after %v = %+v, %v; model says %+v", i/2, n, step, got, err, want)
			}
		}
	})
}

// allowedCall is an allowed call's time (since the schedule began) and
// units, for the brute-force checks of the sliding property.
type allowedCall struct {
	at    time.Duration
	key   string
	units int
}

// checkSlidingProperty runs a random schedule of Allows over a few keys
// on l, moving time by advance, and checks after every call, by brute
// force over the allowed calls: no span of length window holds more than
// limit units of one key, and a denial was right (the units in (now −
// window, now] plus n are above limit). It returns how many calls were
// denied.
func checkSlidingProperty(t *testing.T, r *rand.Rand, l Limiter, advance func(time.Duration), limit int, window time.Duration) (denied int) {
	t.Helper()
	var now time.Duration
	var calls []allowedCall
	unitsIn := func(key string, from, to time.Duration) int { // units taken in (from, to]
		sum := 0
		for _, c := range calls {
			if c.key == key && c.at > from && c.at <= to {
				sum += c.units
			}
		}
		return sum
	}
	keys := []string{"a", "b"}
	for i := 0; i < 200; i++ {
		step := time.Duration(r.Int64N(int64(window)/int64(limit)*2 + 1)).Truncate(time.Microsecond)
		if r.IntN(10) == 0 {
			step = 0
		}
		advance(step)
		now += step
		key, n := keys[r.IntN(len(keys))], r.IntN(limit+1)
		res, err := l.Allow(context.Background(), key, n)
		require.NoError(t, err)
		if !res.Allowed {
			require.Greater(t, unitsIn(key, now-window, now)+n, limit, "call %d: a denial of %d for %q at %v that fits", i, n, key, now)
			denied++
			continue
		}
		if n == 0 {
			continue
		}
		calls = append(calls, allowedCall{at: now, key: key, units: n})
		// The spans that hold the most end at an allowed call's time, and
		// time only moves forward here: the call adds its units to the
		// spans that hold now, of which the one ending at now holds the
		// most of what came before. Checking it after every call checks
		// every span.
		require.LessOrEqual(t, unitsIn(key, now-window, now), limit, "call %d: more than %d of %q in the window ending at %v", i, limit, key, now)
	}
	return denied
}

func TestSlidingLogNeverAllowsMoreThanTheLimitInAnyWindow(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 2))
	for round := 0; round < sized(2, 12); round++ {
		limit := 1 + r.IntN(8)
		window := time.Duration(1+r.Int64N(2000)) * time.Millisecond
		for _, sub := range logSubjects {
			l, advance := sub.newLimiter(t, limit, window)
			assert.Positive(t, checkSlidingProperty(t, r, l, advance, limit, window), "%s: some calls are denied", sub.name)
		}
	}
}

func TestSlidingLogRefusesLimitsAboveTheBound(t *testing.T) {
	t.Parallel()
	_, err := NewSlidingLog(MaxSlidingLogLimit+1, time.Minute)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "MaxSlidingLogLimit")
	_, err = NewSlidingLog(MaxSlidingLogLimit, time.Minute)
	require.NoError(t, err)

	l, err := NewSlidingLog(10, time.Minute, WithPolicyFunc(everyKey(MaxSlidingLogLimit+1, time.Minute)))
	require.NoError(t, err)
	res, err := l.Allow(context.Background(), "k", 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.True(t, strings.Contains(err.Error(), "MaxSlidingLogLimit"), err.Error())
	assert.Equal(t, Result{Limit: 10}, res)
}

func TestSlidingLogRefusesBadConfigurations(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		limit  int
		window time.Duration
		opts   []Option
	}{
		{0, time.Second, nil},
		{-1, time.Second, nil},
		{1, 0, nil},
		{1, -time.Second, nil},
	} {
		_, err := NewSlidingLog(c.limit, c.window, c.opts...)
		require.ErrorIs(t, err, ErrInvalidConfig, "%d per %v", c.limit, c.window)
	}
}

func TestSlidingLogRefundGivesBackToTheEntriesThatTookThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingLog(5, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 2) // at 0
	require.NoError(t, err)
	clock.Advance(4 * time.Second)
	_, err = l.Allow(ctx, "k", 3) // at 4 s
	require.NoError(t, err)

	// TakenAt 1 s: only the entry taken at 0 may get units back.
	res, err := l.Refund(ctx, "k", 3, TakenAt(epoch.Add(time.Second)))
	require.NoError(t, err)
	assert.Equal(t, ok(5, 2, 10*time.Second), res)
	// Without TakenAt, the newest first: one of the 3 taken at 4 s.
	res, err = l.Refund(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 3, 10*time.Second), res)
	// 5 would need both entries gone; the one of 4 s holds 2 and leaves at 14 s.
	clock.Advance(time.Second)
	res, err = l.Allow(ctx, "k", 4)
	require.NoError(t, err)
	assert.Equal(t, no(5, 3, 9*time.Second, 9*time.Second), res)
	// All back: the key is empty, and forgotten.
	res, err = l.Refund(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 5, 0), res)
	assert.Equal(t, 0, l.logs.len())
}

func TestSlidingLogRefundNeverReachesUnitsThatLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingLog(3, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 3)
	require.NoError(t, err)
	clock.Advance(6 * time.Second)
	_, err = l.Allow(ctx, "k", 0)
	require.NoError(t, err)
	clock.Advance(4 * time.Second) // the 3 units have left
	_, err = l.Allow(ctx, "k", 3)
	require.NoError(t, err)
	res, err := l.Refund(ctx, "k", 3, TakenAt(epoch))
	require.NoError(t, err)
	assert.Equal(t, ok(3, 0, 10*time.Second), res)
}

func TestSlidingLogSettleTakesMoreUpToTheDebtBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingLog(4, 10*time.Second, WithClock(clock), WithMaxDebt(1))
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	clock.Advance(time.Second)
	// Taken 2, cost 40 (ten limits, the most one Settle may charge): 6
	// more would go past limit + debt = 8.
	res, err := l.Settle(ctx, "k", 2, 40)
	require.NoError(t, err)
	assert.Equal(t, ok(4, 0, 10*time.Second), res)
	// 8 units in the window: 1 fits once the 2 of 0 s and the 6 of 1 s
	// leave, at 11 s.
	res, err = l.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, no(4, 0, 10*time.Second, 10*time.Second), res)
	clock.Advance(9 * time.Second) // the 2 of 0 s leave: 6 left, still above 4
	res, err = l.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(4, 0, time.Second), res)
	clock.Advance(time.Second)
	res, err = l.Allow(ctx, "k", 4)
	require.NoError(t, err)
	assert.Equal(t, ok(4, 0, 10*time.Second), res)
}

func TestSlidingLogHoldsAtMostLimitEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingLog(3, 10*time.Second, WithClock(clock), WithMaxDebt(UnboundedDebt))
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		clock.Advance(time.Second / 2)
		_, err := l.Settle(ctx, "k", 0, 1)
		require.NoError(t, err)
	}
	sh, _ := l.logs.lock("k", l.base.elapsed(), l.maxNow)
	lg, _ := sh.lookup("k")
	sh.mu.Unlock()
	assert.Equal(t, 3, lg.n)
	assert.Equal(t, int64(10), lg.sum)
	// The merged units moved to the newest time: they count for a whole
	// window from there.
	res, err := l.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 0, 10*time.Second), res)
}

func TestSlidingLogResetForgetsTheKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := NewSlidingLog(2, time.Minute, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	require.NoError(t, l.Reset(ctx, "k"))
	res, err := l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, time.Minute), res)
}

func TestSlidingLogForgetsKeysWhoseUnitsHaveLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingLog(5, time.Second, WithClock(clock))
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		_, err := l.Allow(ctx, string(rune('a'+i%26))+strings.Repeat("x", i/26), 1)
		require.NoError(t, err)
	}
	assert.Equal(t, 100, l.logs.len())
	// Two windows later every shard a call touches has dropped its keys.
	clock.Advance(3 * time.Second)
	for i := 0; i < 1000; i++ {
		_, err := l.Allow(ctx, "z", 0)
		require.NoError(t, err)
	}
	for i := range l.logs.shards {
		l.logs.lockShard(i, l.base.elapsed(), l.maxNow)
		l.logs.shards[i].mu.Unlock()
	}
	assert.Equal(t, 0, l.logs.len())
}

func TestSlidingLogZeroValueFails(t *testing.T) {
	t.Parallel()
	var nilCtx context.Context
	var l *SlidingLog
	_, err := l.Allow(nilCtx, "k", 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = (&SlidingLog{}).Refund(context.Background(), "k", 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorIs(t, l.Reset(context.Background(), "k"), ErrInvalidConfig)
	assert.Equal(t, Policy{}, l.Policy())
}
