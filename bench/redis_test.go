package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/ratelimit-go/ratelimit"
)

// redisAddrEnv names the environment variable that holds the host:port of
// the Redis the Redis benchmarks use. Unset, they skip. run.sh starts a
// throwaway redis-server on 127.0.0.1 and sets it.
const redisAddrEnv = "RATELIMIT_BENCH_REDIS_ADDR"

// redisPoolSize is the go-redis connection pool of every benchmark client:
// one connection for each of the most goroutines any Redis benchmark runs,
// so that no goroutine waits for a connection. All of them are dialled
// before any timing.
const redisPoolSize = 256

// redisGoroutines are the goroutine counts each BenchmarkRedis row runs at:
// exactly that many goroutines, whatever GOMAXPROCS is.
var redisGoroutines = [...]int{1, 8, 64, 256}

// redisKeysets are the key sets of BenchmarkRedis: numRedisKeys keys that
// every goroutine walks, and one hot key that every goroutine asks about.
var redisKeysets = [...]struct {
	name string
	n    int
}{
	{"keys=10000", numRedisKeys},
	{"keys=hot", 1},
}

// numRedisKeys is the size of the large key set, and redisKeyStride the step
// by which each goroutine walks it: a prime that shares no factor with
// numRedisKeys (checked by TestConfigurations), so that each goroutine visits
// every key, in an order that scatters consecutive calls over the key set.
const (
	numRedisKeys   = 10_000
	redisKeyStride = 7919
)

// redisConfig is the limit every implementation of a Redis row is given:
// limit requests per period, with bursts of up to limit (token bucket:
// capacity limit, refilling at limit/period; GCRA and redis_rate: limit per
// period, burst limit; fixed windows: limit per period-long window).
type redisConfig struct {
	limit  int
	period time.Duration
}

// rate is the token bucket's refill rate, in tokens per second.
func (c redisConfig) rate() float64 { return float64(c.limit) / c.period.Seconds() }

// redisBenchConfig is BenchmarkRedis's configuration, 1,000,000 per 1000 s:
// far more than any run makes on one key (a run makes a few hundred thousand
// calls at most, and the hot key is a new key in every run), so every call is
// allowed, which the benchmark checks. TestRedisRowsExact runs the same rows
// at a limit they reach.
var redisBenchConfig = redisConfig{limit: 1_000_000, period: 1000 * time.Second}

// redisClient returns a go-redis v9 client with a pool of redisPoolSize
// connections to the Redis at $RATELIMIT_BENCH_REDIS_ADDR, every one of them
// dialled before it returns, and closes it when tb ends. It skips tb when the
// variable is unset.
func redisClient(tb testing.TB) *redis.Client {
	return redisClientWith(tb, nil)
}

// redisClientWith is redisClient with tune, when not nil, applied to the
// client's options before the client is made.
func redisClientWith(tb testing.TB, tune func(*redis.Options)) *redis.Client {
	addr := os.Getenv(redisAddrEnv)
	if addr == "" {
		tb.Skipf("%s is not set: export it (host:port of a Redis), or use run.sh, which starts a throwaway redis-server", redisAddrEnv)
	}
	opts := &redis.Options{Addr: addr, PoolSize: redisPoolSize}
	if tune != nil {
		tune(opts)
	}
	c := redis.NewClient(opts)
	tb.Cleanup(func() { _ = c.Close() })
	// Dial every connection now: redisPoolSize sticky connections, each
	// holding its own pool connection until it is closed, so that all of
	// them are open at once; closing them puts them back in the pool, idle.
	ctx := context.Background()
	conns := make([]*redis.Conn, redisPoolSize)
	for i := range conns {
		conns[i] = c.Conn()
		if err := conns[i].Ping(ctx).Err(); err != nil {
			tb.Fatalf("Redis at %s (%s): %v", addr, redisAddrEnv, err)
		}
	}
	for _, cn := range conns {
		if err := cn.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	if n := c.PoolStats().IdleConns; n < redisPoolSize {
		tb.Fatalf("%d idle connections after dialling %d", n, redisPoolSize)
	}
	return c
}

// redisRun numbers the key sets of Redis benchmarks and tests, so that each
// gets keys of its own; redisRunBase tells this process's keys from another's
// on a Redis that outlives it.
var (
	redisRun     atomic.Int64
	redisRunBase = strconv.FormatInt(time.Now().UnixNano(), 36)
)

// redisBenchKeys returns n new keys, "ratelimit-bench:<process>:<run>:k<i>",
// that nothing earlier in this process has used.
func redisBenchKeys(n int) []string {
	run := "ratelimit-bench:" + redisRunBase + ":" + strconv.FormatInt(redisRun.Add(1), 10) + ":k"
	keys := make([]string, n)
	for i := range keys {
		keys[i] = run + strconv.Itoa(i)
	}
	return keys
}

// decideFunc makes one decision of one request for the key it was made for.
type decideFunc func(ctx context.Context) (allowed bool, err error)

// redisImpl is one implementation of BenchmarkRedis: setup makes its limiter
// for cfg on the shared client and returns forKey, which returns the decision
// for one key (so that a row can build what it sends for a key once).
type redisImpl struct {
	name  string
	setup func(tb testing.TB, c *redis.Client, cfg redisConfig) (forKey func(key string) decideFunc)
}

// rawRedisImpl names the row that is a floor, not a limiter.
const rawRedisImpl = "raw-EVALSHA-return-1"

// redisImpls returns the implementations of BenchmarkRedis, in the order the
// rows run.
func redisImpls() []redisImpl {
	return []redisImpl{
		{"ratelimit-RedisTokenBucket", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := ratelimit.NewRedisTokenBucket(c, ratelimit.Per(cfg.limit, cfg.period), cfg.limit)
			return ratelimitDecisions(tb, l, err)
		}},
		// The same limiter with one script call per decision: the path
		// every decision took before coalescing, for its latency alone.
		{"ratelimit-RedisTokenBucket-WithoutCoalescing", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := ratelimit.NewRedisTokenBucket(c, ratelimit.Per(cfg.limit, cfg.period), cfg.limit, ratelimit.WithoutCoalescing())
			return ratelimitDecisions(tb, l, err)
		}},
		{"ratelimit-RedisGCRA", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := ratelimit.NewRedisGCRA(c, cfg.limit, cfg.period)
			return ratelimitDecisions(tb, l, err)
		}},
		{"ratelimit-RedisFixedWindow", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := ratelimit.NewRedisFixedWindow(c, cfg.limit, cfg.period)
			return ratelimitDecisions(tb, l, err)
		}},
		{"ratelimit-RedisSlidingCounter", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := ratelimit.NewRedisSlidingCounter(c, cfg.limit, cfg.period)
			return ratelimitDecisions(tb, l, err)
		}},
		{"ratelimit-RedisCalendarWindow", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := ratelimit.NewRedisCalendarWindow(c, cfg.limit, ratelimit.Calendar{Period: ratelimit.CalendarMinute})
			return ratelimitDecisions(tb, l, err)
		}},
		// The sliding log's limit is at most ratelimit.MaxSlidingLogLimit:
		// a config above it (BenchmarkRedis's) gives 10,000 per 10 ms,
		// which no run reaches on one key, and whose entries leave as
		// calls come, so that each call drops old entries and appends.
		{"ratelimit-RedisSlidingLog", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			limit, period := cfg.limit, cfg.period
			if limit > ratelimit.MaxSlidingLogLimit {
				limit, period = ratelimit.MaxSlidingLogLimit, 10*time.Millisecond
			}
			l, err := ratelimit.NewRedisSlidingLog(c, limit, period)
			return ratelimitDecisions(tb, l, err)
		}},
		// The sliding log on keys that keep their entries: 10,000 per 1000 s
		// (the config's period), which no run reaches on one key (a key of
		// keys=10000 gets a few dozen calls in a run). The row above, at
		// 10 ms, finds most of its keys expired, as redis_rate's and the
		// token bucket's rows do; this one finds every key's log there and
		// growing, as the counter's and the windows' rows do.
		{"ratelimit-RedisSlidingLog-existing", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := ratelimit.NewRedisSlidingLog(c, min(cfg.limit, ratelimit.MaxSlidingLogLimit), cfg.period)
			return ratelimitDecisions(tb, l, err)
		}},
		// Two limits in one decision: a token bucket and a fixed window of
		// the same key, all or nothing, in one script request.
		{"ratelimit-Composite-RedisTokenBucket+RedisFixedWindow", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			bucket, err := ratelimit.NewRedisTokenBucket(c, ratelimit.Per(cfg.limit, cfg.period), cfg.limit)
			if err != nil {
				tb.Fatal(err)
			}
			window, err := ratelimit.NewRedisFixedWindow(c, cfg.limit, cfg.period)
			if err != nil {
				tb.Fatal(err)
			}
			l, err := ratelimit.NewComposite(
				ratelimit.Part{Name: "bucket", Limiter: bucket},
				ratelimit.Part{Name: "window", Limiter: window})
			return ratelimitDecisions(tb, l, err)
		}},
		// Requests and tokens per period in one decision: a GCRA that
		// counts calls and a token bucket of units, of one policy each.
		{"ratelimit-Composite-RedisGCRA+RedisTokenBucket", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := compositeOfPlans(tb, c, cfg, nil)
			return ratelimitDecisions(tb, l, err)
		}},
		// The same Composite whose parts choose their policy per key
		// (WithPolicyFunc), from a map of plans: each request carries each
		// part's key's limit.
		{"ratelimit-Composite-RedisGCRA+RedisTokenBucket-WithPolicyFunc", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l, err := compositeOfPlans(tb, c, cfg, benchPlans(cfg))
			return ratelimitDecisions(tb, l, err)
		}},
		// go-redis/redis_rate v10: GCRA in a Lua script (EVALSHA through
		// redis.Script), limit per period, burst limit.
		{"redis_rate", func(_ testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			l := redis_rate.NewLimiter(c)
			limit := redis_rate.Limit{Rate: cfg.limit, Burst: cfg.limit, Period: cfg.period}
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
		// window, INCRBY and PEXPIRE in a Lua script by EVALSHA. Get counts
		// one request and says whether the limit is reached.
		{"ulule-limiter", func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			store, err := ulredis.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ratelimit-bench-ulule"})
			if err != nil {
				tb.Fatal(err)
			}
			l := limiter.New(store, limiter.Rate{Period: cfg.period, Limit: int64(cfg.limit)})
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
		// sends). A key's keys slice is built once, the arguments once.
		{rawRedisImpl, func(tb testing.TB, c *redis.Client, cfg redisConfig) func(string) decideFunc {
			sha, err := c.ScriptLoad(context.Background(), "return 1").Result()
			if err != nil {
				tb.Fatal(err)
			}
			args := []any{strconv.Itoa(cfg.limit), strconv.Itoa(int(1e6 / cfg.rate())), 1}
			return func(key string) decideFunc {
				keys := []string{key}
				return func(ctx context.Context) (bool, error) {
					n, err := c.EvalSha(ctx, sha, keys, args...).Int64()
					return n == 1, err
				}
			}
		}},
	}
}

// benchPlans returns a PolicyFunc that gives a key one of three plans by
// the last character of its key, from a map, as a service would look a
// tenant's plan up: cfg's own policy, and the same limit per twice and four
// times the period (so that TestRedisRowsExact still sees each key's limit
// exactly). Every plan allows far more than a benchmark run makes.
func benchPlans(cfg redisConfig) ratelimit.PolicyFunc {
	plans := map[string]ratelimit.Policy{}
	for i := range 10 {
		plans[strconv.Itoa(i)] = ratelimit.Policy{Limit: cfg.limit, Window: cfg.period << (i % 3)}
	}
	return func(_ context.Context, key string) (ratelimit.Policy, error) {
		return plans[key[len(key)-1:]], nil
	}
}

// compositeOfPlans returns a Composite of requests (a RedisGCRA counting
// calls) and tokens (a RedisTokenBucket) per period on cfg, each built
// WithPolicyFunc(f) when f is not nil.
func compositeOfPlans(tb testing.TB, c *redis.Client, cfg redisConfig, f ratelimit.PolicyFunc) (ratelimit.Limiter, error) {
	var opts []ratelimit.RedisOption
	if f != nil {
		opts = append(opts, ratelimit.WithPolicyFunc(f))
	}
	requests, err := ratelimit.NewRedisGCRA(c, cfg.limit, cfg.period, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tokens, err := ratelimit.NewRedisTokenBucket(c, ratelimit.Per(cfg.limit, cfg.period), cfg.limit, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return ratelimit.NewComposite(
		ratelimit.Part{Name: "requests", Limiter: requests, PerCall: true},
		ratelimit.Part{Name: "tokens", Limiter: tokens})
}

// ratelimitDecisions is the forKey of a ratelimit limiter: one token of key
// per decision, through the Limiter interface. err is the constructor's.
func ratelimitDecisions(tb testing.TB, l ratelimit.Limiter, err error) func(string) decideFunc {
	if err != nil {
		tb.Fatal(err)
	}
	return func(key string) decideFunc {
		return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, key, 1)
			return res.Allowed, err
		}
	}
}

// decisions returns forKey's decision for each key.
func decisions(forKey func(string) decideFunc, keys []string) []decideFunc {
	d := make([]decideFunc, len(keys))
	for i, k := range keys {
		d[i] = forKey(k)
	}
	return d
}

// BenchmarkRedis times decisions against a real Redis: for each
// implementation (redisImpls), over a key set (redisKeysets) and with a fixed
// number of goroutines (redisGoroutines) sharing b.N calls, all through one
// go-redis client whose redisPoolSize connections are dialled up front.
//
// A row reports, besides ns/op (wall time per decision) and allocs/op (per
// decision, client side): decisions/s; the p50 and p99 latency of a call;
// allowed/op; and, from INFO read before and after the timed calls, the
// server's CPU time per decision, the EVAL/EVALSHA calls per decision and the
// time the server spent in them per decision. See runRedisRow.
//
// The large key set is the same numRedisKeys keys for every row of an
// implementation, each asked once before the first row; the hot key is a new
// key in every run, asked once before the timer starts.
func BenchmarkRedis(b *testing.B) {
	c := redisClient(b)
	for _, impl := range redisImpls() {
		b.Run(impl.name, func(b *testing.B) {
			for _, ks := range redisKeysets {
				b.Run(ks.name, func(b *testing.B) {
					var keys []string
					if ks.n > 1 {
						keys = redisBenchKeys(ks.n)
						touchAll(b, decisions(impl.setup(b, c, redisBenchConfig), keys), 64)
					}
					for _, g := range redisGoroutines {
						b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
							rowKeys := keys
							if rowKeys == nil {
								rowKeys = redisBenchKeys(ks.n)
							}
							decide := decisions(impl.setup(b, c, redisBenchConfig), rowKeys)
							if len(rowKeys) == 1 {
								touchAll(b, decide, 1)
							}
							runRedisRow(b, c, decide, g)
						})
					}
				})
			}
		})
	}
}

// touchAll makes each decision once, in goroutines goroutines, so that the
// keys exist before any timing.
func touchAll(tb testing.TB, decide []decideFunc, goroutines int) {
	var next atomic.Int64
	errs := make([]error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(decide) {
					return
				}
				if _, err := decide[i](context.Background()); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// runRedisRow times b.N decisions made by exactly goroutines goroutines that
// walk decide (see redisLoad), and reports the row's figures:
//
//   - decisions/s: b.N per second of timed wall time;
//   - p50-ns, p99-ns: the latency of one call, as its caller sees it;
//   - allowed/op: the share of calls allowed (the benchmark fails if any
//     was denied: the rows measure allowed decisions);
//   - server-us/decision: the server's CPU time (used_cpu_sys +
//     used_cpu_user of INFO cpu) over the timed calls, per decision;
//   - evalsha/decision: calls of EVALSHA, EVAL and their _RO forms
//     (INFO commandstats) over the timed calls, per decision;
//   - script-us/decision: the time the server spent in those calls
//     (their usec in INFO commandstats), per decision;
//   - commands/decision: the calls of every other command but INFO (INFO
//     commandstats; a script's own commands are counted, failed ones
//     included), per decision;
//   - client-us/decision: this process's CPU time (user and system, all
//     its threads) over the timed calls, per decision: the client's side,
//     which shares the machine with the server;
//   - allocs/op, B/op (b.ReportAllocs): per decision, client side.
//
// The INFO reads are outside the timed span, but the server's CPU figure
// counts everything the server did between them: the timed calls, its own
// periodic work and whatever other clients asked of it (none on a throwaway
// server).
func runRedisRow(b *testing.B, c *redis.Client, decide []decideFunc, goroutines int) {
	ctx := context.Background()
	lat := make([]int64, b.N)
	load := startRedisLoad(ctx, decide, goroutines, b.N, lat)
	before, err := readServerStats(ctx, c)
	if err != nil {
		load.abandon()
		b.Fatal(err)
	}
	cmdsBefore, err := readCommandCalls(ctx, c)
	if err != nil {
		load.abandon()
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	res := load.run()
	b.StopTimer()
	clientCPU := processCPU() - cpu0
	after, err := readServerStats(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	cmdsAfter, err := readCommandCalls(ctx, c)
	if err != nil {
		b.Fatal(err)
	}
	if res.failed > 0 {
		b.Fatalf("%d of %d calls failed; the first: %v", res.failed, b.N, res.firstErr)
	}
	if res.allowed != int64(b.N) {
		b.Errorf("%d of %d calls were denied: the limit was reached, and the row would mix denials into its figures; use a shorter -benchtime", int64(b.N)-res.allowed, b.N)
	}
	n := float64(b.N)
	reportAllowed(b, int(res.allowed))
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(n/s, "decisions/s")
	}
	slices.Sort(lat)
	b.ReportMetric(float64(percentile(lat, 50)), "p50-ns")
	b.ReportMetric(float64(percentile(lat, 99)), "p99-ns")
	d := after.sub(before)
	b.ReportMetric(d.cpuSeconds*1e6/n, "server-us/decision")
	b.ReportMetric(float64(clientCPU.Microseconds())/n, "client-us/decision")
	b.ReportMetric(float64(d.scriptCalls)/n, "evalsha/decision")
	b.ReportMetric(float64(d.scriptUsec)/n, "script-us/decision")
	var cmds int64
	for name, calls := range cmdsAfter {
		cmds += calls - cmdsBefore[name]
	}
	b.ReportMetric(float64(cmds)/n, "commands/decision")
}

// percentile returns the nearest-rank p-th percentile of sorted, which is
// not empty: the smallest value that at least p% of the values do not
// exceed.
func percentile(sorted []int64, p int) int64 {
	rank := (len(sorted)*p + 99) / 100 // ceil(len × p / 100)
	return sorted[max(rank, 1)-1]
}

// redisLoad is n calls made by a fixed number of goroutines. Goroutine g of
// G starts at key g·len(decide)/G and steps through decide by
// redisKeyStride (wrapping), so with one key every call asks about it, and
// with many each goroutine visits every key, the goroutines spread over the
// key set. The goroutines share the n calls through one counter; each
// records the latencies of its calls in a slice of its own (so that no two
// goroutines write one cache line), and run gathers them into lat.
type redisLoad struct {
	ctx        context.Context
	decide     []decideFunc
	goroutines int
	n          int64
	lat        []int64
	lats       [][]int64 // each goroutine's latencies, when lat is not nil
	base       time.Time // latencies are differences of time.Since(base): monotonic clock only

	next     atomic.Int64
	allowed  atomic.Int64
	failed   atomic.Int64
	firstErr atomic.Pointer[error]
	release  chan struct{}
	done     sync.WaitGroup
}

// redisLoadResult is what a redisLoad's calls decided.
type redisLoadResult struct {
	allowed, failed int64
	firstErr        error
}

// startRedisLoad starts the goroutines of a load of n calls, which wait for
// run. lat, if not nil, has n entries, which run fills with the calls'
// latencies (in no particular order).
func startRedisLoad(ctx context.Context, decide []decideFunc, goroutines, n int, lat []int64) *redisLoad {
	l := &redisLoad{
		ctx:        ctx,
		decide:     decide,
		goroutines: goroutines,
		n:          int64(n),
		lat:        lat,
		base:       time.Now(),
		release:    make(chan struct{}),
	}
	if lat != nil {
		// Room for twice a goroutine's share, so that a goroutine that makes
		// more calls than its share seldom grows its slice while timed.
		l.lats = make([][]int64, goroutines)
		for g := range l.lats {
			l.lats[g] = make([]int64, 0, 2*n/goroutines+64)
		}
	}
	for g := range goroutines {
		l.done.Go(func() { l.work(g) })
	}
	return l
}

// run releases the goroutines and returns when all n calls have returned.
func (l *redisLoad) run() redisLoadResult {
	close(l.release)
	l.done.Wait()
	if l.lat != nil {
		l.lat = l.lat[:0]
		for _, lat := range l.lats {
			l.lat = append(l.lat, lat...)
		}
	}
	r := redisLoadResult{allowed: l.allowed.Load(), failed: l.failed.Load()}
	if e := l.firstErr.Load(); e != nil {
		r.firstErr = *e
	}
	return r
}

// abandon ends the goroutines without making any call.
func (l *redisLoad) abandon() {
	l.next.Store(l.n)
	l.run()
}

func (l *redisLoad) work(g int) {
	k := len(l.decide)
	pos, stride := g*k/l.goroutines, redisKeyStride%k
	var ok, bad int64
	<-l.release
	for {
		i := l.next.Add(1) - 1
		if i >= l.n {
			break
		}
		d := l.decide[pos]
		if pos += stride; pos >= k {
			pos -= k
		}
		start := time.Since(l.base)
		a, err := d(l.ctx)
		end := time.Since(l.base)
		if l.lats != nil {
			l.lats[g] = append(l.lats[g], int64(end-start))
		}
		if err != nil {
			if bad == 0 {
				e := err // only a failing call pays for e's allocation
				l.firstErr.CompareAndSwap(nil, &e)
			}
			bad++
		}
		if a {
			ok++
		}
	}
	l.allowed.Add(ok)
	l.failed.Add(bad)
}

// serverStats is what INFO says of a Redis server's work so far.
type serverStats struct {
	cpuSeconds  float64 // used_cpu_sys + used_cpu_user: the server process
	scriptCalls int64   // calls of EVAL, EVALSHA, EVAL_RO, EVALSHA_RO
	scriptUsec  int64   // their usec: time spent executing them
}

func (s serverStats) sub(t serverStats) serverStats {
	return serverStats{s.cpuSeconds - t.cpuSeconds, s.scriptCalls - t.scriptCalls, s.scriptUsec - t.scriptUsec}
}

// readServerStats reads INFO cpu and INFO commandstats (two commands, so
// that a Redis older than 7, which takes one section, answers too).
func readServerStats(ctx context.Context, c *redis.Client) (serverStats, error) {
	cpu, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return serverStats{}, fmt.Errorf("INFO cpu: %w", err)
	}
	cmds, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return serverStats{}, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseServerStats(cpu + "\n" + cmds)
}

// scriptCommands are the commandstats entries counted as script calls.
var scriptCommands = map[string]bool{
	"cmdstat_eval": true, "cmdstat_evalsha": true,
	"cmdstat_eval_ro": true, "cmdstat_evalsha_ro": true,
}

// parseServerStats reads the fields of serverStats from INFO's text:
//
//	used_cpu_sys:1.234567
//	used_cpu_user:2.345678
//	cmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0
func parseServerStats(info string) (serverStats, error) {
	var s serverStats
	var seen int
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return s, fmt.Errorf("INFO %s: %w", name, err)
			}
			s.cpuSeconds += v
			seen++
		case scriptCommands[name]:
			for field := range strings.SplitSeq(value, ",") {
				k, v, _ := strings.Cut(field, "=")
				if k != "calls" && k != "usec" {
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return s, fmt.Errorf("INFO %s %s: %w", name, k, err)
				}
				if k == "calls" {
					s.scriptCalls += n
				} else {
					s.scriptUsec += n
				}
			}
		}
	}
	if seen != 2 {
		return s, fmt.Errorf("INFO cpu: used_cpu_sys and used_cpu_user not both found in %q", info)
	}
	return s, sc.Err()
}

// The configurations of BenchmarkRedisConfigs: the client, the state the
// keys are in when a call reaches them, and the goroutines.
var (
	// redisClientTunings are the go-redis clients: "default", the options
	// redisClient sets and nothing else; "tuned", as a performance-minded
	// deployment sets it: no CLIENT SETINFO on connect (DisableIdentity)
	// and maintenance notifications off, so that a call does not check the
	// connection for RESP3 push notifications.
	redisClientTunings = [...]struct {
		name string
		tune func(*redis.Options)
	}{
		{"default", nil},
		{"tuned", func(o *redis.Options) {
			o.DisableIdentity = true
			o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
		}},
	}
	// redisKeyStates are the key states: "existing", a limit so far above
	// the traffic that every key keeps its state between visits (see
	// redisExistingConfig); "expired", BenchmarkRedis's configuration, in
	// which a key has expired by its next visit (see redisExpiredConfig).
	redisKeyStates = [...]string{"existing", "expired"}
	// redisConfigGoroutines are the goroutine counts of BenchmarkRedisConfigs.
	redisConfigGoroutines = [...]int{64, 256}
)

// redisExistingConfig keeps every key of every row: 1,000,000 per 10^9 s,
// so that a call takes 1000 s of a token bucket's or a GCRA's key (which
// then lives 1000 s or more) and a window lasts 10^9 s, while no run makes
// more than a few hundred calls on one key.
var redisExistingConfig = redisConfig{limit: 1_000_000, period: 1_000_000_000 * time.Second}

// redisExpiredConfig returns the configuration of an implementation's
// expired rows: BenchmarkRedis's (a call leaves a token-bucket, GCRA or
// redis_rate key 1 ms from full, so it has expired when the next call on
// it comes, about 0.15 s later), but 1,000,000 per 10 ms for the fixed
// window, whose 1000 s window would outlive the run.
func redisExpiredConfig(impl string) redisConfig {
	if impl == "ratelimit-RedisFixedWindow" {
		return redisConfig{limit: 1_000_000, period: 10 * time.Millisecond}
	}
	return redisBenchConfig
}

// redisConfigImpls are the implementations of BenchmarkRedisConfigs, in
// the order of a configuration's rows (reversed when
// $RATELIMIT_BENCH_REVERSE is set, so that a script can alternate it from
// round to round).
var redisConfigImpls = []string{"redis_rate", rawRedisImpl, "ratelimit-RedisTokenBucket", "ratelimit-RedisGCRA", "ratelimit-RedisFixedWindow"}

// redisConfigsRunEnv names the environment variable that must be set for
// BenchmarkRedisConfigs to run.
const redisConfigsRunEnv = "RATELIMIT_BENCH_REDIS_CONFIGS"

// BenchmarkRedisConfigs times the three plain Redis limiters, redis_rate
// and raw EVALSHA of `return 1` in every configuration a deployment runs
// them in: client=default|tuned (redisClientTunings) × keys=existing|expired
// (redisKeyStates) × g=64|256, over numRedisKeys keys, with the figures of
// runRedisRow. A configuration's rows run one after the other, so that the
// ratios within it compare rows measured seconds apart. Each row of an
// implementation, client and key state walks the same keys, each asked once
// before the configuration's first row.
//
// Besides runRedisRow's figures a row reports load1, the machine's load
// average over the last minute as the row ends (the server and the client
// share the machine), and the calls per decision of the commands the
// scripts made (INFO commandstats), which show the path each took: pttl,
// the commands that read a key (get, hget, hgetall, hmget) and those that
// write one (set, hset, incrby, pexpire, ...).
func BenchmarkRedisConfigs(b *testing.B) {
	if os.Getenv(redisConfigsRunEnv) == "" {
		// 40 rows of 10,000 keys each: for results/floor-redis.sh, which
		// sets it, not for every run of every benchmark.
		b.Skipf("set %s=1 to run it (results/floor-redis.sh does)", redisConfigsRunEnv)
	}
	impls := map[string]redisImpl{}
	for _, impl := range redisImpls() {
		impls[impl.name] = impl
	}
	order := slices.Clone(redisConfigImpls)
	if os.Getenv("RATELIMIT_BENCH_REVERSE") != "" {
		slices.Reverse(order)
	}
	for _, tuning := range redisClientTunings {
		b.Run("client="+tuning.name, func(b *testing.B) {
			c := redisClientWith(b, tuning.tune)
			for _, state := range redisKeyStates {
				b.Run("keys="+state, func(b *testing.B) {
					// Each implementation's keys, asked once.
					decide := map[string][]decideFunc{}
					for _, name := range order {
						cfg := redisExistingConfig
						if state == "expired" {
							cfg = redisExpiredConfig(name)
						}
						decide[name] = decisions(impls[name].setup(b, c, cfg), redisBenchKeys(numRedisKeys))
						touchAll(b, decide[name], 64)
					}
					for _, g := range redisConfigGoroutines {
						b.Run("g="+strconv.Itoa(g), func(b *testing.B) {
							for _, name := range order {
								b.Run(name, func(b *testing.B) {
									before, err := readCommandCalls(context.Background(), c)
									if err != nil {
										b.Fatal(err)
									}
									runRedisRow(b, c, decide[name], g)
									after, err := readCommandCalls(context.Background(), c)
									if err != nil {
										b.Fatal(err)
									}
									reportCommands(b, before, after)
									b.ReportMetric(loadAverage(), "load1")
								})
							}
						})
					}
				})
			}
		})
	}
}

// reportCommands reports the calls per decision (b.N) of each command
// between before and after (readCommandCalls): pttl alone, the reads and
// the writes summed, and any other command made from the scripts, each
// under its own name.
func reportCommands(b *testing.B, before, after map[string]int64) {
	reads := map[string]bool{"get": true, "hget": true, "hgetall": true, "hmget": true}
	var nreads, nwrites, npttl int64
	for name, calls := range after {
		d := calls - before[name]
		switch {
		case d <= 0 || name == "time" || name == "script|load" || name == "ping":
		case name == "pttl":
			npttl += d
		case reads[name]:
			nreads += d
		default:
			nwrites += d
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(npttl)/n, "pttl/decision")
	b.ReportMetric(float64(nreads)/n, "reads/decision")
	b.ReportMetric(float64(nwrites)/n, "writes/decision")
}

// loadAverage returns the machine's load average over the last minute
// (/proc/loadavg), or -1 where it cannot be read.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, _, _ := strings.Cut(string(data), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return -1
	}
	return v
}
