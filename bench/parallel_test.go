package bench

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"
)

// The many-keys configuration: a burst of 1<<20 tokens refilling at one token
// per second. Every key is touched once before the timer starts, and from then
// on each call pushes the key further from full, so no key refills (and the
// ratelimit limiters drop none) during the run, and every call is allowed
// until a key has been asked more than 1<<20 times. The benchmark times the
// decision for a key that already has state: find it, update it.
const (
	manyCapacity = 1 << 20
	manyRate     = 1.0                                       // tokens per second
	manyPeriod   = time.Duration(manyCapacity) * time.Second // GCRA period, memorystore interval
)

// slidingManyLimit is the limit per second of BenchmarkManyKeysParallel's
// sliding log.
const slidingManyLimit = 8

// parallelGoroutines is how many goroutines BenchmarkManyKeysParallel wants.
const parallelGoroutines = 2

// strides are the steps the goroutines take through the keys; each is prime
// and does not divide numParallelKeys, so each goroutine visits every key, in
// its own order.
var strides = [...]int{7919, 104729, 1299709, 15485863}

// BenchmarkManyKeysParallel is two goroutines deciding one token at a time for
// 100k keys that already exist. b.RunParallel starts parallelism × GOMAXPROCS
// goroutines; SetParallelism(1) on this 2-core machine (GOMAXPROCS 2) makes
// that exactly 2. The goroutines metric reports how many actually ran, so a
// run on another machine (or with -cpu) shows it. Goroutine g starts at key
// g·100000/goroutines and walks with stride strides[g].
func BenchmarkManyKeysParallel(b *testing.B) {
	ctx := context.Background()
	keys := benchKeys(numParallelKeys)

	b.Run("ratelimit-TokenBucket", func(b *testing.B) {
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(manyRate), manyCapacity)
		runParallelRatelimit(b, keys, l, err)
	})

	b.Run("ratelimit-GCRA", func(b *testing.B) {
		l, err := ratelimit.NewGCRA(manyCapacity, manyPeriod)
		runParallelRatelimit(b, keys, l, err)
	})

	b.Run("ratelimit-FixedWindow", func(b *testing.B) {
		l, err := ratelimit.NewFixedWindow(manyCapacity, manyPeriod)
		runParallelRatelimit(b, keys, l, err)
	})

	// The sliding log of slidingManyLimit per second per key, each key's
	// log filled to the limit (an entry per unit) before the timer starts: at this machine's
	// 100-300 ns a call the goroutines see each key tens of times a
	// second, so every log stays full and slides, most calls are denied
	// (reading the oldest entry) and each allowed one drops an entry and
	// appends one. The limiter is built and filled once, and kept across
	// the runs b.Run makes to size b.N.
	var slidingLog *ratelimit.SlidingLog
	b.Run("ratelimit-SlidingLog-full", func(b *testing.B) {
		if slidingLog == nil {
			l, err := ratelimit.NewSlidingLog(slidingManyLimit, time.Second)
			if err != nil {
				b.Fatal(err)
			}
			for range slidingManyLimit {
				for _, k := range keys {
					if _, err := l.Allow(ctx, k, 1); err != nil {
						b.Fatal(err)
					}
				}
			}
			// Two windows of calls more, so that the entries of the
			// filling, taken within about a second, have left and been
			// replaced at the pace of the timed calls.
			for i, end := 0, time.Now().Add(2*time.Second); time.Now().Before(end); i = (i + strides[0]) % len(keys) {
				if _, err := l.Allow(ctx, keys[i], 1); err != nil {
					b.Fatal(err)
				}
			}
			slidingLog = l
		}
		runParallelKeys(b, keys, func(k string) bool {
			res, err := slidingLog.Allow(ctx, k, 1)
			return err == nil && res.Allowed
		})
	})

	b.Run("sethvargo-memorystore", func(b *testing.B) {
		s, err := memorystore.New(&memorystore.Config{
			Tokens:        manyCapacity,
			Interval:      manyPeriod,
			SweepInterval: 24 * time.Hour,
			SweepMinTTL:   24 * time.Hour,
		})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(ctx)
		for _, k := range keys {
			if _, _, _, _, err := s.Take(ctx, k); err != nil {
				b.Fatal(err)
			}
		}
		runParallelKeys(b, keys, func(k string) bool {
			_, _, _, ok, err := s.Take(ctx, k)
			return err == nil && ok
		})
	})

	b.Run("x-time-rate-mutexmap", func(b *testing.B) {
		m := newMutexRateMap(rate.Limit(manyRate), manyCapacity)
		for _, k := range keys {
			m.allowN(k, time.Now(), 1)
		}
		runParallelKeys(b, keys, func(k string) bool {
			return m.allowN(k, time.Now(), 1)
		})
	})

	b.Run("x-time-rate-syncmap", func(b *testing.B) {
		m := newSyncRateMap(rate.Limit(manyRate), manyCapacity)
		for _, k := range keys {
			m.allowN(k, time.Now(), 1)
		}
		runParallelKeys(b, keys, func(k string) bool {
			return m.allowN(k, time.Now(), 1)
		})
	})
}

// runParallelKeys times allow over keys in parallelGoroutines goroutines, each
// walking all the keys with its own offset and stride, and reports the share
// of calls allowed, the number of goroutines that ran and the allocations
// per million calls.
func runParallelKeys(b *testing.B, keys []string, allow func(key string) bool) {
	procs := runtime.GOMAXPROCS(0)
	parallelism := max(1, parallelGoroutines/procs)
	if parallelism*procs != parallelGoroutines {
		b.Logf("GOMAXPROCS is %d: b.RunParallel will start %d goroutines, not %d", procs, parallelism*procs, parallelGoroutines)
	}
	b.SetParallelism(parallelism)
	goroutines := parallelism * procs

	var nextID, started, allowed atomic.Int64
	var before, after runtime.MemStats
	b.ReportAllocs()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(nextID.Add(1) - 1)
		started.Add(1)
		n := len(keys)
		stride := strides[g%len(strides)] % n
		i := (g % goroutines) * n / goroutines
		ok := int64(0)
		for pb.Next() {
			if allow(keys[i]) {
				ok++
			}
			i += stride
			if i >= n {
				i -= n
			}
		}
		allowed.Add(ok)
	})
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(allowed.Load())/float64(b.N), "allowed/op")
	b.ReportMetric(float64(started.Load()), "goroutines")
	// allocs/op rounds down to a whole number; this shows what it hides.
	b.ReportMetric(1e6*float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/Mop")
}

// runParallelRatelimit touches every key of l once, then runs
// runParallelKeys on it; err is the constructor's.
func runParallelRatelimit(b *testing.B, keys []string, l ratelimit.Limiter, err error) {
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range keys {
		if _, err := l.Allow(ctx, k, 1); err != nil {
			b.Fatal(err)
		}
	}
	runParallelKeys(b, keys, func(k string) bool {
		res, err := l.Allow(ctx, k, 1)
		return err == nil && res.Allowed
	})
}
