package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// BenchmarkSlidingDecide measures one goroutine deciding one hot key of a
// sliding log, a sliding counter and a Composite of both, by Allow and by
// Decide (whose Decision tells each policy's next unit), in process and on
// a real redis-server (skipped without one); a Composite of two token
// buckets and a Redis token bucket, whose paths the sliding kinds' must
// not slow, beside them.
func BenchmarkSlidingDecide(b *testing.B) {
	ctx := context.Background()
	log := func(tb testing.TB) Limiter {
		l, err := NewSlidingLog(100, 100*time.Microsecond)
		if err != nil {
			tb.Fatal(err)
		}
		return l
	}
	counter := func(tb testing.TB) Limiter {
		c, err := NewSlidingCounter(1<<20, 10*time.Millisecond)
		if err != nil {
			tb.Fatal(err)
		}
		return c
	}
	bucket := func(tb testing.TB) Limiter {
		l, err := NewTokenBucket(PerSecond(1e8), 1<<20)
		if err != nil {
			tb.Fatal(err)
		}
		return l
	}
	composite := func(tb testing.TB, a, c Limiter) Limiter {
		l, err := NewComposite(Part{Name: "a", Limiter: a}, Part{Name: "b", Limiter: c})
		if err != nil {
			tb.Fatal(err)
		}
		return l
	}
	rows := []struct {
		name string
		make func(testing.TB) Limiter
	}{
		{"SlidingLog", log},
		{"SlidingCounter", counter},
		{"Composite-SlidingLog-SlidingCounter", func(tb testing.TB) Limiter { return composite(tb, log(tb), counter(tb)) }},
		{"Composite-2xTokenBucket", func(tb testing.TB) Limiter { return composite(tb, bucket(tb), bucket(tb)) }},
	}
	for _, row := range rows {
		b.Run(row.name+"/Allow", func(b *testing.B) {
			l := row.make(b)
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.Allow(ctx, "hot", 1)
			}
		})
		b.Run(row.name+"/Decide", func(b *testing.B) {
			l := row.make(b).(Decider)
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.Decide(ctx, "hot", 1)
			}
		})
	}

	b.Run("Redis", func(b *testing.B) {
		client := redistest.Start(b).Client(b)
		redisRows := []struct {
			name string
			make func() (Decider, error)
		}{
			{"RedisSlidingLog", func() (Decider, error) { return NewRedisSlidingLog(client, 10000, time.Hour) }},
			{"RedisSlidingCounter", func() (Decider, error) { return NewRedisSlidingCounter(client, 1<<40, time.Hour) }},
			{"RedisTokenBucket", func() (Decider, error) { return NewRedisTokenBucket(client, PerSecond(1e6), 1<<40) }},
			{"Composite-RedisSlidingLog-RedisSlidingCounter", func() (Decider, error) {
				l, err := NewRedisSlidingLog(client, 10000, time.Hour, WithKeyPrefix("bench:c:"))
				if err != nil {
					return nil, err
				}
				c, err := NewRedisSlidingCounter(client, 1<<40, time.Hour, WithKeyPrefix("bench:c:"))
				if err != nil {
					return nil, err
				}
				return NewComposite(Part{Name: "log", Limiter: l}, Part{Name: "counter", Limiter: c})
			}},
		}
		for _, row := range redisRows {
			b.Run(row.name, func(b *testing.B) {
				l, err := row.make()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					// A new key every 5000 calls, so that a log never fills.
					if _, err := l.Decide(ctx, "hot"+string(rune('a'+i/5000%26)), 1); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	})
}
