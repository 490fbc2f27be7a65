package bench

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/ratelimit-go/ratelimit"
)

// The flood configuration: a Redis token bucket of 10 tokens refilling at 1
// token per second, asked for one token of one key by floodGoroutines
// goroutines as fast as they can. After the first 10 calls of a run nearly
// every call is denied, with a RetryAfter of at most 1 s.
const (
	floodCapacity   = 10
	floodRate       = 1.0 // tokens per second
	floodGoroutines = 64
)

// countingLimiter passes every call to l and counts them: wrapped around the
// Redis limiter, it counts the calls that reach Redis. It is a
// ratelimit.Decider that passes l's Decisions on as they are, so that a
// DenyCache around it knows, as around l itself, how l's state moves and
// may answer from a denial.
type countingLimiter struct {
	l     ratelimit.Decider
	calls atomic.Int64
}

func (c *countingLimiter) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	c.calls.Add(1)
	return c.l.Allow(ctx, key, n)
}

func (c *countingLimiter) Decide(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	c.calls.Add(1)
	return c.l.Decide(ctx, key, n)
}

func (c *countingLimiter) Policies(ctx context.Context, key string) ([]ratelimit.NamedPolicy, error) {
	return c.l.Policies(ctx, key)
}

// BenchmarkDenyCacheFlood floods one key that is denied almost always, with
// floodGoroutines goroutines, through a RedisTokenBucket ("bare") and through
// ratelimit.NewDenyCache (default config: denials remembered for at most
// 1 s) around the same RedisTokenBucket ("deny-cache"). In both rows the
// bucket is wrapped in countingLimiter, so redis-calls/s is the calls that
// reached Redis per second of wall time; local/op is the share of calls
// answered without reaching it, and redis-calls-saved/s those calls per
// second. Each run floods a key of its own, which starts full.
func BenchmarkDenyCacheFlood(b *testing.B) {
	rows := []struct {
		name string
		wrap func(b *testing.B, l ratelimit.Limiter) ratelimit.Limiter
	}{
		{"bare", func(_ *testing.B, l ratelimit.Limiter) ratelimit.Limiter { return l }},
		{"deny-cache", func(b *testing.B, l ratelimit.Limiter) ratelimit.Limiter {
			d, err := ratelimit.NewDenyCache(l, ratelimit.DenyCacheConfig{})
			if err != nil {
				b.Fatal(err)
			}
			return d
		}},
	}
	c := redisClient(b)
	for _, row := range rows {
		b.Run(row.name, func(b *testing.B) {
			tb, err := ratelimit.NewRedisTokenBucket(c, ratelimit.PerSecond(floodRate), floodCapacity)
			if err != nil {
				b.Fatal(err)
			}
			counted := &countingLimiter{l: tb}
			l := row.wrap(b, counted)
			key := redisBenchKeys(1)[0]
			decide := make([]decideFunc, floodGoroutines)
			for i := range decide {
				decide[i] = func(ctx context.Context) (bool, error) {
					res, err := l.Allow(ctx, key, 1)
					return res.Allowed, err
				}
			}
			// runRedis makes each decision once before the timer starts;
			// count only the timed calls.
			var before int64
			runRedis(b, decide, func() { before = counted.calls.Load() })
			redisCalls := counted.calls.Load() - before
			local := int64(b.N) - redisCalls
			b.ReportMetric(float64(local)/float64(b.N), "local/op")
			if s := b.Elapsed().Seconds(); s > 0 {
				b.ReportMetric(float64(redisCalls)/s, "redis-calls/s")
				b.ReportMetric(float64(local)/s, "redis-calls-saved/s")
			}
		})
	}
}

// runRedis is BenchmarkDenyCacheFlood's runner (BenchmarkRedis has its own,
// runRedisRow, with a fixed number of goroutines; this one is kept so that
// the flood's figures stay comparable). It times the decisions in
// len(decide) goroutines, goroutine i always calling decide[i], and reports
// allowed/op, ops/s (calls of all goroutines per second of wall time) and
// how many goroutines ran. One goroutine is a plain loop; more use
// b.RunParallel with the parallelism that makes GOMAXPROCS × parallelism =
// len(decide) (32 on this 2-core machine for 64). Each decision is made once
// before the timer starts, so that the timed calls find their key in Redis;
// then atStart, if not nil, is called.
func runRedis(b *testing.B, decide []decideFunc, atStart func()) {
	ctx := context.Background()
	for _, d := range decide {
		if _, err := d(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if atStart != nil {
		atStart()
	}
	goroutines := len(decide)
	var allowed, failed, started atomic.Int64
	var firstErr atomic.Pointer[error]
	b.ReportAllocs()
	if goroutines == 1 {
		d := decide[0]
		started.Store(1)
		b.ResetTimer()
		ok := int64(0)
		for i := 0; i < b.N; i++ {
			a, err := d(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if a {
				ok++
			}
		}
		b.StopTimer()
		allowed.Store(ok)
	} else {
		procs := runtime.GOMAXPROCS(0)
		parallelism := (goroutines + procs - 1) / procs
		if parallelism*procs != goroutines {
			b.Logf("GOMAXPROCS is %d: b.RunParallel will start %d goroutines, not %d", procs, parallelism*procs, goroutines)
		}
		b.SetParallelism(parallelism)
		var nextID atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			started.Add(1)
			d := decide[int(nextID.Add(1)-1)%goroutines]
			ok, bad := int64(0), int64(0)
			for pb.Next() {
				a, err := d(ctx)
				if err != nil {
					if bad == 0 {
						e := err // only a failing call pays for e's allocation
						firstErr.CompareAndSwap(nil, &e)
					}
					bad++
				}
				if a {
					ok++
				}
			}
			allowed.Add(ok)
			failed.Add(bad)
		})
		b.StopTimer()
	}
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d calls failed; the first: %v", n, b.N, *firstErr.Load())
	}
	reportAllowed(b, int(allowed.Load()))
	reportOpsPerSecond(b)
	b.ReportMetric(float64(started.Load()), "goroutines")
}

// reportOpsPerSecond reports the b.N calls per second of the benchmark's
// timed wall time: the throughput, so that ratios between rows are easy.
func reportOpsPerSecond(b *testing.B) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(b.N)/s, "ops/s")
	}
}

// BenchmarkDenyCacheFloodCosts floods one exhausted key of a Redis token
// bucket of floodCostCapacity tokens refilling 1 a second, through
// ratelimit.NewDenyCache (default config), with floodGoroutines goroutines
// all asking for one cost (1, 7 or 100) or for mixed costs (1 to 100, each
// goroutine its own), and reports local/op, the share of calls answered
// without reaching Redis.
func BenchmarkDenyCacheFloodCosts(b *testing.B) {
	c := redisClient(b)
	for _, cost := range []int{1, 7, 100, 0} {
		name := "cost=" + strconv.Itoa(cost)
		if cost == 0 {
			name = "cost=mixed"
		}
		b.Run(name, func(b *testing.B) {
			tb, err := ratelimit.NewRedisTokenBucket(c, ratelimit.PerSecond(floodRate), floodCostCapacity)
			if err != nil {
				b.Fatal(err)
			}
			counted := &countingLimiter{l: tb}
			l, err := ratelimit.NewDenyCache(counted, ratelimit.DenyCacheConfig{})
			if err != nil {
				b.Fatal(err)
			}
			key := redisBenchKeys(1)[0]
			if _, err := tb.Allow(context.Background(), key, floodCostCapacity); err != nil {
				b.Fatal(err)
			}
			decide := make([]decideFunc, floodGoroutines)
			for i := range decide {
				n := cost
				if n == 0 {
					n = 1 + i*99/(floodGoroutines-1)
				}
				decide[i] = func(ctx context.Context) (bool, error) {
					res, err := l.Allow(ctx, key, n)
					return res.Allowed, err
				}
			}
			var before int64
			runRedis(b, decide, func() { before = counted.calls.Load() })
			local := int64(b.N) - (counted.calls.Load() - before)
			b.ReportMetric(float64(local)/float64(b.N), "local/op")
		})
	}
}

// floodCostCapacity is the bucket of BenchmarkDenyCacheFloodCosts: room
// for the largest cost.
const floodCostCapacity = 100
