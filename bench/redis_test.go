package bench

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratelimit-go/ratelimit"
)

// redisAddrEnv names the environment variable that holds the host:port of
// the Redis the BenchmarkRedis* benchmarks use. Unset, they skip. run.sh
// starts a throwaway redis-server on 127.0.0.1 and sets it.
const redisAddrEnv = "RATELIMIT_BENCH_REDIS_ADDR"

// redisPoolSize is the go-redis connection pool of every benchmark client:
// at least one connection for each of the most goroutines any Redis
// benchmark runs, so that no goroutine waits for a connection.
const redisPoolSize = 64

// redisGoroutines are the goroutine counts each BenchmarkRedis row runs at.
var redisGoroutines = [...]int{1, 64}

// The Redis configuration, the same for every implementation: 1,000,000
// requests per 1000 s with bursts of 1,000,000 (token bucket: capacity 1e6,
// 1000 tokens/s; GCRA: 1e6 per 1000 s, 1 ms per request; fixed windows:
// 1e6 per 1000 s window). Every sub-benchmark run uses keys of its own, so a
// key starts full (or with no window open) and is allowed until it has been
// asked 1e6 times in that run, far more than a run makes (about 50k calls per
// key per second of -benchtime): every call is allowed, and every call but a
// key's first finds its state in Redis and writes it back.
const (
	redisLimit  = 1_000_000
	redisPeriod = 1000 * time.Second
	redisRate   = float64(redisLimit) / 1000 // tokens per second
)

// redisClient returns a go-redis v9 client of redisPoolSize connections to
// the Redis at $RATELIMIT_BENCH_REDIS_ADDR, all of them dialled before it
// returns, and closes it when b ends. It skips b when the variable is unset.
func redisClient(b *testing.B) *redis.Client {
	addr := os.Getenv(redisAddrEnv)
	if addr == "" {
		b.Skipf("%s is not set: export it (host:port of a Redis), or use run.sh, which starts a throwaway redis-server", redisAddrEnv)
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: redisPoolSize})
	b.Cleanup(func() { _ = c.Close() })
	// Dial every connection now, with as many PINGs at once as the pool
	// holds, so that no timed call pays for a dial.
	var wg sync.WaitGroup
	errs := make([]error, redisPoolSize)
	for i := range errs {
		wg.Go(func() { errs[i] = c.Ping(context.Background()).Err() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatalf("Redis at %s (%s): %v", addr, redisAddrEnv, err)
		}
	}
	return c
}

// redisRun numbers the runs of Redis sub-benchmarks, so that each run uses
// keys of its own; redisRunBase tells this process's keys from another's on
// a Redis that outlives it.
var (
	redisRun     atomic.Int64
	redisRunBase = strconv.FormatInt(time.Now().UnixNano(), 36)
)

// redisBenchKeys returns n new keys, "ratelimit-bench:<process>:<run>:g<i>",
// that no earlier run has used.
func redisBenchKeys(n int) []string {
	run := "ratelimit-bench:" + redisRunBase + ":" + strconv.FormatInt(redisRun.Add(1), 10) + ":g"
	keys := make([]string, n)
	for i := range keys {
		keys[i] = run + strconv.Itoa(i)
	}
	return keys
}

// decideFunc makes one decision of one request for the key it was made for.
type decideFunc func(ctx context.Context) (allowed bool, err error)

// redisImpl is one row of BenchmarkRedis: setup makes the limiter on the
// shared client and returns forKey, which returns the decision for one key
// (so that a row can build what it sends for that key once).
type redisImpl struct {
	name  string
	setup func(b *testing.B, c *redis.Client) (forKey func(key string) decideFunc)
}

// BenchmarkRedis times one decision per call against a real Redis, for each
// implementation, with 1 and with 64 goroutines sharing one go-redis client
// (PoolSize 64). Goroutine g always asks about its own key, keys[g]: no two
// goroutines share a key, so the 64-goroutine rows measure the client and
// the server under concurrency, not 64 writers queueing on one key's state
// (Redis runs scripts one at a time anyway; a shared key would only change
// which state each script finds). Each row reports allowed/op and ops/s,
// the calls of all goroutines per second of wall time.
func BenchmarkRedis(b *testing.B) {
	impls := []redisImpl{
		{"ratelimit-RedisTokenBucket", func(b *testing.B, c *redis.Client) func(string) decideFunc {
			l, err := ratelimit.NewRedisTokenBucket(c, redisLimit, redisRate)
			return ratelimitDecisions(b, l, err)
		}},
		{"ratelimit-RedisGCRA", func(b *testing.B, c *redis.Client) func(string) decideFunc {
			l, err := ratelimit.NewRedisGCRA(c, redisLimit, redisPeriod)
			return ratelimitDecisions(b, l, err)
		}},
		{"ratelimit-RedisFixedWindow", func(b *testing.B, c *redis.Client) func(string) decideFunc {
			l, err := ratelimit.NewRedisFixedWindow(c, redisLimit, redisPeriod)
			return ratelimitDecisions(b, l, err)
		}},
		// go-redis/redis_rate v10: GCRA in a Lua script (EVALSHA through
		// redis.Script, as ratelimit's), the same 1e6 per 1000 s, burst 1e6.
		{"redis_rate", func(b *testing.B, c *redis.Client) func(string) decideFunc {
			l := redis_rate.NewLimiter(c)
			limit := redis_rate.Limit{Rate: redisLimit, Burst: redisLimit, Period: redisPeriod}
			return func(key string) decideFunc {
				return func(ctx context.Context) (bool, error) {
					res, err := l.Allow(ctx, key, limit)
					if err != nil {
						return false, err
					}
					return res.Allowed > 0, nil
				}
			}
		}},
		// ulule/limiter v3 with its Redis store (go-redis v9): a fixed
		// window, INCRBY and PEXPIRE in a Lua script by EVALSHA, 1e6 per
		// 1000 s. Get counts one request and says whether the limit is
		// reached.
		{"ulule-limiter", func(b *testing.B, c *redis.Client) func(string) decideFunc {
			store, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ratelimit-bench-ulule"})
			if err != nil {
				b.Fatal(err)
			}
			l := limiter.New(store, limiter.Rate{Period: redisPeriod, Limit: redisLimit})
			return func(key string) decideFunc {
				return func(ctx context.Context) (bool, error) {
					lc, err := l.Get(ctx, key)
					return err == nil && !lc.Reached, err
				}
			}
		}},
		// The round-trip floor: EVALSHA of a script that only returns 1,
		// through the same client, with the same shape of call as
		// ratelimit's (one key and the three arguments RedisTokenBucket
		// sends: "1000000", "1000", 1). The keys and arguments are built
		// once per goroutine, not per call.
		{"raw-EVALSHA-return-1", func(b *testing.B, c *redis.Client) func(string) decideFunc {
			sha, err := c.ScriptLoad(context.Background(), "return 1").Result()
			if err != nil {
				b.Fatal(err)
			}
			limit, interval := strconv.Itoa(redisLimit), strconv.Itoa(int(1e6/redisRate))
			return func(key string) decideFunc {
				keys, args := []string{key}, []any{limit, interval, 1}
				return func(ctx context.Context) (bool, error) {
					n, err := c.EvalSha(ctx, sha, keys, args...).Int64()
					return n == 1, err
				}
			}
		}},
	}

	c := redisClient(b)
	for _, impl := range impls {
		b.Run(impl.name, func(b *testing.B) {
			for _, g := range redisGoroutines {
				b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
					forKey := impl.setup(b, c)
					decide := make([]decideFunc, g)
					for i, k := range redisBenchKeys(g) {
						decide[i] = forKey(k)
					}
					runRedis(b, decide, nil)
				})
			}
		})
	}
}

// runRedis times the decisions in len(decide) goroutines, goroutine i always
// calling decide[i], and reports allowed/op, ops/s (calls of all goroutines
// per second of wall time) and how many goroutines ran. One goroutine is a
// plain loop; more use b.RunParallel with the parallelism that makes
// GOMAXPROCS × parallelism = len(decide) (32 on this 2-core machine for 64).
// Each decision is made once before the timer starts, so that the timed calls
// find their key in Redis; then atStart, if not nil, is called.
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

// ratelimitDecisions is the forKey of a ratelimit limiter row: one token of
// key per decision. err is the constructor's.
func ratelimitDecisions(b *testing.B, l ratelimit.Limiter, err error) func(string) decideFunc {
	if err != nil {
		b.Fatal(err)
	}
	return func(key string) decideFunc {
		return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, key, 1)
			return res.Allowed, err
		}
	}
}
