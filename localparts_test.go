package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notLocal is a Limiter of no engine this package knows.
type notLocal struct{}

// Allow allows nothing and says nothing.
func (notLocal) Allow(context.Context, string, int) (Result, error) { return Result{}, nil }

func TestNewLocalPartsTakesOnlyInProcessLimiters(t *testing.T) {
	tb, err := NewTokenBucket(PerSecond(1), 1)
	require.NoError(t, err)
	for _, c := range []struct {
		limiter Limiter
		want    string
	}{
		{notLocal{}, "part 1 is a ratelimit.notLocal, not a *TokenBucket, *GCRA, *FixedWindow, *SlidingLog, *SlidingCounter, *CalendarWindow or *Concurrency"},
		{&TokenBucket{}, "part 1 is a nil or zero-value *ratelimit.TokenBucket"},
		{&GCRA{}, "part 1 is a nil or zero-value *ratelimit.GCRA"},
		{&FixedWindow{}, "part 1 is a nil or zero-value *ratelimit.FixedWindow"},
		{&CalendarWindow{}, "part 1 is a nil or zero-value *ratelimit.CalendarWindow"},
	} {
		_, err := newLocalParts([]Limiter{tb, c.limiter})
		assert.EqualError(t, err, c.want)
		_, err = NewComposite(Part{Name: "a", Limiter: tb}, Part{Name: "b", Limiter: c.limiter})
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, c.want)
	}
}

func TestLocalCompositeTakesFromEveryPartOrNone(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	bucket, err := NewTokenBucket(PerSecond(1), 2, WithClock(clock))
	require.NoError(t, err)
	window, err := NewFixedWindow(3, time.Hour, WithClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "bucket", Limiter: bucket}, Part{Name: "window", Limiter: window})
	require.NoError(t, err)

	res, parts, err := decideParts(ctx, c, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, time.Hour), res)
	assert.Equal(t, []Result{ok(2, 0, 2*time.Second), ok(3, 1, time.Hour)}, parts)

	// The bucket denies; the window would allow, and reports its state
	// untouched, with nothing to wait for.
	res, parts, err = decideParts(ctx, c, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, no(2, 0, time.Second, time.Hour), res)
	assert.Equal(t, []Result{no(2, 0, time.Second, 2*time.Second), no(3, 1, 0, time.Hour)}, parts)
	got, err := window.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 1, time.Hour), got, "the window lost nothing to the denial")

	// A peek takes nothing, whatever the parts hold.
	_, parts, err = decideParts(ctx, c, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, []Result{ok(2, 0, 2*time.Second), ok(3, 1, time.Hour)}, parts)

	// The window denies; the bucket would allow.
	clock.Advance(2 * time.Second)
	_, parts, err = decideParts(ctx, c, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, []Result{no(2, 2, 0, 0), no(3, 1, time.Hour-2*time.Second, time.Hour-2*time.Second)}, parts)
	got, err = bucket.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 2, 0), got, "the bucket lost nothing to the denial")

	// Settle, Refund and Reset apply to every part.
	res, err = c.Settle(ctx, "k", 1, 3)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, time.Hour-2*time.Second), res)
	_, parts, err = decideParts(ctx, c, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, []Result{ok(2, 0, 2*time.Second), ok(3, 0, time.Hour-2*time.Second)}, parts)
	res, err = c.Refund(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 1, time.Hour-2*time.Second), res, "the bucket full, the window at 2 of 3")
	require.NoError(t, c.Reset(ctx, "k"))
	_, parts, err = decideParts(ctx, c, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, []Result{ok(2, 2, 0), ok(3, 3, 0)}, parts)
	assert.Equal(t, 0, bucket.tats.len()+window.windows.len())
}

// decideParts decides n for key through c, and returns the Decision's
// Result and every part's (its Parts).
func decideParts(ctx context.Context, c *Composite, key string, n int) (Result, []Result, error) {
	d, err := c.Decide(ctx, key, n)
	return d.Result, d.Parts, err
}

// keysOnOneShard returns two keys that fall on one shard of table.
func keysOnOneShard[V any](t *testing.T, table *keyTable[V]) (string, string) {
	t.Helper()
	seen := map[*tableShard[V]]string{}
	for i := range 10 * shardCount {
		key := "key" + strconv.Itoa(i)
		sh := table.shard(key)
		if other, ok := seen[sh]; ok {
			return other, key
		}
		seen[sh] = key
	}
	t.Fatal("no two keys on one shard")
	return "", ""
}

// within fails t unless f returns within a minute: a deadlock fails the test
// rather than hanging it. f runs on another goroutine, so it checks with
// assert, not require.
func within(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("deadlock: no return within a minute")
	}
}

// TestLocalCompositeOfOneLimiterOnTwoKeysOfOneShard checks that a shard two
// parts' keys fall on is locked once, and that each part's write finds its
// key where the other part's write left it.
func TestLocalCompositeOfOneLimiterOnTwoKeysOfOneShard(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	bucket, err := NewTokenBucket(PerSecond(1), 3, WithClock(clock))
	require.NoError(t, err)
	window, err := NewFixedWindow(3, time.Minute, WithClock(clock))
	require.NoError(t, err)
	for _, l := range []Adjuster{bucket, window} {
		var a, b string
		if l == Adjuster(bucket) {
			a, b = keysOnOneShard(t, bucket.tats)
		} else {
			a, b = keysOnOneShard(t, window.windows)
		}
		for _, order := range [][2]string{{a, b}, {b, a}} {
			c, err := NewComposite(
				Part{Name: "first", Limiter: l, Key: func(string) string { return order[0] }},
				Part{Name: "second", Limiter: l, Key: func(string) string { return order[1] }})
			require.NoError(t, err)
			require.NoError(t, l.Reset(ctx, a))
			require.NoError(t, l.Reset(ctx, b))
			// The second key is the shard's hot key; the first is not held.
			_, err = l.Allow(ctx, order[1], 1)
			require.NoError(t, err)
			within(t, func() {
				res, err := c.Allow(ctx, "x", 1)
				assert.NoError(t, err)
				assert.True(t, res.Allowed)
				_, err = c.Settle(ctx, "x", 0, 1)
				assert.NoError(t, err)
				_, err = c.Refund(ctx, "x", 0)
				assert.NoError(t, err)
			})
			first, err := l.Allow(ctx, order[0], 0)
			require.NoError(t, err)
			assert.Equal(t, 1, first.Remaining, "%T: %q", l, order[0])
			second, err := l.Allow(ctx, order[1], 0)
			require.NoError(t, err)
			assert.Equal(t, 0, second.Remaining, "%T: %q", l, order[1])
			within(t, func() { assert.NoError(t, c.Reset(ctx, "x")) })
			first, err = l.Allow(ctx, order[0], 0)
			require.NoError(t, err)
			assert.Equal(t, 3, first.Remaining)
		}
	}
}

// TestLocalCompositesSharingLimitersUnderLoad hammers two Composites of the
// same token bucket and fixed window, in opposite orders, from 64
// goroutines, with other keys and adjustments besides, round after round of
// a clock that stands still within a round. Each round lets through exactly
// what the stricter part has, and a part never loses a unit to a call the
// other denied.
func TestLocalCompositesSharingLimitersUnderLoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	bucket, err := NewTokenBucket(PerSecond(10), 10, WithClock(clock))
	require.NoError(t, err)
	window, err := NewFixedWindow(100, time.Hour, WithClock(clock))
	require.NoError(t, err)
	forward, err := NewComposite(Part{Name: "bucket", Limiter: bucket}, Part{Name: "window", Limiter: window})
	require.NoError(t, err)
	backward, err := NewComposite(Part{Name: "window", Limiter: window}, Part{Name: "bucket", Limiter: bucket})
	require.NoError(t, err)
	tenant := func(key string) string { return "tenant:" + key }
	derived, err := NewComposite(Part{Name: "window", Limiter: window, Key: tenant}, Part{Name: "bucket", Limiter: bucket})
	require.NoError(t, err)

	const goroutines, calls = 64, 40
	total := 0
	for round := range 14 {
		var allowed atomic.Int64
		within(t, func() {
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(round), uint64(g)))
					for i := range calls {
						c := forward
						if (g+i)%2 == 1 {
							c = backward
						}
						res, err := c.Allow(ctx, "hot", 1)
						if !assert.NoError(t, err) {
							return
						}
						if res.Allowed {
							allowed.Add(1)
						}
						// Other keys, on every shard and in every order.
						key := strconv.Itoa(r.IntN(200))
						switch r.IntN(4) {
						case 0:
							_, err = derived.Allow(ctx, key, r.IntN(3))
						case 1:
							_, err = c.Settle(ctx, key, r.IntN(3), r.IntN(5))
						case 2:
							err = derived.Reset(ctx, key)
						default:
							_, err = c.Allow(ctx, key, 1)
						}
						assert.NoError(t, err)
					}
				})
			}
			wg.Wait()
		})
		// The bucket holds 10 a round; the window 100 in all.
		want := min(10, 100-total)
		total += want
		require.Equal(t, int64(want), allowed.Load(), "round %d", round)
		_, parts, err := decideParts(ctx, forward, "hot", 0)
		require.NoError(t, err)
		assert.Equal(t, 10-want, parts[0].Remaining, "round %d: the bucket", round)
		assert.Equal(t, 100-total, parts[1].Remaining, "round %d: the window", round)
		clock.Advance(time.Second)
	}
}

// TestLocalPartsReadEachClockOnce checks that parts on one clock share one
// reading, which is exactly what each would have read, and that parts on
// other clocks read their own.
func TestLocalPartsReadEachClockOnce(t *testing.T) {
	counting := &countingClock{Clock: ratelimittest.NewClock(epoch)}
	other := ratelimittest.NewClock(epoch.Add(time.Hour))
	var limiters []Limiter
	for _, c := range []Clock{counting, other, counting, valueClock{counting.Clock}} {
		l, err := NewGCRA(2, time.Second, WithClock(c))
		require.NoError(t, err)
		limiters = append(limiters, l)
		counting.Advance(time.Second)
		other.Advance(time.Second)
	}
	l, err := newLocalParts(limiters)
	require.NoError(t, err)
	assert.Equal(t, []int{0, 1, 0, 3}, []int{l.parts[0].from, l.parts[1].from, l.parts[2].from, l.parts[3].from})

	counting.calls.Store(0)
	results := make([]Result, 4)
	l.allow([]string{"k", "k", "k", "k"}, []int{1, 1, 1, 1}, nil, results, nil, false)
	assert.Equal(t, int64(1), counting.calls.Load(), "one reading for parts 0 and 2")
	var calls [4]partCall
	var order [4]int
	l.lock([]string{"k", "k", "k", "k"}, calls[:], order[:])
	unlock(calls[:], order[:])
	// Each limiter was made a second after the one before, and reads the
	// time since.
	assert.Equal(t, []int64{int64(4 * time.Second), int64(3 * time.Second), int64(2 * time.Second), int64(time.Second)},
		[]int64{calls[0].reading, calls[1].reading, calls[2].reading, calls[3].reading})

	// On the system clock, the parts share one monotonic reading, offset
	// by the time between their limiters' starts.
	var system []Limiter
	for range 3 {
		b, err := NewTokenBucket(PerSecond(1), 1)
		require.NoError(t, err)
		system = append(system, b)
	}
	l, err = newLocalParts(system)
	require.NoError(t, err)
	var before, after [3]int64
	for i, b := range system {
		before[i] = b.(*TokenBucket).base.elapsed()
	}
	l.lock([]string{"k", "k", "k"}, calls[:3], order[:3])
	unlock(calls[:3], order[:3])
	for i, b := range system {
		after[i] = b.(*TokenBucket).base.elapsed()
	}
	for i := range system {
		assert.Equal(t, 0, l.parts[i].from)
		assert.LessOrEqual(t, before[i], calls[i].reading, "part %d", i)
		assert.LessOrEqual(t, calls[i].reading, after[i], "part %d", i)
		assert.Equal(t, int64(system[i].(*TokenBucket).base.start.Sub(system[0].(*TokenBucket).base.start)), calls[0].reading-calls[i].reading, "part %d", i)
	}
}

// countingClock is a ratelimittest.Clock that counts its readings.
type countingClock struct {
	*ratelimittest.Clock
	calls atomic.Int64
}

// Now counts the reading and returns the ratelimittest.Clock's.
func (c *countingClock) Now() time.Time {
	c.calls.Add(1)
	return c.Clock.Now()
}

// valueClock is a Clock that is not a pointer, so never found equal to
// another.
type valueClock struct{ c *ratelimittest.Clock }

// Now returns the ratelimittest.Clock's reading.
func (v valueClock) Now() time.Time { return v.c.Now() }

// partModel is the reference model of one in-process limiter: a token bucket
// (GCRA) of limit tokens, one every interval ns, or a fixed window of limit
// per length ns, kept as plainly as can be, in integer ns since epoch, that
// a Settle takes at most debt limits into debt (see WithMaxDebt; below 0,
// without bound). It shares no code with the limiters.
type partModel struct {
	window   bool
	limit    int64
	interval int64 // ns per token
	length   int64 // ns per window
	debt     int64 // limits
	tats     map[string]int64
	wins     map[string]partWindow
}

// partWindow is a key's window: when it ends and what it has counted.
type partWindow struct{ end, count int64 }

// newBucketPart and newWindowPart return models of a token bucket (or GCRA)
// and a fixed window.
func newBucketPart(limit int, interval time.Duration) *partModel {
	return &partModel{limit: int64(limit), interval: int64(interval), debt: DefaultMaxDebt, tats: map[string]int64{}}
}

func newWindowPart(limit int, length time.Duration) *partModel {
	return &partModel{window: true, limit: int64(limit), length: int64(length), debt: DefaultMaxDebt, wins: map[string]partWindow{}}
}

// withDebt sets the model's bound on debt, in limits, and returns it.
func (m *partModel) withDebt(limits int) *partModel {
	m.debt = int64(limits)
	return m
}

// randomDebt returns a bound on debt for a limiter under test, and its
// options: the default (no option), none, 0, 1, 2 or 3 limits.
func randomDebt(r *rand.Rand) (int, []Option) {
	switch x := r.IntN(6); x {
	case 0:
		return DefaultMaxDebt, nil
	case 1:
		return UnboundedDebt, []Option{WithMaxDebt(UnboundedDebt)}
	default:
		return x - 2, []Option{WithMaxDebt(x - 2)}
	}
}

// bucketResult describes a key whose bucket is full at tat.
func (m *partModel) bucketResult(allowed bool, tat, now int64) Result {
	tau := m.limit * m.interval
	return Result{Allowed: allowed, Limit: int(m.limit), Remaining: int(max(tau-(tat-now), 0) / m.interval), ResetAfter: time.Duration(tat - now)}
}

// windowResult describes a key whose open window is w.
func (m *partModel) windowResult(allowed bool, w partWindow, now int64) Result {
	res := Result{Allowed: allowed, Limit: int(m.limit), Remaining: int(max(m.limit-w.count, 0))}
	if w.count > 0 {
		res.ResetAfter = time.Duration(w.end - now)
	}
	return res
}

// openWindow returns key's window open at now, or the zero partWindow.
func (m *partModel) openWindow(key string, now int64) partWindow {
	if w := m.wins[key]; w.end > now && w.count > 0 {
		return w
	}
	return partWindow{}
}

// take decides n for key at now without changing anything. It returns
// whether n is allowed, the Results for the three outcomes (taken, left
// untouched by another part's denial, denied), and the change to make when
// every part allows.
func (m *partModel) take(key string, n, now int64) (allowed bool, taken, untouched, denied Result, commit func()) {
	if m.window {
		w := m.openWindow(key, now)
		next := w
		if n > 0 {
			if next.count == 0 {
				next.end = now + m.length
			}
			next.count += n
		}
		denied = m.windowResult(false, w, now)
		denied.RetryAfter = denied.ResetAfter
		return n == 0 || w.count+n <= m.limit, m.windowResult(true, next, now), m.windowResult(false, w, now), denied,
			func() {
				if n > 0 {
					m.wins[key] = next
				}
			}
	}
	tat := max(m.tats[key], now)
	next := tat + n*m.interval
	denied = m.bucketResult(false, tat, now)
	denied.RetryAfter = time.Duration(next - m.limit*m.interval - now)
	return n == 0 || next-now <= m.limit*m.interval, m.bucketResult(true, next, now), m.bucketResult(false, tat, now), denied,
		func() { m.tats[key] = next }
}

// settle takes d more for key at now (gives -d back), the units having been
// taken at takenAt when hasTaken, and returns the key's Result.
func (m *partModel) settle(key string, d, now int64, takenAt int64, hasTaken bool) Result {
	if !m.window {
		tat := max(m.tats[key], now)
		if d > 0 {
			// At most debt limits below empty; a key further in debt
			// stays there.
			most := now + (1+m.debt)*m.limit*m.interval
			if m.debt < 0 || tat+d*m.interval <= most {
				tat += d * m.interval
			} else {
				tat = max(tat, most)
			}
		} else {
			tat = max(tat+d*m.interval, now)
		}
		m.tats[key] = tat
		return m.bucketResult(true, tat, now)
	}
	w := m.openWindow(key, now)
	switch {
	case d > 0:
		if w.count == 0 {
			w.end = now + m.length
		}
		most := (1 + m.debt) * m.limit
		if m.debt < 0 || w.count+d <= most {
			w.count += d
		} else {
			w.count = max(w.count, most)
		}
		m.wins[key] = w
	case d < 0 && w.count > 0 && (!hasTaken || takenAt >= w.end-m.length):
		w.count += d
		m.wins[key] = w
		if w.count <= 0 {
			delete(m.wins, key)
			w = partWindow{}
		}
	}
	return m.windowResult(true, w, now)
}

// reset forgets key.
func (m *partModel) reset(key string) {
	delete(m.tats, key)
	delete(m.wins, key)
}

// compositeModel is the reference of a Composite of parts.
type compositeModel struct {
	parts   []*partModel
	keys    []func(string) string // nil: the call's key
	perCall []bool
}

// key returns part i's key for the call's key.
func (c *compositeModel) key(i int, key string) string {
	if c.keys[i] == nil {
		return key
	}
	return c.keys[i](key)
}

// allow decides n for key at now, and returns each part's Result.
func (c *compositeModel) allow(key string, n int, now int64) []Result {
	parts := make([]Result, len(c.parts))
	untouched := make([]Result, len(c.parts))
	var commits []func()
	all := true
	for i, p := range c.parts {
		cost := int64(n)
		if c.perCall[i] {
			cost = min(cost, 1)
		}
		allowed, taken, u, denied, commit := p.take(c.key(i, key), cost, now)
		parts[i], untouched[i] = taken, u
		if !allowed {
			parts[i] = denied
		}
		commits = append(commits, commit)
		all = all && allowed
	}
	for i := range parts {
		switch {
		case all:
			commits[i]()
		case parts[i].Allowed:
			parts[i] = untouched[i]
		}
	}
	return parts
}

// settle settles taken by cost for key at now, and returns each part's
// Result.
func (c *compositeModel) settle(key string, taken, cost int, now, takenAt int64, hasTaken bool) []Result {
	parts := make([]Result, len(c.parts))
	for i, p := range c.parts {
		d := int64(cost - taken)
		if c.perCall[i] {
			d = int64(min(cost, 1) - min(taken, 1))
		}
		parts[i] = p.settle(c.key(i, key), d, now, takenAt, hasTaken)
	}
	return parts
}

// reset forgets every part's key.
func (c *compositeModel) reset(key string) {
	for i, p := range c.parts {
		p.reset(c.key(i, key))
	}
}

// requireCombined requires got to be a Composite's Result of parts: one
// part's Limit and Remaining (which part binds is the Composite's rule, not
// the engine's), Allowed only if every part's is, and the longest waits.
func requireCombined(t *testing.T, parts []Result, got Result, msg string) {
	t.Helper()
	want := Result{Allowed: true}
	found := false
	for _, r := range parts {
		want.Allowed = want.Allowed && r.Allowed
		want.RetryAfter = max(want.RetryAfter, r.RetryAfter)
		want.ResetAfter = max(want.ResetAfter, r.ResetAfter)
		found = found || r.Limit == got.Limit && r.Remaining == got.Remaining
	}
	require.True(t, found, "%s: %+v is none of the parts' %+v", msg, got, parts)
	want.Limit, want.Remaining = got.Limit, got.Remaining
	require.Equal(t, want, got, msg)
}

// exactIntervals are times per token whose rate in tokens per second gives
// them back exactly.
var exactIntervals = []time.Duration{time.Millisecond, 2 * ms, 4 * ms, 5 * ms, 8 * ms, 10 * ms, 20 * ms, 25 * ms, 40 * ms, 50 * ms, 100 * ms, 125 * ms, 200 * ms, 250 * ms, 500 * ms, time.Second}

// TestLocalCompositeMatchesTheModel runs random streams of Allow, Refund,
// Settle and Reset over a few keys on Composites of two to four parts (a
// token bucket, a GCRA on a key derived from the call's, sometimes counting
// calls, a fixed window, and sometimes the token bucket again on another
// derived key), with the clock moving forward, and compares every Result
// with the model's, step by step.
func TestLocalCompositeMatchesTheModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(21, 22))
	tenant := func(key string) string { return "tenant-" + key[:1] }
	other := func(key string) string { return "other-" + key }
	for round := range 60 {
		clock := ratelimittest.NewClock(epoch)
		bucketLimit, bucketInterval := 1+r.IntN(5), exactIntervals[r.IntN(len(exactIntervals))]
		gcraLimit, gcraInterval := 2+r.IntN(6), time.Duration(1+r.Int64N(int64(time.Second)))
		windowLimit, windowLength := 2+r.IntN(5), time.Duration(1+r.Int64N(int64(3*time.Second)))
		// Each part with its own bound on debt.
		bucketDebt, bucketOpts := randomDebt(r)
		gcraDebt, gcraOpts := randomDebt(r)
		windowDebt, windowOpts := randomDebt(r)
		bucket, err := NewTokenBucket(Every(bucketInterval), bucketLimit, append(bucketOpts, WithClock(clock))...)
		require.NoError(t, err)
		gcra, err := NewGCRA(gcraLimit, time.Duration(gcraLimit)*gcraInterval, append(gcraOpts, WithClock(clock))...)
		require.NoError(t, err)
		window, err := NewFixedWindow(windowLimit, windowLength, append(windowOpts, WithClock(clock))...)
		require.NoError(t, err)
		bucketModel := newBucketPart(bucketLimit, bucketInterval).withDebt(bucketDebt)
		model := &compositeModel{}
		var parts []Part
		add := func(name string, l Limiter, m *partModel, key func(string) string, perCall bool) {
			parts = append(parts, Part{Name: name, Limiter: l, Key: key, PerCall: perCall})
			model.parts = append(model.parts, m)
			model.keys = append(model.keys, key)
			model.perCall = append(model.perCall, perCall)
		}
		add("bucket", bucket, bucketModel, nil, false)
		add("gcra", gcra, newBucketPart(gcraLimit, gcraInterval).withDebt(gcraDebt), tenant, round%3 == 1)
		if round%4 != 0 {
			add("window", window, newWindowPart(windowLimit, windowLength).withDebt(windowDebt), nil, false)
		}
		if round%2 == 1 {
			add("bucket-again", bucket, bucketModel, other, false)
		}
		c, err := NewComposite(parts...)
		require.NoError(t, err)
		tightest := bucketLimit
		if round%4 != 0 {
			tightest = min(tightest, windowLimit)
		}
		if round%3 != 1 {
			tightest = min(tightest, gcraLimit)
		}

		var now int64
		var times []int64 // when each step ran
		for step := range 400 {
			if r.IntN(3) == 0 {
				d := r.Int64N(int64(bucketInterval) * 2)
				if r.IntN(10) == 0 {
					d = r.Int64N(int64(3 * time.Second))
				}
				clock.Advance(time.Duration(d))
				now += d
			}
			times = append(times, now)
			key := []string{"a1", "a2", "b1"}[r.IntN(3)]
			msg := fmt.Sprintf("round %d step %d at %v", round, step, time.Duration(now))
			switch x := r.IntN(10); {
			case x < 5:
				n := r.IntN(tightest + 1)
				if r.IntN(20) == 0 {
					n = tightest + 1
					_, err := c.Allow(ctx, key, n)
					require.ErrorIs(t, err, ErrCostExceedsLimit, msg)
					continue
				}
				msg += fmt.Sprintf(": Decide(%q, %d)", key, n)
				want := model.allow(key, n, now)
				got, gotParts, err := decideParts(ctx, c, key, n)
				require.NoError(t, err, msg)
				require.Equal(t, want, gotParts, msg)
				requireCombined(t, want, got, msg)
			case x < 9:
				taken, cost := r.IntN(tightest+1), r.IntN(2*tightest+3)
				if r.IntN(8) == 0 {
					cost = r.IntN(6 * tightest) // deep into debt
				}
				if x < 7 {
					cost = 0 // a refund
				}
				var opts []AdjustOption
				takenAt, hasTaken := int64(0), r.IntN(2) == 0
				if hasTaken {
					takenAt = times[r.IntN(len(times))]
					opts = append(opts, TakenAt(epoch.Add(time.Duration(takenAt))))
				}
				msg += fmt.Sprintf(": Settle(%q, %d, %d), taken at %v", key, taken, cost, time.Duration(takenAt))
				want := model.settle(key, taken, cost, now, takenAt, hasTaken)
				got, err := c.Settle(ctx, key, taken, cost, opts...)
				require.NoError(t, err, msg)
				requireCombined(t, want, got, msg)
				// Every part's state after, by a peek.
				_, gotParts, err := decideParts(ctx, c, key, 0)
				require.NoError(t, err, msg)
				require.Equal(t, model.allow(key, 0, now), gotParts, msg)
			default:
				model.reset(key)
				require.NoError(t, c.Reset(ctx, key), msg)
			}
		}
	}
}

// TestInProcessAdjustersMatchTheModel runs random streams of Allow, Refund,
// Settle and Reset on each in-process limiter alone, and compares every
// Result with the model's.
func TestInProcessAdjustersMatchTheModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(23, 24))
	for round := range 60 {
		clock := ratelimittest.NewClock(epoch)
		limit := 1 + r.IntN(6)
		var a Adjuster
		var m *partModel
		var err error
		var step int64
		debt, opts := randomDebt(r)
		opts = append(opts, WithClock(clock))
		switch round % 3 {
		case 0:
			interval := exactIntervals[r.IntN(len(exactIntervals))]
			a, err = NewTokenBucket(Every(interval), limit, opts...)
			m, step = newBucketPart(limit, interval), int64(interval)
		case 1:
			interval := time.Duration(1 + r.Int64N(int64(time.Second)))
			a, err = NewGCRA(limit, time.Duration(limit)*interval, opts...)
			m, step = newBucketPart(limit, interval), int64(interval)
		default:
			length := time.Duration(1 + r.Int64N(int64(3*time.Second)))
			a, err = NewFixedWindow(limit, length, opts...)
			m, step = newWindowPart(limit, length), int64(length)/int64(limit)
		}
		require.NoError(t, err)
		m.withDebt(debt)
		var now int64
		var times []int64
		for i := range 400 {
			if r.IntN(3) == 0 {
				d := r.Int64N(2*step + 1)
				clock.Advance(time.Duration(d))
				now += d
			}
			times = append(times, now)
			key := []string{"a", "b"}[r.IntN(2)]
			msg := fmt.Sprintf("round %d (%T) step %d at %v", round, a, i, time.Duration(now))
			switch x := r.IntN(10); {
			case x < 5:
				n := r.IntN(limit + 1)
				allowed, taken, _, denied, commit := m.take(key, int64(n), now)
				want := denied
				if allowed {
					want = taken
					commit()
				}
				got, err := a.Allow(ctx, key, n)
				require.NoError(t, err, msg)
				require.Equal(t, want, got, "%s: Allow(%q, %d)", msg, key, n)
			case x < 9:
				taken, cost := r.IntN(limit+1), r.IntN(2*limit+3)
				if r.IntN(8) == 0 {
					cost = r.IntN(6 * limit) // deep into debt
				}
				if x < 7 {
					cost = 0
				}
				var opts []AdjustOption
				takenAt, hasTaken := int64(0), r.IntN(2) == 0
				if hasTaken {
					takenAt = times[r.IntN(len(times))]
					opts = append(opts, TakenAt(epoch.Add(time.Duration(takenAt))))
				}
				want := m.settle(key, int64(cost-taken), now, takenAt, hasTaken)
				got, err := a.Settle(ctx, key, taken, cost, opts...)
				require.NoError(t, err, msg)
				require.Equal(t, want, got, "%s: Settle(%q, %d, %d)", msg, key, taken, cost)
			default:
				m.reset(key)
				require.NoError(t, a.Reset(ctx, key), msg)
			}
		}
	}
}
