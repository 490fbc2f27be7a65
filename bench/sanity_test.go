package bench

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// TestConfigurations checks the arithmetic the benchmarks rely on.
func TestConfigurations(t *testing.T) {
	if hotInterval != 10*time.Nanosecond {
		t.Errorf("hotInterval = %v, want 10ns", hotInterval)
	}
	if hotPeriod != 10485760*time.Nanosecond {
		t.Errorf("hotPeriod = %v, want 10.48576ms", hotPeriod)
	}
	gcd := func(a, b int) int {
		for b != 0 {
			a, b = b, a%b
		}
		return a
	}
	for _, s := range strides {
		if gcd(s%numParallelKeys, numParallelKeys) != 1 {
			t.Errorf("stride %d shares a factor with %d: a goroutine would not visit every key", s, numParallelKeys)
		}
	}
	if gcd(redisKeyStride%numRedisKeys, numRedisKeys) != 1 {
		t.Errorf("redisKeyStride %d shares a factor with %d: a goroutine would not visit every key", redisKeyStride, numRedisKeys)
	}
	keys := benchKeys(numMemoryKeys)
	if keys[0] != "key:0" || keys[numMemoryKeys-1] != "key:999999" {
		t.Errorf("keys run from %q to %q", keys[0], keys[numMemoryKeys-1])
	}
}

// TestMutexAndSyncMaps checks the hand-rolled x/time/rate maps limit per key.
func TestMutexAndSyncMaps(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	for name, allow := range map[string]func(string, time.Time, int) bool{
		"mutexmap": newMutexRateMap(1, 2).allowN,
		"syncmap":  newSyncRateMap(1, 2).allowN,
	} {
		got := []bool{allow("a", now, 1), allow("a", now, 1), allow("a", now, 1), allow("b", now, 1)}
		want := []bool{true, true, false, true}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: call %d allowed = %v, want %v", name, i, got[i], want[i])
			}
		}
	}
}

// TestRedisLoad checks the load of BenchmarkRedis without Redis: exactly n
// calls, a latency for each, every key asked about, and a failure counted.
func TestRedisLoad(t *testing.T) {
	for _, tc := range []struct{ keys, goroutines, n int }{
		{1, 1, 100}, {1, 256, 1000}, {10, 1, 100}, {10, 8, 1000}, {10, 256, 3000},
	} {
		calls := make([]atomic.Int64, tc.keys)
		decide := make([]decideFunc, tc.keys)
		for i := range decide {
			decide[i] = func(context.Context) (bool, error) {
				if calls[i].Add(1) == 1 && i == 0 {
					return false, fmt.Errorf("first call of key 0")
				}
				time.Sleep(time.Microsecond)
				return true, nil
			}
		}
		lat := make([]int64, tc.n)
		res := startRedisLoad(context.Background(), decide, tc.goroutines, tc.n, lat).run()
		total := int64(0)
		for i := range calls {
			c := calls[i].Load()
			if c == 0 && tc.n >= tc.keys*tc.goroutines {
				t.Errorf("%+v: key %d never asked about", tc, i)
			}
			total += c
		}
		if total != int64(tc.n) || res.allowed != int64(tc.n)-1 || res.failed != 1 || res.firstErr == nil {
			t.Errorf("%+v: %d calls, %d allowed, %d failed (%v); want %d, %d, 1", tc, total, res.allowed, res.failed, res.firstErr, tc.n, tc.n-1)
		}
		// Every call but the failing one sleeps 1 µs.
		slept := 0
		for _, l := range lat {
			if l >= int64(time.Microsecond) {
				slept++
			}
		}
		if slept < tc.n-1 {
			t.Errorf("%+v: %d latencies of at least 1µs, want %d", tc, slept, tc.n-1)
		}
	}
	sorted := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if p50, p99, p10 := percentile(sorted, 50), percentile(sorted, 99), percentile(sorted, 10); p50 != 5 || p99 != 10 || p10 != 1 {
		t.Errorf("p50, p99, p10 of 1..10 = %d, %d, %d; want 5, 10, 1", p50, p99, p10)
	}
	if p := percentile([]int64{7}, 99); p != 7 {
		t.Errorf("p99 of one value = %d", p)
	}
}

// TestParseServerStats checks the reading of INFO cpu and commandstats.
func TestParseServerStats(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:0.250000\r\nused_cpu_sys_children:9.000000\r\n" +
		"used_cpu_sys_main_thread:1.400000\r\n\n# Commandstats\r\n" +
		"cmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_eval:calls=2,usec=8,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_hgetall:calls=12,usec=6,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n"
	s, err := parseServerStats(info)
	if err != nil {
		t.Fatal(err)
	}
	if s != (serverStats{cpuSeconds: 1.75, scriptCalls: 12, scriptUsec: 58}) {
		t.Errorf("got %+v", s)
	}
	if _, err := parseServerStats("# CPU\r\nused_cpu_sys:1\r\n"); err == nil {
		t.Error("no error without used_cpu_user")
	}
}

// TestRedisRowsExact runs the limiters of BenchmarkRedis's rows through its
// load, at every goroutine count, on one hot key and on 20 keys, at a limit
// the calls reach: 50 per 1000 s, which neither refills a token nor ends a
// window during the test. Each key must be allowed exactly
// min(its calls, 50) times, however the calls of many goroutines interleave.
// It needs a Redis ($RATELIMIT_BENCH_REDIS_ADDR) and skips without one.
func TestRedisRowsExact(t *testing.T) {
	c := redisClient(t)
	cfg := redisConfig{limit: 50, period: 1000 * time.Second}
	for _, impl := range redisImpls() {
		if impl.name == rawRedisImpl {
			continue
		}
		for _, nkeys := range []int{1, 20} {
			for _, g := range redisGoroutines {
				t.Run(fmt.Sprintf("%s/keys=%d/g=%d", impl.name, nkeys, g), func(t *testing.T) {
					forKey := impl.setup(t, c, cfg)
					calls := make([]atomic.Int64, nkeys)
					allowed := make([]atomic.Int64, nkeys)
					decide := make([]decideFunc, nkeys)
					for i, k := range redisBenchKeys(nkeys) {
						d := forKey(k)
						decide[i] = func(ctx context.Context) (bool, error) {
							a, err := d(ctx)
							calls[i].Add(1)
							if a {
								allowed[i].Add(1)
							}
							return a, err
						}
					}
					n := 3 * cfg.limit * nkeys
					res := startRedisLoad(context.Background(), decide, g, n, nil).run()
					if res.failed > 0 {
						t.Fatalf("%d calls failed; the first: %v", res.failed, res.firstErr)
					}
					denied := false
					for i := range calls {
						got, want := allowed[i].Load(), min(calls[i].Load(), int64(cfg.limit))
						if got != want {
							t.Errorf("key %d: %d of %d calls allowed, want %d", i, got, calls[i].Load(), want)
						}
						denied = denied || got < calls[i].Load()
					}
					if !denied {
						t.Errorf("no key reached its limit of %d in %d calls", cfg.limit, n)
					}
				})
			}
		}
	}
}

// TestRedisServerStats checks the server figures of BenchmarkRedis on the
// raw EVALSHA row: at least one EVALSHA per call (exactly one on a server
// that nothing else uses) and some server CPU time.
func TestRedisServerStats(t *testing.T) {
	c := redisClient(t)
	ctx := context.Background()
	var raw redisImpl
	for _, impl := range redisImpls() {
		if impl.name == rawRedisImpl {
			raw = impl
		}
	}
	decide := decisions(raw.setup(t, c, redisBenchConfig), redisBenchKeys(100))
	const n = 2000
	before, err := readServerStats(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	res := startRedisLoad(ctx, decide, 8, n, nil).run()
	after, err := readServerStats(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if res.failed > 0 || res.allowed != n {
		t.Fatalf("%d allowed, %d failed (%v)", res.allowed, res.failed, res.firstErr)
	}
	d := after.sub(before)
	if d.scriptCalls < n || d.cpuSeconds <= 0 || d.scriptUsec <= 0 {
		t.Errorf("over %d calls: %+v", n, d)
	} else if d.scriptCalls != n {
		t.Logf("%d EVALSHA calls for %d decisions: is another client using this Redis?", d.scriptCalls, n)
	}
}
