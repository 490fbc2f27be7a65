package bench

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"
)

// The memory configuration: 100 tokens per key refilling at 100 per second,
// so a key that took one token is full again 10 ms later and any key is full
// after memFill.
const (
	memCapacity = 100
	memRate     = 100.0 // tokens per second
	memFill     = time.Second
)

// refillTouches is how many keys are peeked at after the clock has moved past
// the fill time. With 64 shards, the first 1000 keys touch every shard of a
// ratelimit limiter (the chance of missing one is about 1e-5), and each shard
// drops its refilled keys on the first call it sees.
const refillTouches = 1000

// memoryCase inserts keys into one limiter and reports its footprint.
type memoryCase struct {
	// setup creates the limiter before the first heap reading, and returns
	// insert, which takes one token for a key, refill, which makes every key
	// full (moving a fake clock, or nothing where time cannot be faked) and
	// then peeks at keys, and done, which releases the limiter.
	setup func(b *testing.B) (insert func(key string), refill func(keys []string), done func())
}

// BenchmarkMemoryPerKey reports the heap each limiter holds for 1M keys that
// each took one token: B/key, the growth of HeapAlloc (after runtime.GC) over
// the insertion divided by 1e6, and B/key-after-refill, the same once every
// key's bucket is full again and refillTouches keys have been peeked at. The
// key strings are built before the first reading, so their bytes are not
// counted; the 16-byte string header each map entry holds is. It also reports
// ns/insert, the time to insert one new key.
//
// The measurement runs once per call of the sub-benchmark, whatever b.N is;
// the other b.N iterations do nothing. Run it with -benchtime 1x (run.sh
// does), which makes ns/op the cost of the whole measurement.
func BenchmarkMemoryPerKey(b *testing.B) {
	ctx := context.Background()
	cases := []struct {
		name string
		memoryCase
	}{
		{"ratelimit-TokenBucket", ratelimitMemoryCase(ctx, func(c ratelimit.Clock) (fakeClocked, error) {
			return ratelimit.NewTokenBucket(ratelimit.PerSecond(memRate), memCapacity, ratelimit.WithClock(c))
		})},
		{"ratelimit-GCRA", ratelimitMemoryCase(ctx, func(c ratelimit.Clock) (fakeClocked, error) {
			return ratelimit.NewGCRA(memCapacity, memFill, ratelimit.WithClock(c))
		})},
		{"ratelimit-FixedWindow", ratelimitMemoryCase(ctx, func(c ratelimit.Clock) (fakeClocked, error) {
			return ratelimit.NewFixedWindow(memCapacity, memFill, ratelimit.WithClock(c))
		})},
		{"ratelimit-SlidingCounter", ratelimitMemoryCase(ctx, func(c ratelimit.Clock) (fakeClocked, error) {
			return ratelimit.NewSlidingCounter(memCapacity, memFill, ratelimit.WithClock(c))
		})},
		{"ratelimit-CalendarWindow", ratelimitMemoryCase(ctx, func(c ratelimit.Clock) (fakeClocked, error) {
			return ratelimit.NewCalendarWindow(memCapacity, ratelimit.Calendar{Period: ratelimit.CalendarMinute}, ratelimit.WithClock(c))
		})},
		// A concurrency limiter of 100 in flight per key whose units come
		// back after a TTL of 1 s: Allow(k, 1) holds one unit (a lease no
		// one releases) until the TTL has passed, so each key holds one
		// lease; refill moves the clock past it.
		{"ratelimit-Concurrency", ratelimitMemoryCase(ctx, func(c ratelimit.Clock) (fakeClocked, error) {
			return ratelimit.NewConcurrency(memCapacity, memFill, ratelimit.WithClock(c))
		})},
		// The sliding log keeps an entry per allowed call: one per key
		// here, as every other row takes one token, and four per key in
		// the next row (four calls of one unit each, at one time).
		{"ratelimit-SlidingLog", ratelimitMemoryCase(ctx, func(c ratelimit.Clock) (fakeClocked, error) {
			return ratelimit.NewSlidingLog(memCapacity, memFill, ratelimit.WithClock(c))
		})},
		{"ratelimit-SlidingLog-4-entries", ratelimitMemoryCase(ctx, func(c ratelimit.Clock) (fakeClocked, error) {
			l, err := ratelimit.NewSlidingLog(memCapacity, memFill, ratelimit.WithClock(c))
			return entriesPerCall{l, 4}, err
		})},
		// memorystore reads the system clock and cannot be given another, so
		// its refill step only peeks (Get). It drops keys only in its sweep
		// goroutine, set here to run every 24h, so never during the
		// measurement. InitialAlloc is left at its default, 4096.
		{"sethvargo-memorystore", memoryCase{func(b *testing.B) (func(string), func([]string), func()) {
			s, err := memorystore.New(&memorystore.Config{
				Tokens:        memCapacity,
				Interval:      memFill,
				SweepInterval: 24 * time.Hour,
				SweepMinTTL:   24 * time.Hour,
			})
			if err != nil {
				b.Fatal(err)
			}
			insert := func(k string) {
				if _, _, _, ok, err := s.Take(ctx, k); err != nil || !ok {
					b.Fatalf("Take(%q) = %v, %v", k, ok, err)
				}
			}
			refill := func(keys []string) {
				for _, k := range keys {
					if _, _, err := s.Get(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
			}
			return insert, refill, func() { s.Close(ctx) }
		}}},
		{"x-time-rate-mutexmap", rateMapMemoryCase(func() rateMap { return newMutexRateMap(rate.Limit(memRate), memCapacity) })},
		{"x-time-rate-syncmap", rateMapMemoryCase(func() rateMap { return newSyncRateMap(rate.Limit(memRate), memCapacity) })},
	}

	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			keys := benchKeys(numMemoryKeys)
			b.ReportAllocs()
			var perKey, afterRefill, nsInsert float64
			first := true
			for b.Loop() {
				if !first {
					continue
				}
				first = false
				perKey, afterRefill, nsInsert = measureMemory(b, c.memoryCase, keys)
			}
			b.ReportMetric(perKey, "B/key")
			b.ReportMetric(afterRefill, "B/key-after-refill")
			b.ReportMetric(nsInsert, "ns/insert")
		})
	}
}

// measureMemory runs one memoryCase over keys and returns the heap it holds
// per key after the insertion and after the refill, and the time per insert.
func measureMemory(b *testing.B, c memoryCase, keys []string) (perKey, afterRefill, nsInsert float64) {
	insert, refill, done := c.setup(b)
	defer done()

	before := heapAlloc()
	start := time.Now()
	for _, k := range keys {
		insert(k)
	}
	elapsed := time.Since(start)
	inserted := heapAlloc()
	refill(keys[:refillTouches])
	refilled := heapAlloc()
	runtime.KeepAlive(keys)

	n := float64(len(keys))
	return (float64(inserted) - float64(before)) / n,
		(float64(refilled) - float64(before)) / n,
		float64(elapsed.Nanoseconds()) / n
}

// heapAlloc returns the bytes of live heap objects after a full collection.
func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// fakeClocked is a ratelimit limiter that tells its Policy, whose Window is
// how long it takes to be back to its full limit (a bucket's fill time, a
// GCRA's period, a fixed window's length): each of the in-process limiters.
type fakeClocked interface {
	ratelimit.Limiter
	Policy() ratelimit.Policy
}

// ratelimitMemoryCase measures a ratelimit limiter built by newLimiter on a
// fake clock: refill moves the clock past twice the fill time and peeks at
// the keys, so that every shard drops what has refilled.
func ratelimitMemoryCase(ctx context.Context, newLimiter func(ratelimit.Clock) (fakeClocked, error)) memoryCase {
	return memoryCase{func(b *testing.B) (func(string), func([]string), func()) {
		clock := ratelimittest.NewClock(time.Unix(1_700_000_000, 0))
		l, err := newLimiter(clock)
		if err != nil {
			b.Fatal(err)
		}
		insert := func(k string) {
			if res, err := l.Allow(ctx, k, 1); err != nil || !res.Allowed {
				b.Fatalf("Allow(%q) = %+v, %v", k, res, err)
			}
		}
		refill := func(keys []string) {
			clock.Advance(2*l.Policy().Window + time.Second)
			for _, k := range keys {
				if _, err := l.Allow(ctx, k, 0); err != nil {
					b.Fatal(err)
				}
			}
		}
		return insert, refill, func() { runtime.KeepAlive(l) }
	}}
}

// rateMap is a hand-rolled per-key map of x/time/rate limiters.
type rateMap interface {
	allowN(key string, now time.Time, n int) bool
}

// rateMapMemoryCase measures a rateMap made by newMap. Such maps never drop a
// limiter; the refill step peeks with allowN(t, 0) at a time past the fill
// time.
func rateMapMemoryCase(newMap func() rateMap) memoryCase {
	return memoryCase{func(b *testing.B) (func(string), func([]string), func()) {
		m := newMap()
		t0 := time.Unix(1_700_000_000, 0)
		insert := func(k string) {
			if !m.allowN(k, t0, 1) {
				b.Fatalf("allowN(%q) denied", k)
			}
		}
		refill := func(keys []string) {
			for _, k := range keys {
				m.allowN(k, t0.Add(2*memFill), 0)
			}
		}
		return insert, refill, func() { runtime.KeepAlive(m) }
	}}
}

// entriesPerCall is a sliding log whose Allow of n > 0 is calls Allows of
// n, so that each key inserted holds calls entries.
type entriesPerCall struct {
	*ratelimit.SlidingLog
	calls int
}

func (e entriesPerCall) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	if n == 0 {
		return e.SlidingLog.Allow(ctx, key, 0)
	}
	var res ratelimit.Result
	var err error
	for range e.calls {
		if res, err = e.SlidingLog.Allow(ctx, key, n); err != nil || !res.Allowed {
			break
		}
	}
	return res, err
}
