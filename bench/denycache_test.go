package bench

import (
	"context"
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
// Redis limiter, it counts the calls that reach Redis.
type countingLimiter struct {
	l     ratelimit.Limiter
	calls atomic.Int64
}

func (c *countingLimiter) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	c.calls.Add(1)
	return c.l.Allow(ctx, key, n)
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
			tb, err := ratelimit.NewRedisTokenBucket(c, floodCapacity, floodRate)
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
