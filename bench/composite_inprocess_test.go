package bench

import (
	"context"
	"testing"

	"github.com/ratelimit-go/ratelimit"
)

// BenchmarkCompositeHotKey is one goroutine asking for one token of the same
// key over and over, with the system clock: a single TokenBucket, and a
// Composite of two TokenBuckets on that key, both in the hot-key
// configuration, so that nearly every call is allowed. The Composite decides
// both parts under both their locks, with one clock reading; the goal is at
// most twice the single bucket's time, with no allocation.
func BenchmarkCompositeHotKey(b *testing.B) {
	ctx := context.Background()

	b.Run("TokenBucket", func(b *testing.B) {
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

	b.Run("Composite-2xTokenBucket", func(b *testing.B) {
		c := hotComposite(b)
		b.ReportAllocs()
		allowed := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			res, err := c.Allow(ctx, "hot", 1)
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
}

// BenchmarkCompositeHotKeyParallel is BenchmarkCompositeHotKey with
// b.RunParallel: every goroutine on the one hot key, so the calls contend
// for the same shard locks.
func BenchmarkCompositeHotKeyParallel(b *testing.B) {
	ctx := context.Background()

	b.Run("TokenBucket", func(b *testing.B) {
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(hotRate), hotCapacity)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := l.Allow(ctx, "hot", 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})

	b.Run("Composite-2xTokenBucket", func(b *testing.B) {
		c := hotComposite(b)
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := c.Allow(ctx, "hot", 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// hotComposite returns a Composite of two TokenBuckets in the hot-key
// configuration, both on the call's key.
func hotComposite(b *testing.B) *ratelimit.Composite {
	b.Helper()
	var parts []ratelimit.Part
	for _, name := range []string{"first", "second"} {
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(hotRate), hotCapacity)
		if err != nil {
			b.Fatal(err)
		}
		parts = append(parts, ratelimit.Part{Name: name, Limiter: l})
	}
	c, err := ratelimit.NewComposite(parts...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}
