package bench

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/sethvargo/go-limiter/memorystore"
	uber "go.uber.org/ratelimit"
	"golang.org/x/time/rate"
)

// The hot-key configuration: a burst of 1<<20 tokens refilling at 1e8 tokens
// per second, one token every 10 ns. A call costs more than 10 ns, so a single
// goroutine never runs the bucket dry and (almost) every call is allowed: the
// benchmark times the allow path, not the deny path.
const (
	hotCapacity = 1 << 20
	hotRate     = 1e8                                           // tokens per second
	hotInterval = time.Duration(float64(time.Second) / hotRate) // 10 ns per token
	hotPeriod   = hotCapacity * hotInterval                     // GCRA period and memorystore interval: 10.48576 ms
)

// BenchmarkHotKey is one goroutine asking for one token of the same key over
// and over, with the system clock. Each sub-benchmark reports allowed/op, the
// share of calls that were allowed, so that a fast denial cannot pass for a
// fast decision.
//
// Each row calls its limiter's concrete type directly, as x/time/rate's row
// does, rather than through a shared helper taking an interface: a dynamic
// call costs a few ns here, where the whole call is under 100.
func BenchmarkHotKey(b *testing.B) {
	ctx := context.Background()

	b.Run("ratelimit-TokenBucket", func(b *testing.B) {
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(hotRate), hotCapacity)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := l.Allow(ctx, "hot", 1)
			if err != nil {
				b.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})

	b.Run("ratelimit-GCRA", func(b *testing.B) {
		l, err := ratelimit.NewGCRA(hotCapacity, hotPeriod)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := l.Allow(ctx, "hot", 1)
			if err != nil {
				b.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})

	b.Run("ratelimit-FixedWindow", func(b *testing.B) {
		l, err := ratelimit.NewFixedWindow(hotCapacity, hotPeriod)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := l.Allow(ctx, "hot", 1)
			if err != nil {
				b.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})

	// The sliding log of 100 per 100 token intervals (1 µs): a call takes
	// longer than one interval, so almost every call is allowed, and each
	// drops the entries that have left and appends its own, the steady
	// state of a busy key. entries/op is the mean of the entries the log
	// held after each call (limit − Remaining): at 100-200 ns a call, 5-10.
	b.Run("ratelimit-SlidingLog-L100", func(b *testing.B) {
		benchHotSlidingLog(b, ctx, 100, 100*hotInterval)
	})

	// The same limit over 15 µs, 100 entries at one per 150 ns: a log that
	// stays full (or nearly) at this machine's 100-200 ns a call, most calls
	// allowed, and the faster the calls the more are denied (a denial of 1
	// reads the oldest entry).
	b.Run("ratelimit-SlidingLog-L100-full", func(b *testing.B) {
		benchHotSlidingLog(b, ctx, 100, 1500*hotInterval)
	})

	// Windows of the wall clock: minutes of UTC, whose bounds are kept
	// until the minute ends. The limit is 1<<40 a minute, not hotCapacity:
	// at 10 M calls a second, 1<<20 would be spent within the first tenth
	// of a second of each minute, and the row would time denials.
	b.Run("ratelimit-CalendarWindow", func(b *testing.B) {
		l, err := ratelimit.NewCalendarWindow(1<<40, ratelimit.Calendar{Period: ratelimit.CalendarMinute})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := l.Allow(ctx, "hot", 1)
			if err != nil {
				b.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})

	b.Run("ratelimit-SlidingCounter", func(b *testing.B) {
		l, err := ratelimit.NewSlidingCounter(hotCapacity, hotPeriod)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := l.Allow(ctx, "hot", 1)
			if err != nil {
				b.Fatal(err)
			}
			if res.Allowed {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})

	b.Run("x-time-rate-AllowN", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(hotRate), hotCapacity)
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if l.AllowN(time.Now(), 1) {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})

	b.Run("sethvargo-memorystore", func(b *testing.B) {
		s, err := memorystore.New(&memorystore.Config{
			Tokens:   hotCapacity,
			Interval: hotPeriod,
		})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(ctx)
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, _, _, ok, err := s.Take(ctx, "hot")
			if err != nil {
				b.Fatal(err)
			}
			if ok {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})

	// sethvargo/go-limiter v0.7.1 refills a bucket, on each new tick of
	// Interval, with Interval/Tokens tokens (ns per token, not tokens per
	// tick: sethvargo/go-limiter#29, fixed in v0.7.2). With the configuration
	// above that is 10 tokens every 10.49 ms, so once the first 1<<20 are
	// spent nearly every call is denied and the row above times the deny
	// path. This row keeps the same rate, 1e8/s, as 10 tokens every 100 ns,
	// the largest burst for which v0.7.1 refills in full, so most calls are
	// allowed.
	b.Run("sethvargo-memorystore-10per100ns", func(b *testing.B) {
		s, err := memorystore.New(&memorystore.Config{
			Tokens:   10,
			Interval: 10 * hotInterval,
		})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close(ctx)
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, _, _, ok, err := s.Take(ctx, "hot")
			if err != nil {
				b.Fatal(err)
			}
			if ok {
				allowed++
			}
		}
		b.StopTimer()
		reportAllowed(b, allowed)
	})

	// go.uber.org/ratelimit has no keys and no denials: Take blocks until the
	// next slot, so it measures pacing. At 1e8 per second a slot is 10 ns,
	// shorter than a call, so it hardly ever sleeps; every call "is allowed".
	b.Run("uber-ratelimit", func(b *testing.B) {
		l := uber.New(int(hotRate), uber.WithoutSlack)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			l.Take()
		}
		b.StopTimer()
		reportAllowed(b, b.N)
	})
}

// benchHotSlidingLog is BenchmarkHotKey's row of a sliding log of limit per
// window: besides allowed/op it reports entries/op, the mean number of
// entries the log held after each call (limit − Remaining, each entry one
// unit).
func benchHotSlidingLog(b *testing.B, ctx context.Context, limit int, window time.Duration) {
	l, err := ratelimit.NewSlidingLog(limit, window)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	allowed, held := 0, 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := l.Allow(ctx, "hot", 1)
		if err != nil {
			b.Fatal(err)
		}
		if res.Allowed {
			allowed++
		}
		held += limit - res.Remaining
	}
	b.StopTimer()
	reportAllowed(b, allowed)
	b.ReportMetric(float64(held)/float64(b.N), "entries/op")
}

// reportAllowed reports the share of the b.N calls that were allowed.
func reportAllowed(b *testing.B, allowed int) {
	b.ReportMetric(float64(allowed)/float64(b.N), "allowed/op")
}
