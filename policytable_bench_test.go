package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The cost of a PolicyTable's lookup through a limiter, against a limiter
// of one fixed policy and against a PolicyFunc reading a map behind an
// atomic.Pointer: on a hot key, and over 100,000 keys that each have a
// policy of their own.

// benchTableKeys is the number of keys of the many-keys benchmarks.
const benchTableKeys = 100_000

// benchPolicy is every key's policy in the benchmarks: the limiter's own
// policy's capacity at half its rate (20 ns per token, not 10), so that no
// call falls back on the limiter's own.
var benchPolicy = Policy{Limit: 1 << 20, Window: (1 << 20) * 20 * time.Nanosecond}

// benchKeys returns n keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	return keys
}

// benchTable returns a PolicyTable on a miniredis, loaded with benchPolicy
// for every key.
func benchTable(b *testing.B, keys []string) *PolicyTable {
	m := miniredis.RunT(b)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	b.Cleanup(func() { _ = client.Close() })
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	if err != nil {
		b.Fatal(err)
	}
	policies := make(map[string]Policy, len(keys))
	for _, k := range keys {
		policies[k] = benchPolicy
	}
	ctx := context.Background()
	if err := table.Replace(ctx, PolicyTableEntries{Policies: policies}); err != nil {
		b.Fatal(err)
	}
	if err := table.Load(ctx); err != nil {
		b.Fatal(err)
	}
	return table
}

// benchMapFunc returns a PolicyFunc reading a map behind an atomic.Pointer
// that holds benchPolicy for every key.
func benchMapFunc(keys []string) PolicyFunc {
	m := make(map[string]Policy, len(keys))
	for _, k := range keys {
		m[k] = benchPolicy
	}
	var p atomic.Pointer[map[string]Policy]
	p.Store(&m)
	return func(_ context.Context, key string) (Policy, error) { return (*p.Load())[key], nil }
}

// benchBuckets returns the three token buckets the benchmarks compare.
func benchBuckets(b *testing.B, keys []string) map[string]*TokenBucket {
	table := benchTable(b, keys)
	build := func(opts ...Option) *TokenBucket {
		l, err := NewTokenBucket(PerSecond(1e8), 1<<20, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	return map[string]*TokenBucket{
		"fixed": build(),
		"map":   build(WithPolicyFunc(benchMapFunc(keys))),
		"table": build(WithPolicyFunc(table.PolicyFunc())),
	}
}

func BenchmarkPolicyTableHotKey(b *testing.B) {
	buckets := benchBuckets(b, benchKeys(benchTableKeys))
	ctx := context.Background()
	for _, name := range []string{"fixed", "map", "table"} {
		l := buckets[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _ = l.Allow(ctx, "key:42", 1)
				}
			})
		})
	}
}

func BenchmarkPolicyTableManyKeys(b *testing.B) {
	keys := benchKeys(benchTableKeys)
	buckets := benchBuckets(b, keys)
	ctx := context.Background()
	for _, name := range []string{"fixed", "map", "table"} {
		l := buckets[name]
		for _, k := range keys {
			_, _ = l.Allow(ctx, k, 1)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					_, _ = l.Allow(ctx, keys[i%len(keys)], 1)
					i += 7919
				}
			})
		})
	}
}

func BenchmarkPolicyTableLookup(b *testing.B) {
	keys := benchKeys(benchTableKeys)
	table := benchTable(b, keys)
	f := benchMapFunc(keys)
	ctx := context.Background()
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = f(ctx, "key:42")
			}
		})
	})
	g := table.PolicyFunc()
	b.Run("table", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = g(ctx, "key:42")
			}
		})
	})
}

// BenchmarkPolicyTableChange is the cost to a replica of one change, on a
// table of 100,000 keys: one call of the read script, which returns the
// field changed, and a copy of the map of keys.
func BenchmarkPolicyTableChange(b *testing.B) {
	table := benchTable(b, benchKeys(benchTableKeys))
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		i++
		if err := table.Set(ctx, "key:42", Policy{Limit: 7 + i%2, Window: time.Second}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if reload, err := table.sync(ctx); err != nil || reload {
			b.Fatal(reload, err)
		}
	}
}
