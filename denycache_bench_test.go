package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkDenyCacheHotKeyInAFullCache floods one denied key through a
// DenyCache that already holds MaxKeys denials of other keys, as after a
// flood of distinct denied keys, while one call in 64 is a new denied key
// that finds the cache full: the hot key's calls are the hot path, and
// %local-hot is the share of them answered without the backend.
func BenchmarkDenyCacheHotKeyInAFullCache(b *testing.B) {
	const maxKeys = 10_000
	backend, err := NewTokenBucket(Every(1000*time.Second), 1)
	if err != nil {
		b.Fatal(err)
	}
	counted := &countingLimiter{l: backend}
	cache, err := NewDenyCache(counted, DenyCacheConfig{MaxKeys: maxKeys, MaxAge: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for i := range maxKeys {
		key := "flood:" + strconv.Itoa(i)
		_, _ = cache.Allow(ctx, key, 1)
		_, _ = cache.Allow(ctx, key, 1)
	}
	_, _ = cache.Allow(ctx, "hot", 1)
	var next, hot, hotBackend atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			if i%64 == 0 {
				key := "new:" + strconv.FormatInt(next.Add(1), 10)
				_, _ = cache.Allow(ctx, key, 1)
				_, _ = cache.Allow(ctx, key, 1) // denied: finds the cache full
				continue
			}
			before := counted.calls.Load()
			d, _ := cache.Decide(ctx, "hot", 1)
			hot.Add(1)
			if d.Source != FromDenyCache && counted.calls.Load() != before {
				hotBackend.Add(1)
			}
		}
	})
	if n := hot.Load(); n > 0 {
		b.ReportMetric(100*(1-float64(hotBackend.Load())/float64(n)), "%local-hot")
	}
}
