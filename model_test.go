// This file holds the kinds' reference models (token bucket, sliding
// counter, calendar window), each written for clarity and sharing no code
// with the limiters; the differentials that run them are beside the
// kinds' tests.

package ratelimit

import (
	"context"
	"math/big"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bucketModel is the reference token bucket: the textbook form with a token
// count and a last-refill time, in exact rational arithmetic, written for
// clarity rather than speed. It shares no code with the limiters.
type bucketModel struct {
	capacity int64
	interval int64 // ns per token
	now      int64 // ns; the clock's reading, which may go backwards
	buckets  map[string]*modelBucket
}

// modelBucket is one key's bucket: tokens at time last, the latest time the
// key was seen. A clock reading before last counts as last: time stands still
// for the key until the clock catches up.
type modelBucket struct {
	tokens *big.Rat
	last   int64
}

func newBucketModel(capacity int, interval time.Duration) *bucketModel {
	return &bucketModel{capacity: int64(capacity), interval: int64(interval), buckets: map[string]*modelBucket{}}
}

// advance moves the model's clock by d, backwards for a negative d.
func (m *bucketModel) advance(d time.Duration) {
	m.now += int64(d)
}

// tokens refills key's bucket to now and returns it.
func (m *bucketModel) bucket(key string) *modelBucket {
	b, ok := m.buckets[key]
	if !ok {
		// The limiter's creation, time 0, is the earliest time there is.
		b = &modelBucket{tokens: big.NewRat(m.capacity, 1), last: max(m.now, 0)}
		m.buckets[key] = b
	}
	if m.now <= b.last {
		return b
	}
	elapsed := big.NewRat(m.now-b.last, m.interval)
	b.tokens.Add(b.tokens, elapsed)
	if capacity := big.NewRat(m.capacity, 1); b.tokens.Cmp(capacity) > 0 {
		b.tokens = capacity
	}
	b.last = m.now
	return b
}

// allow decides n for key as an exact token bucket, with exact Result
// fields. An n above capacity changes nothing and says only the limit. When
// the clock is behind the key's last time, every wait includes the catching
// up.
func (m *bucketModel) allow(key string, n int) Result {
	res := Result{Limit: int(m.capacity)}
	if int64(n) > m.capacity {
		return res
	}
	b := m.bucket(key)
	lag := time.Duration(max(b.last-m.now, 0))
	want := big.NewRat(int64(n), 1)
	switch {
	case b.tokens.Cmp(want) >= 0:
		b.tokens.Sub(b.tokens, want)
		res.Allowed = true
	default:
		missing := new(big.Rat).Sub(want, b.tokens)
		res.RetryAfter = lag + time.Duration(ratNanos(missing, m.interval))
	}
	res.Remaining = int(new(big.Int).Quo(b.tokens.Num(), b.tokens.Denom()).Int64())
	empty := new(big.Rat).Sub(big.NewRat(m.capacity, 1), b.tokens)
	if empty.Sign() > 0 {
		res.ResetAfter = lag + time.Duration(ratNanos(empty, m.interval))
	}
	return res
}

// ratNanos is the time in whole ns that tokens take to refill; the limiters'
// integer time makes it a whole number.
func ratNanos(tokens *big.Rat, interval int64) int64 {
	ns := new(big.Rat).Mul(tokens, big.NewRat(interval, 1))
	if !ns.IsInt() {
		panic("model: refill time is not a whole number of ns: " + ns.String())
	}
	return ns.Num().Int64()
}

func TestInProcessLimitersMatchTheModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < sized(50, 200); round++ {
		capacity := 1 + r.IntN(12)
		interval := time.Duration(1 + r.Int64N(int64(2*time.Second)))
		// The clock steps back only in runs on one key: the in-process
		// limiters let time stand still per shard of keys, and the shards
		// are chosen by a random seed, so the model cannot follow a clock
		// going back over several keys.
		keys, back := []string{"a", "b", "c"}, round%2 == 0
		if back {
			keys = keys[:1]
		}
		calls := randomSchedule(r, 300, capacity, interval, back, keys...)
		for _, mk := range []struct {
			name string
			new  func(*ratelimittest.Clock) (Limiter, error)
		}{
			{"TokenBucket", func(c *ratelimittest.Clock) (Limiter, error) {
				return NewTokenBucket(Every(interval), capacity, WithClock(c))
			}},
			{"GCRA", func(c *ratelimittest.Clock) (Limiter, error) {
				return NewGCRA(capacity, interval*time.Duration(capacity), WithClock(c))
			}},
		} {
			clock := ratelimittest.NewClock(epoch)
			l, err := mk.new(clock)
			require.NoError(t, err)
			model := newBucketModel(capacity, interval)
			for i, c := range calls {
				clock.Advance(c.advance)
				model.advance(c.advance)
				got, err := l.Allow(context.Background(), c.key, c.n)
				want := model.allow(c.key, c.n)
				if c.n > capacity {
					require.ErrorIs(t, err, ErrCostExceedsLimit)
				} else {
					require.NoError(t, err)
				}
				if !assert.Equal(t, want, got, "%s round %d step %d: capacity %d, interval %v, %+v", mk.name, round, i, capacity, interval, c) {
					return
				}
			}
		}
	}
}

// counterModel is the reference sliding-window counter: per key, the
// window's start and the units of the window open and of the one before,
// its estimate in big integers, and a RetryAfter found by searching the
// times to come for the first that allows, on a grid of unit ns (1 in
// process, 1000 for Redis's µs). It shares no code with the limiters. Like
// them, it lets time stand still while the clock reads earlier than the
// latest decision.
type counterModel struct {
	limit, window, unit int64
	now, latest         int64
	keys                map[string]modelCounter
}

// modelCounter is one key's state: the window open at start, and its units
// and the previous window's.
type modelCounter struct{ start, prev, cur int64 }

func newCounterModel(limit int, window time.Duration, unit time.Duration) *counterModel {
	return &counterModel{limit: int64(limit), window: int64(window), unit: int64(unit), keys: map[string]modelCounter{}}
}

func (m *counterModel) advance(d time.Duration) { m.now += int64(d) }

// state returns key's state at t: the window open at t, the previous
// window's units; ok false when the key holds nothing.
func (m *counterModel) state(key string, t int64) (modelCounter, bool) {
	k, ok := m.keys[key]
	if !ok || k.prev == 0 && k.cur == 0 {
		return modelCounter{}, false
	}
	switch e := t - k.start; {
	case e < m.window:
		return k, true
	case e < 2*m.window && k.cur > 0:
		return modelCounter{start: k.start + m.window, prev: k.cur}, true
	}
	return modelCounter{}, false
}

// estimate returns cur + ⌈prev × (W − e) / W⌉ of k at t.
func (m *counterModel) estimate(k modelCounter, t int64) int64 {
	num := new(big.Int).Mul(big.NewInt(k.prev), big.NewInt(m.window-(t-k.start)))
	num.Add(num, big.NewInt(m.window-1))
	return k.cur + num.Quo(num, big.NewInt(m.window)).Int64()
}

// left returns the units n may be at t: limit minus the estimate, at
// least 0.
func (m *counterModel) left(key string, t int64) int64 {
	k, ok := m.state(key, t)
	if !ok {
		return m.limit
	}
	return max(m.limit-m.estimate(k, t), 0)
}

// allow decides n for key at the model's time.
func (m *counterModel) allow(key string, n int) Result {
	res := Result{Limit: int(m.limit)}
	if int64(n) > m.limit {
		return res
	}
	m.latest = max(m.latest, m.now)
	at, lag := m.latest, m.latest-m.now
	if int64(n) <= m.left(key, at) {
		res.Allowed = true
		if n > 0 {
			k, ok := m.state(key, at)
			if !ok {
				k = modelCounter{start: at}
			}
			k.cur += int64(n)
			m.keys[key] = k
		}
	} else {
		// The first time on the grid that allows n: the estimate never
		// grows with time, so the times that allow are an interval's end.
		k, _ := m.state(key, at)
		steps := (k.start + 2*m.window - at + m.unit - 1) / m.unit
		i := int64(sort.Search(int(steps)+1, func(i int) bool {
			return int64(n) <= m.left(key, at+int64(i)*m.unit)
		}))
		res.RetryAfter = time.Duration(i*m.unit + lag)
	}
	res.Remaining = int(m.left(key, at))
	if k, ok := m.state(key, at); ok {
		end := k.start + m.window
		if k.cur > 0 {
			end += m.window
		}
		res.ResetAfter = time.Duration(end - at + lag)
	}
	return res
}

// fmtCounter returns a Redis sliding counter key's value.
func fmtCounter(start, expiry, prev, cur int64) string {
	return strconv.FormatInt(start, 10) + ":" + strconv.FormatInt(expiry, 10) + ":" + strconv.FormatInt(prev, 10) + ":" + strconv.FormatInt(cur, 10)
}

// calendarModel is the reference calendar window: it finds a window by
// reading the wall clock in the zone at instants on a grid, and keeps each
// key's window and count, written for clarity rather than speed. It shares
// no code with the limiters.
type calendarModel struct {
	period CalendarPeriod
	loc    *time.Location
	first  time.Weekday
	limit  int64
	now    time.Time // the clock's reading, which may go backwards
	high   time.Time // the latest reading a decision was made at
	keys   map[string]*modelCalendarKey
}

// modelCalendarKey is a key's count in the window that starts at start.
type modelCalendarKey struct {
	start time.Time
	count int64
}

func newCalendarModel(limit int, cal Calendar, start time.Time) *calendarModel {
	loc := cal.Location
	if loc == nil {
		loc = time.UTC
	}
	return &calendarModel{period: cal.Period, loc: loc, first: cal.FirstWeekday, limit: int64(limit), now: start, high: start, keys: map[string]*modelCalendarKey{}}
}

// label is what the wall clock shows at t, to the period.
func (m *calendarModel) label(t time.Time) string {
	w := t.In(m.loc)
	switch m.period {
	case CalendarMinute:
		return w.Format("2006-01-02 15:04")
	case CalendarHour:
		return w.Format("2006-01-02 15")
	case CalendarDay:
		return w.Format("2006-01-02")
	case CalendarWeek:
		back := (int(w.Weekday()) - int(m.first) + 7) % 7
		y, mo, d := w.Date()
		return time.Date(y, mo, d-back, 12, 0, 0, 0, time.UTC).Format("2006-01-02")
	}
	return w.Format("2006-01")
}

// grid is the step at which every window boundary of the zones the tests
// use falls: a minute for minutes, 15 minutes otherwise (whole-minute
// instants of UTC).
func (m *calendarModel) grid() time.Duration {
	if m.period == CalendarMinute {
		return time.Minute
	}
	return 15 * time.Minute
}

// window returns the start and end of the window that holds t: the
// bounds of the run of grid instants around t that show t's label.
func (m *calendarModel) window(t time.Time) (start, end time.Time) {
	g := m.grid()
	l := m.label(t)
	start = t.Truncate(g)
	for m.label(start.Add(-g)) == l {
		start = start.Add(-g)
	}
	end = t.Truncate(g).Add(g)
	for m.label(end) == l {
		end = end.Add(g)
	}
	return start, end
}

// advance moves the model's clock by d, backwards for a negative d.
func (m *calendarModel) advance(d time.Duration) { m.now = m.now.Add(d) }

// allow decides n for key as the limiter must, at the latest time a
// decision was made at (time stands still while the clock is behind).
func (m *calendarModel) allow(key string, n int) Result {
	if m.now.After(m.high) {
		m.high = m.now
	}
	lag := m.high.Sub(m.now)
	start, end := m.window(m.high)
	k := m.keys[key]
	var count int64
	if k != nil && k.start.Equal(start) {
		count = k.count
	}
	res := Result{Limit: int(m.limit), Allowed: count+int64(n) <= m.limit}
	if res.Allowed && n > 0 {
		count += int64(n)
		m.keys[key] = &modelCalendarKey{start: start, count: count}
	}
	res.Remaining = int(max(m.limit-count, 0))
	if count > 0 {
		res.ResetAfter = end.Sub(m.high) + lag
	}
	if !res.Allowed {
		res.RetryAfter = res.ResetAfter
	}
	return res
}
