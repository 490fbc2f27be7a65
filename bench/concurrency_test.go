package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
)

// Concurrency limits: an acquire plus a release per op, the whole life of a
// lease, on Redis (RedisConcurrency beside the ZSET script a peer would
// write) and in process (Concurrency).

// concurrencyLimit and concurrencyTTL configure every row: far more in
// flight than 64 goroutines over numRedisKeys keys ever hold on a key, and
// leases that outlive a run, so that every acquire is allowed (the
// benchmark checks it).
const (
	concurrencyLimit = 100
	concurrencyTTL   = time.Minute
)

// concurrencyGoroutines are the goroutine counts of the rows: 64, the
// goal's, and 8.
var concurrencyGoroutines = [...]int{8, 64}

// zsetAcquireLua is the obvious acquire as a peer writes it: one script call
// per acquire, a ZSET per key of lease ids scored by their expiry (server
// time, µs), expired leases removed, the rest counted, the new one added
// and the key's TTL renewed. KEYS[1] the key; ARGV the limit, the TTL in µs,
// the lease id and the TTL in ms. It returns 1 when the lease is taken.
const zsetAcquireLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`

// zsetReleaseLua is its release: ZREM of the lease id, one script call.
const zsetReleaseLua = `return redis.call('ZREM', KEYS[1], ARGV[1])`

// acquireFunc acquires one unit of the key it was made for, and returns
// whether it was allowed and the function that releases it.
type acquireFunc func(ctx context.Context) (release func(context.Context) error, allowed bool, err error)

// concurrencyImpl is one row of BenchmarkRedisConcurrencyPairs: setup makes
// its limiter of limit in flight on the shared client and returns forKey,
// whose acquireFunc acquires one unit of its key.
type concurrencyImpl struct {
	name  string
	setup func(tb testing.TB, c *redis.Client, limit int) (forKey func(key string) acquireFunc)
}

// concurrencyImpls returns the rows of BenchmarkRedisConcurrencyPairs.
func concurrencyImpls() []concurrencyImpl {
	return []concurrencyImpl{
		{"ratelimit-RedisConcurrency", func(tb testing.TB, c *redis.Client, limit int) func(string) acquireFunc {
			l, err := ratelimit.NewRedisConcurrency(c, limit, concurrencyTTL)
			return leases(tb, l, err)
		}},
		// One script call per acquire and per release, as the ZSET row.
		{"ratelimit-RedisConcurrency-WithoutCoalescing", func(tb testing.TB, c *redis.Client, limit int) func(string) acquireFunc {
			l, err := ratelimit.NewRedisConcurrency(c, limit, concurrencyTTL, ratelimit.WithoutCoalescing())
			return leases(tb, l, err)
		}},
		{"zset-script-per-call", func(tb testing.TB, c *redis.Client, limit int) func(string) acquireFunc {
			acquire, release := redis.NewScript(zsetAcquireLua), redis.NewScript(zsetReleaseLua)
			ctx := context.Background()
			if err := acquire.Load(ctx, c).Err(); err != nil {
				tb.Fatal(err)
			}
			if err := release.Load(ctx, c).Err(); err != nil {
				tb.Fatal(err)
			}
			var b [8]byte
			_, _ = rand.Read(b[:])
			nonce := hex.EncodeToString(b[:]) + ":"
			var seq atomic.Uint64
			micros, millis := concurrencyTTL.Microseconds(), concurrencyTTL.Milliseconds()
			return func(key string) acquireFunc {
				keys := []string{"ratelimit-bench-zset:" + key}
				return func(ctx context.Context) (func(context.Context) error, bool, error) {
					id := nonce + strconv.FormatUint(seq.Add(1), 10)
					n, err := acquire.EvalSha(ctx, c, keys, limit, micros, id, millis).Int64()
					if err != nil || n != 1 {
						return nil, false, err
					}
					return func(ctx context.Context) error { return release.EvalSha(ctx, c, keys, id).Err() }, true, nil
				}
			}
		}},
	}
}

// leases is the forKey of a ratelimit concurrency limiter: Acquire of one
// unit, released by its lease's Release. err is the constructor's.
func leases(tb testing.TB, l ratelimit.Acquirer, err error) func(string) acquireFunc {
	if err != nil {
		tb.Fatal(err)
	}
	return func(key string) acquireFunc {
		return func(ctx context.Context) (func(context.Context) error, bool, error) {
			lease, d, err := l.Acquire(ctx, key, 1)
			if err != nil || !d.Allowed {
				return nil, false, err
			}
			return lease.Release, true, nil
		}
	}
}

// pairs returns the decisions of a pair per call: acquire, then release.
func pairs(forKey func(string) acquireFunc, keys []string) []decideFunc {
	d := make([]decideFunc, len(keys))
	for i, k := range keys {
		acquire := forKey(k)
		d[i] = func(ctx context.Context) (bool, error) {
			release, ok, err := acquire(ctx)
			if err != nil || !ok {
				return false, err
			}
			return true, release(ctx)
		}
	}
	return d
}

// concurrencyKeysets are the key sets of BenchmarkRedisConcurrencyPairs:
// redisKeysets's, empty between pairs, and the same sizes with every key
// holding one lease of its own for the whole row (held), taken before the
// row's first pair and never released, so that each pair acquires beside
// it and releases back to it.
var concurrencyKeysets = [...]struct {
	name string
	n    int
	held bool
}{
	{"keys=10000", numRedisKeys, false},
	{"keys=10000-held", numRedisKeys, true},
	{"keys=hot", 1, false},
	{"keys=hot-held", 1, true},
}

// holdOne takes one lease on each key, with acquire, and keeps it: the
// lease it is made for outlives the row (concurrencyTTL).
func holdOne(tb testing.TB, forKey func(string) acquireFunc, keys []string) {
	for _, k := range keys {
		_, ok, err := forKey(k)(context.Background())
		if err != nil || !ok {
			tb.Fatalf("holding a lease on %s: allowed %v, %v", k, ok, err)
		}
	}
}

// BenchmarkRedisConcurrencyPairs times acquire + release pairs against a
// real Redis, with BenchmarkRedis's harness (runRedisRow): for each row
// (concurrencyImpls) and key set (concurrencyKeysets: numRedisKeys keys of
// the row's own, or one hot key, empty or each holding a lease), exactly
// that many goroutines (concurrencyGoroutines), one pair per op: ns/op is
// the time per pair, decisions/s the pairs per second, evalsha/decision the
// script calls per pair and commands/decision the commands they make. Each
// key is acquired and released once before timing (after its held lease is
// taken).
func BenchmarkRedisConcurrencyPairs(b *testing.B) {
	c := redisClient(b)
	for _, impl := range concurrencyImpls() {
		b.Run(impl.name, func(b *testing.B) {
			for _, ks := range concurrencyKeysets {
				var keys []string
				if ks.n > 1 {
					keys = redisBenchKeys(ks.n)
					forKey := impl.setup(b, c, concurrencyLimit)
					if ks.held {
						holdOne(b, forKey, keys)
					}
					touchAll(b, pairs(forKey, keys), 64)
				}
				for _, g := range concurrencyGoroutines {
					b.Run(ks.name+"/g="+strconv.Itoa(g), func(b *testing.B) {
						rowKeys := keys
						forKey := impl.setup(b, c, concurrencyLimit)
						if rowKeys == nil {
							rowKeys = redisBenchKeys(1)
							if ks.held {
								holdOne(b, forKey, rowKeys)
							}
						}
						decide := pairs(forKey, rowKeys)
						if len(rowKeys) == 1 {
							touchAll(b, decide, 1)
						}
						runRedisRow(b, c, decide, g)
					})
				}
			}
		})
	}
}

// BenchmarkConcurrencyPairs is BenchmarkRedisConcurrencyPairs's load on the
// in-process Concurrency: acquire + release pairs by exactly g goroutines
// over numRedisKeys keys (see redisLoad), and on one hot key.
func BenchmarkConcurrencyPairs(b *testing.B) {
	for _, ks := range redisKeysets {
		for _, g := range concurrencyGoroutines {
			b.Run("ratelimit-Concurrency/"+ks.name+"/g="+strconv.Itoa(g), func(b *testing.B) {
				l, err := ratelimit.NewConcurrency(concurrencyLimit, concurrencyTTL)
				decide := pairs(leases(b, l, err), benchKeys(ks.n))
				touchAll(b, decide, 2)
				load := startRedisLoad(context.Background(), decide, g, b.N, nil)
				b.ReportAllocs()
				b.ResetTimer()
				res := load.run()
				b.StopTimer()
				if res.failed > 0 || res.allowed != int64(b.N) {
					b.Fatalf("%d of %d pairs failed, %d allowed; the first error: %v", res.failed, b.N, res.allowed, res.firstErr)
				}
				reportAllowed(b, int(res.allowed))
				if s := b.Elapsed().Seconds(); s > 0 {
					b.ReportMetric(float64(b.N)/s, "pairs/s")
				}
			})
		}
	}
}

// TestConcurrencyRowsHoldTheirLimit runs the limiters of
// BenchmarkRedisConcurrencyPairs's rows at a limit of 3 in flight, 64
// goroutines on one hot key and on 5 keys, each holding its unit for a
// moment: a counter per key, raised after the acquire and lowered before
// the release, never passes 3, and some calls are denied. It needs a Redis
// ($RATELIMIT_BENCH_REDIS_ADDR) and skips without one.
func TestConcurrencyRowsHoldTheirLimit(t *testing.T) {
	c := redisClient(t)
	const limit = 3
	for _, impl := range concurrencyImpls() {
		for _, nkeys := range []int{1, 5} {
			t.Run(fmt.Sprintf("%s/keys=%d", impl.name, nkeys), func(t *testing.T) {
				forKey := impl.setup(t, c, limit)
				held := make([]atomic.Int64, nkeys)
				peak := make([]atomic.Int64, nkeys)
				decide := make([]decideFunc, nkeys)
				for i, k := range redisBenchKeys(nkeys) {
					acquire := forKey(k)
					decide[i] = func(ctx context.Context) (bool, error) {
						release, ok, err := acquire(ctx)
						if err != nil || !ok {
							return false, err
						}
						n := held[i].Add(1)
						for p := peak[i].Load(); n > p && !peak[i].CompareAndSwap(p, n); p = peak[i].Load() {
						}
						time.Sleep(100 * time.Microsecond) // the work
						held[i].Add(-1)
						return true, release(ctx)
					}
				}
				n := 200 * nkeys
				res := startRedisLoad(context.Background(), decide, 64, n, nil).run()
				if res.failed > 0 {
					t.Fatalf("%d calls failed; the first: %v", res.failed, res.firstErr)
				}
				for i := range peak {
					if p := peak[i].Load(); p > limit {
						t.Errorf("key %d: %d in flight, above the limit of %d", i, p, limit)
					}
				}
				if res.allowed == int64(n) {
					t.Errorf("all %d calls were allowed: the keys were not contended", n)
				}
			})
		}
	}
}
