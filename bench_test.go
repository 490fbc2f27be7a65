package ratelimit

import (
	"context"
	"strconv"
	"testing"
)

// The comparisons with other libraries are in bench/, a module of its own;
// these measure the limiters alone.

func BenchmarkTokenBucketHotKey(b *testing.B) {
	l, err := NewTokenBucket(PerSecond(1e8), 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		_, _ = l.Allow(ctx, "hot", 1)
	}
}

func BenchmarkTokenBucketManyKeysParallel(b *testing.B) {
	l, err := NewTokenBucket(PerSecond(1e8), 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	keys := make([]string, 100_000)
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
		_, _ = l.Allow(ctx, keys[i], 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			_, _ = l.Allow(ctx, keys[i%len(keys)], 1)
			i += 7919
		}
	})
}
