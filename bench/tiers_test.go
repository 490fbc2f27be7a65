package bench

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
)

// The per-key-policy benchmarks compare each limiter built with one policy
// ("fixed") with the same limiter built WithPolicyFunc ("PolicyFunc"), the
// function being what a service with plans would write: the key names its
// plan, and the plans are a small map held in an atomic.Pointer, so that
// they can be replaced while the program runs.
//
// A key's plan is the text after its last ':' ("hot:pro", "key:7:free"); a
// key without one, or with a plan the map does not hold, gets the zero
// Policy, that is the limiter's own. The fixed rows decide the very same
// keys, with their one policy for every key.

// tierPlanNames are the three plans. Every benchmark gives "pro" the fixed
// limiter's own policy.
var tierPlanNames = [3]string{"free", "pro", "team"}

// tierPlans is one version of the plans: plan name → policy.
type tierPlans struct {
	byName map[string]ratelimit.Policy
}

// planBook holds the plans in force. Its policy method is the PolicyFunc.
type planBook struct {
	cur atomic.Pointer[tierPlans]
}

// newPlanBook returns a planBook holding the three plans, in the order of
// tierPlanNames.
func newPlanBook(free, pro, team ratelimit.Policy) *planBook {
	pb := &planBook{}
	pb.cur.Store(&tierPlans{byName: map[string]ratelimit.Policy{
		tierPlanNames[0]: free,
		tierPlanNames[1]: pro,
		tierPlanNames[2]: team,
	}})
	return pb
}

// policy is the PolicyFunc: the policy of key's plan.
func (pb *planBook) policy(_ context.Context, key string) (ratelimit.Policy, error) {
	i := strings.LastIndexByte(key, ':')
	if i < 0 {
		return ratelimit.Policy{}, nil
	}
	return pb.cur.Load().byName[key[i+1:]], nil
}

// tiersHotKey is the hot key of BenchmarkTiersHotKey, on the "pro" plan.
const tiersHotKey = "hot:pro"

// hotPlans returns the plans of BenchmarkTiersHotKey for a limiter whose
// own policy is pro: only "pro" is ever asked for.
func hotPlans(pro ratelimit.Policy) *planBook {
	return newPlanBook(
		ratelimit.Policy{Limit: 1 << 10, Window: hotPeriod},
		pro,
		ratelimit.Policy{Limit: 2 * hotCapacity, Window: 2 * hotPeriod},
	)
}

// policyOf returns the one policy l decides key's calls by, as its
// Policies tell it without deciding anything or asking a backend: the
// limiter's own, or, for a limiter built WithPolicyFunc, the key's.
func policyOf(b *testing.B, l ratelimit.Limiter, key string) ratelimit.Policy {
	b.Helper()
	d, ok := l.(ratelimit.Decider)
	if !ok {
		b.Fatalf("a %T is not a ratelimit.Decider", l)
	}
	ps, err := d.Policies(context.Background(), key)
	if err != nil {
		b.Fatal(err)
	}
	if len(ps) != 1 {
		b.Fatalf("key %q has %d policies, want 1", key, len(ps))
	}
	return ps[0].Policy
}

// checkSamePolicy fails b unless l, built WithPolicyFunc, gives key the
// policy want: then l decides key exactly as the fixed limiter of policy
// want does.
func checkSamePolicy(b *testing.B, l ratelimit.Limiter, key string, want ratelimit.Policy) {
	b.Helper()
	if p := policyOf(b, l, key); p != want {
		b.Fatalf("key %q has policy %+v, want the fixed limiter's %+v", key, p, want)
	}
}

// hotBlock makes n calls of one token of tiersHotKey and returns how many
// were allowed; it stops at the first error.
type hotBlock func(n int) (allowed int, err error)

// hotAlgo is one limiter of BenchmarkTiersHotKey: build makes it in the
// hot-key configuration with opts and returns it with its hotBlock.
type hotAlgo struct {
	name  string
	build func(b *testing.B, opts ...ratelimit.Option) (ratelimit.Limiter, hotBlock)
}

// hotAlgos are BenchmarkTiersHotKey's limiters. Each hotBlock calls its
// limiter's concrete type, so that the call is direct, as in
// BenchmarkHotKey (a dynamic call costs a few ns where the whole call is
// under 100).
var hotAlgos = []hotAlgo{
	{"TokenBucket", func(b *testing.B, opts ...ratelimit.Option) (ratelimit.Limiter, hotBlock) {
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(hotRate), hotCapacity, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return l, func(n int) (int, error) {
			ctx := context.Background()
			allowed := 0
			for range n {
				res, err := l.Allow(ctx, tiersHotKey, 1)
				if err != nil {
					return allowed, err
				}
				if res.Allowed {
					allowed++
				}
			}
			return allowed, nil
		}
	}},
	{"GCRA", func(b *testing.B, opts ...ratelimit.Option) (ratelimit.Limiter, hotBlock) {
		l, err := ratelimit.NewGCRA(hotCapacity, hotPeriod, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return l, func(n int) (int, error) {
			ctx := context.Background()
			allowed := 0
			for range n {
				res, err := l.Allow(ctx, tiersHotKey, 1)
				if err != nil {
					return allowed, err
				}
				if res.Allowed {
					allowed++
				}
			}
			return allowed, nil
		}
	}},
	{"FixedWindow", func(b *testing.B, opts ...ratelimit.Option) (ratelimit.Limiter, hotBlock) {
		l, err := ratelimit.NewFixedWindow(hotCapacity, hotPeriod, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return l, func(n int) (int, error) {
			ctx := context.Background()
			allowed := 0
			for range n {
				res, err := l.Allow(ctx, tiersHotKey, 1)
				if err != nil {
					return allowed, err
				}
				if res.Allowed {
					allowed++
				}
			}
			return allowed, nil
		}
	}},
}

// hotTiers returns a's limiter built WithPolicyFunc, on hotPlans of the
// fixed limiter's policy, after checking that it gives tiersHotKey that
// policy; constant, it is instead built with a PolicyFunc that returns
// that policy without looking at the key, to tell what the library costs
// from what the plan lookup costs.
func hotTiers(b *testing.B, a hotAlgo, constant bool) hotBlock {
	fixed, _ := a.build(b)
	pro := policyOf(b, fixed, tiersHotKey)
	f := hotPlans(pro).policy
	if constant {
		f = func(context.Context, string) (ratelimit.Policy, error) { return pro, nil }
	}
	l, blk := a.build(b, ratelimit.WithPolicyFunc(f))
	checkSamePolicy(b, l, tiersHotKey, pro)
	return blk
}

// hotTable returns a's limiter built WithPolicyFunc on a PolicyTable
// (loaded from a miniredis, then read locally) that holds each hot key's
// plan, tiersHotKey's being the fixed limiter's policy, after checking
// that it gives tiersHotKey that policy: the fleet-wide table in place of
// the service's own map.
func hotTable(b *testing.B, a hotAlgo) hotBlock {
	fixed, _ := a.build(b)
	pro := policyOf(b, fixed, tiersHotKey)
	m := miniredis.RunT(b)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	b.Cleanup(func() { _ = client.Close() })
	table, err := ratelimit.NewPolicyTable(client, ratelimit.PolicyTableConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	plans := hotPlans(pro).cur.Load().byName
	entries := make(map[string]ratelimit.Policy, len(plans))
	for name, p := range plans {
		entries["hot:"+name] = p
	}
	if err := table.Replace(ctx, ratelimit.PolicyTableEntries{Policies: entries}); err != nil {
		b.Fatal(err)
	}
	if err := table.Load(ctx); err != nil {
		b.Fatal(err)
	}
	l, blk := a.build(b, ratelimit.WithPolicyFunc(table.PolicyFunc()))
	checkSamePolicy(b, l, tiersHotKey, pro)
	return blk
}

// BenchmarkTiersHotKey is BenchmarkHotKey's ratelimit rows (one goroutine,
// one key, the system clock, the hot-key configuration, so every call is
// allowed), each limiter fixed and WithPolicyFunc, the hot key's plan being
// the fixed limiter's policy: the same decisions, plus the PolicyFunc. Rows
// run in the order fixed, PolicyFunc for each algorithm.
//
// "interleaved/<algo>" runs, in each of its b.N iterations, one call of
// each of four limiters: fixed, PolicyFunc, PolicyFunc-const (a
// PolicyFunc that returns the fixed policy without a lookup), and
// PolicyTable (a PolicyTable's PolicyFunc, see hotTable), in blocks of
// rotationBlock calls, one limiter after the other, each cycle starting one
// limiter further on, timing each block (as BenchmarkMiddleware's
// "interleaved" row does). The limiters are measured within a millisecond
// of each other, so a change in the machine's speed hits them alike. It
// reports each one's ns per call, PolicyFunc-ratio, PolicyFunc's time
// over fixed's, and PolicyTable-ratio, PolicyTable's over fixed's.
func BenchmarkTiersHotKey(b *testing.B) {
	for _, a := range hotAlgos {
		b.Run("fixed/"+a.name, func(b *testing.B) {
			_, blk := a.build(b)
			hotLoop(b, blk)
		})
		b.Run("PolicyFunc/"+a.name, func(b *testing.B) {
			hotLoop(b, hotTiers(b, a, false))
		})
	}
	for _, a := range hotAlgos {
		b.Run("interleaved/"+a.name, func(b *testing.B) {
			_, fixed := a.build(b)
			blocks := []hotBlock{fixed, hotTiers(b, a, false), hotTiers(b, a, true), hotTable(b, a)}
			names := []string{"fixed", "PolicyFunc", "PolicyFunc-const", "PolicyTable"}
			b.ReportAllocs()
			spent := make([]time.Duration, len(blocks))
			allowed := make([]int, len(blocks))
			b.ResetTimer()
			for done, cycle := 0, 0; done < b.N; done, cycle = done+rotationBlock, cycle+1 {
				n := min(rotationBlock, b.N-done)
				for j := range blocks {
					k := (cycle + j) % len(blocks)
					t0 := time.Now()
					ok, err := blocks[k](n)
					spent[k] += time.Since(t0)
					if err != nil {
						b.Fatal(err)
					}
					allowed[k] += ok
				}
			}
			b.StopTimer()
			for k, name := range names {
				b.ReportMetric(float64(spent[k])/float64(b.N), name+"-ns/op")
			}
			b.ReportMetric(float64(spent[1])/float64(spent[0]), "PolicyFunc-ratio")
			b.ReportMetric(float64(spent[3])/float64(spent[0]), "PolicyTable-ratio")
			reportAllowed(b, min(allowed[0], allowed[1], allowed[2], allowed[3]))
		})
	}
}

// hotLoop times b.N calls of blk and reports the share allowed.
func hotLoop(b *testing.B, blk hotBlock) {
	b.ReportAllocs()
	b.ResetTimer()
	allowed, err := blk(b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	reportAllowed(b, allowed)
}

var (
	tierKeysOnce sync.Once
	tierKeysAll  []string
)

// tierKeys returns BenchmarkTiersManyKeys's numParallelKeys keys,
// "key:<i>:<plan>", key i on plan tierPlanNames[i%3], built once.
func tierKeys() []string {
	tierKeysOnce.Do(func() {
		tierKeysAll = make([]string, numParallelKeys)
		for i := range tierKeysAll {
			tierKeysAll[i] = "key:" + strconv.Itoa(i) + ":" + tierPlanNames[i%len(tierPlanNames)]
		}
	})
	return tierKeysAll
}

// manyPlans are BenchmarkTiersManyKeys's plans: "pro" is the fixed
// limiters' policy, 1<<20 per 1<<20 s; "free" a smaller burst at the same
// rate; "team" a larger burst at twice the rate. A run asks each key far
// fewer than 1<<16 times, so every call is allowed on every plan.
func manyPlans() *planBook {
	return newPlanBook(
		ratelimit.Policy{Limit: 1 << 16, Window: (1 << 16) * time.Second},
		ratelimit.Policy{Limit: manyCapacity, Window: manyPeriod},
		ratelimit.Policy{Limit: 2 * manyCapacity, Window: manyPeriod},
	)
}

// manyAlgos are BenchmarkTiersManyKeys's limiters, in the many-keys
// configuration, built with opts.
var manyAlgos = []struct {
	name  string
	build func(opts ...ratelimit.Option) (ratelimit.Limiter, error)
}{
	{"TokenBucket", func(opts ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewTokenBucket(ratelimit.PerSecond(manyRate), manyCapacity, opts...)
	}},
	{"GCRA", func(opts ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewGCRA(manyCapacity, manyPeriod, opts...)
	}},
	{"FixedWindow", func(opts ...ratelimit.Option) (ratelimit.Limiter, error) {
		return ratelimit.NewFixedWindow(manyCapacity, manyPeriod, opts...)
	}},
}

// BenchmarkTiersManyKeys is BenchmarkManyKeysParallel's ratelimit rows (two
// goroutines over 100,000 keys that already exist, every call allowed),
// each limiter fixed and WithPolicyFunc. The keys are spread evenly over
// the three plans (key i on plan i%3), so with the PolicyFunc a third of
// the calls get the limiter's own policy and two thirds another one; the
// fixed limiter decides every key by its one policy ("pro").
//
// "interleaved/<algo>" has both limiters (every key touched in each) and
// makes, in each of its b.N iterations, one call of each: each goroutine
// walks the keys (as runParallelKeys does) in blocks of rotationBlock calls,
// one limiter after the other, the first of each cycle alternating, timing
// each block. It reports each one's time per call (goroutine time over
// calls over goroutines, so comparable with the other rows' ns/op) and
// PolicyFunc-ratio, PolicyFunc's time over fixed's.
func BenchmarkTiersManyKeys(b *testing.B) {
	keys := tierKeys()
	withPlans := func() ratelimit.Option { return ratelimit.WithPolicyFunc(manyPlans().policy) }
	for _, a := range manyAlgos {
		b.Run("fixed/"+a.name, func(b *testing.B) {
			l, err := a.build()
			runParallelRatelimit(b, keys, l, err)
		})
		b.Run("PolicyFunc/"+a.name, func(b *testing.B) {
			l, err := a.build(withPlans())
			runParallelRatelimit(b, keys, l, err)
		})
	}
	for _, a := range manyAlgos {
		b.Run("interleaved/"+a.name, func(b *testing.B) {
			fixed, err := a.build()
			if err != nil {
				b.Fatal(err)
			}
			tiered, err := a.build(withPlans())
			if err != nil {
				b.Fatal(err)
			}
			runParallelInterleaved(b, keys, [2]ratelimit.Limiter{fixed, tiered}, [2]string{"fixed", "PolicyFunc"})
		})
	}
}

// runParallelInterleaved touches every key in each of ls, then times, in
// parallelGoroutines goroutines, b.N calls of each limiter, in alternating
// blocks (see BenchmarkTiersManyKeys).
func runParallelInterleaved(b *testing.B, keys []string, ls [2]ratelimit.Limiter, names [2]string) {
	ctx := context.Background()
	for _, l := range ls {
		for _, k := range keys {
			if _, err := l.Allow(ctx, k, 1); err != nil {
				b.Fatal(err)
			}
		}
	}
	procs := runtime.GOMAXPROCS(0)
	parallelism := max(1, parallelGoroutines/procs)
	b.SetParallelism(parallelism)
	goroutines := parallelism * procs

	var nextID, started atomic.Int64
	var spent, allowed [2]atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		g := int(nextID.Add(1) - 1)
		started.Add(1)
		n := len(keys)
		stride := strides[g%len(strides)] % n
		start := (g % goroutines) * n / goroutines
		pos := [2]int{start, start}
		var took [2]time.Duration
		var ok [2]int64
		for cycle := g; ; cycle++ {
			m := 0
			for m < rotationBlock && pb.Next() {
				m++
			}
			if m == 0 {
				break
			}
			for j := range 2 {
				k := (cycle + j) % 2
				l, i := ls[k], pos[k]
				t0 := time.Now()
				for range m {
					if res, err := l.Allow(ctx, keys[i], 1); err == nil && res.Allowed {
						ok[k]++
					}
					if i += stride; i >= n {
						i -= n
					}
				}
				took[k] += time.Since(t0)
				pos[k] = i
			}
		}
		for k := range 2 {
			spent[k].Add(int64(took[k]))
			allowed[k].Add(ok[k])
		}
	})
	b.StopTimer()
	for k, name := range names {
		b.ReportMetric(float64(spent[k].Load())/float64(b.N)/float64(goroutines), name+"-ns/op")
	}
	b.ReportMetric(float64(spent[1].Load())/float64(spent[0].Load()), names[1]+"-ratio")
	b.ReportMetric(float64(min(allowed[0].Load(), allowed[1].Load()))/float64(b.N), "allowed/op")
	b.ReportMetric(float64(started.Load()), "goroutines")
}

// tiersRedisGoroutines is how many goroutines BenchmarkTiersRedis runs.
const tiersRedisGoroutines = 64

// redisPlans are BenchmarkTiersRedis's plans: "pro" is redisBenchConfig
// (1,000,000 per 1000 s), the fixed limiters' policy; "free" 100,000 per
// 100 s, "team" 2,000,000 per 1000 s. A row asks each key a few dozen
// times, so every call is allowed on every plan.
func redisPlans() *planBook {
	return newPlanBook(
		ratelimit.Policy{Limit: 100_000, Window: 100 * time.Second},
		ratelimit.Policy{Limit: redisBenchConfig.limit, Window: redisBenchConfig.period},
		ratelimit.Policy{Limit: 2 * redisBenchConfig.limit, Window: redisBenchConfig.period},
	)
}

// tierRedisKeys returns n new keys (see redisBenchKeys), key i on plan
// tierPlanNames[i%3]: "ratelimit-bench:<process>:<run>:k<i>:<plan>".
func tierRedisKeys(n int) []string {
	keys := redisBenchKeys(n)
	for i := range keys {
		keys[i] += ":" + tierPlanNames[i%len(tierPlanNames)]
	}
	return keys
}

// BenchmarkTiersRedis is BenchmarkRedis's keys=10000/g=64 rows for the three
// Redis limiters, each fixed and WithPolicyFunc (with coalescing, the
// default, in both): 64 goroutines over 10,000 keys spread evenly over the
// three plans, through the same client and harness (runRedisRow). Each row
// has a key set of its own, every key asked once before the timed calls.
// The PolicyFunc limiters keep their keys under their own prefix
// (DefaultKeyPrefix + "tb:keyed:" and their own policy, and so on).
func BenchmarkTiersRedis(b *testing.B) {
	c := redisClient(b)
	cfg := redisBenchConfig
	algos := []struct {
		name string
		make func(opts ...ratelimit.RedisOption) (ratelimit.Limiter, error)
	}{
		{"RedisTokenBucket", func(opts ...ratelimit.RedisOption) (ratelimit.Limiter, error) {
			return ratelimit.NewRedisTokenBucket(c, ratelimit.Per(cfg.limit, cfg.period), cfg.limit, opts...)
		}},
		{"RedisGCRA", func(opts ...ratelimit.RedisOption) (ratelimit.Limiter, error) {
			return ratelimit.NewRedisGCRA(c, cfg.limit, cfg.period, opts...)
		}},
		{"RedisFixedWindow", func(opts ...ratelimit.RedisOption) (ratelimit.Limiter, error) {
			return ratelimit.NewRedisFixedWindow(c, cfg.limit, cfg.period, opts...)
		}},
	}
	for _, a := range algos {
		for _, mode := range [...]string{"fixed", "PolicyFunc"} {
			b.Run(mode+"/"+a.name, func(b *testing.B) {
				var opts []ratelimit.RedisOption
				if mode == "PolicyFunc" {
					opts = append(opts, ratelimit.WithPolicyFunc(redisPlans().policy))
				}
				l, err := a.make(opts...)
				if err != nil {
					b.Fatal(err)
				}
				pro := redisPlans().cur.Load().byName["pro"]
				// A key on no plan is decided by the constructor's
				// policy, with or without the PolicyFunc.
				if p := policyOf(b, l, "no plan"); p != pro {
					b.Fatalf("the limiter's policy is %+v, not plan pro's", p)
				}
				keys := tierRedisKeys(numRedisKeys)
				if mode == "PolicyFunc" {
					// A key on plan pro (key 1, tierPlanNames[1]) goes
					// through the PolicyFunc, which must give it that
					// policy.
					checkSamePolicy(b, l, keys[1], pro)
				}
				forKey := ratelimitDecisions(b, l, nil)
				touchAll(b, decisions(forKey, keys), 64)
				b.Run("g="+strconv.Itoa(tiersRedisGoroutines), func(b *testing.B) {
					runRedisRow(b, c, decisions(forKey, keys), tiersRedisGoroutines)
				})
			})
		}
	}
}
