package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// oneCallRunEnv names the environment variable that must be set for
// BenchmarkRedisOneCall to run.
const oneCallRunEnv = "RATELIMIT_BENCH_ONE_CALL"

// oneCallKind is a kind's limit in BenchmarkRedisOneCall.
type oneCallKind struct {
	kind         redisbatch.Kind
	limit, param any
}

// BenchmarkRedisOneCall measures the fixed cost of one script call: a
// batch of one request, on a key that exists, for each kind and both
// forms (compact, general), on a throwaway redis-server of its own. It
// compares the frozen script of every kind (batch_v0.lua), the assembled
// script of every kind, the script of the kind alone (what a limiter of
// that kind sends) and "return 1". A figure is the server's time per call,
// µs (usec_per_call of EVALSHA in INFO commandstats), the median of the
// rounds in which every row runs once (7, or the whole number of at least
// 3 that RATELIMIT_BENCH_ONE_CALL gives), the scripts of a kind in an
// order rotated from round to round; rows of one kind run seconds apart.
// Beside the ratio of medians it gives the median of each round's ratio
// and the ratio of each script's fastest round, which the machine's load
// disturbs less, and own-kind's ratio, by round, to the second column: the
// every-kind script, or, with RATELIMIT_BENCH_ONE_CALL_BASE naming a
// directory of another commit's Lua files, the kind's own script of those
// files ("base own"). It prints a table to stdout; run it with -benchtime 1x.
func BenchmarkRedisOneCall(b *testing.B) {
	if os.Getenv(oneCallRunEnv) == "" {
		b.Skipf("set %s=1 to run it", oneCallRunEnv)
	}
	const keys, calls = 500, 3000
	rounds := 7
	if n, err := strconv.Atoi(os.Getenv(oneCallRunEnv)); err == nil && n >= 3 {
		rounds = n
	}
	// RATELIMIT_BENCH_ONE_CALL_BASE, a directory of the Lua files of
	// another commit, puts the kind's own script of those files in the
	// every-kind column ("base own"), to time a change of the files.
	base := os.Getenv("RATELIMIT_BENCH_ONE_CALL_BASE")
	secondName := "every-kind"
	if base != "" {
		secondName = "base own"
	}
	c := redistest.Start(b).Client(b)
	ctx := context.Background()
	v0, err := os.ReadFile("../internal/redisbatch/testdata/batch_v0.lua")
	if err != nil {
		b.Fatal(err)
	}
	all, err := redisbatch.Assemble(os.DirFS("../scripts"), redisbatch.ServerTime, redisbatch.LuaKinds()...)
	if err != nil {
		b.Fatal(err)
	}
	hour := time.Now().Truncate(time.Hour)
	cal := fmt.Sprintf("%d:%d:%d:%d", hour.Add(-time.Hour).UnixMicro(), hour.UnixMicro(), hour.Add(time.Hour).UnixMicro(), hour.Add(2*time.Hour).UnixMicro())
	kinds := []oneCallKind{
		{redisbatch.TokenBucket, 1_000_000, 1000}, {redisbatch.GCRA, 1_000_000, 1000}, {redisbatch.FixedWindow, 1_000_000, 1_000_000},
		{redisbatch.SlidingLog, 100_000, 1000}, {redisbatch.SlidingCounter, 1_000_000, 1_000_000}, {redisbatch.CalendarWindow, 1_000_000, cal},
		{redisbatch.Concurrency, 65536, 1_000_000_000},
	}
	type row struct{ form, kind, script string }
	samples := map[row][]float64{}
	var order []row
	for round := range rounds {
		for _, form := range []string{"compact", "general"} {
			for _, k := range kinds {
				lua, _ := redisbatch.LuaKindsOf(k.kind)
				own, err := redisbatch.Assemble(os.DirFS("../scripts"), redisbatch.ServerTime, lua...)
				if err != nil {
					b.Fatal(err)
				}
				second := all
				if base != "" { // the kind's own script as that directory assembles it
					second, err = redisbatch.Assemble(os.DirFS(base), redisbatch.ServerTime, lua...)
					if err != nil {
						b.Fatal(err)
					}
				}
				scripts := []struct{ name, src string }{{"v0", string(v0)}, {"every-kind", second}, {"own-kind", own}, {"return-1", "return 1"}}
				for i := range scripts { // in an order rotated from round to round
					s := scripts[(i+round)%len(scripts)]
					sha, err := c.ScriptLoad(ctx, s.src).Result()
					if err != nil {
						b.Fatal(err)
					}
					if err := c.FlushAll(ctx).Err(); err != nil {
						b.Fatal(err)
					}
					run := func(n int) {
						pipe := c.Pipeline()
						for j := range n {
							var args []any
							if form == "compact" {
								args = []any{-1, 1, string(k.kind), k.limit, k.param, 1}
							} else {
								args = []any{1, 1, string(k.kind), k.limit, k.param, 1, 1, 1}
							}
							if k.kind == redisbatch.Concurrency {
								args = append(args, "L"+strconv.Itoa(round)+"-"+strconv.Itoa(j))
							}
							pipe.EvalSha(ctx, sha, []string{"k" + strconv.Itoa(j%keys)}, args...)
							if j%200 == 199 || j == n-1 {
								if _, err := pipe.Exec(ctx); err != nil {
									b.Fatalf("%s %s %s: %v", form, k.kind, s.name, err)
								}
							}
						}
					}
					run(2 * keys) // every key exists
					if err := c.ConfigResetStat(ctx).Err(); err != nil {
						b.Fatal(err)
					}
					run(calls)
					r := row{form, string(k.kind), s.name}
					if round == 0 && i == 0 {
						order = append(order, row{form, string(k.kind), ""})
					}
					samples[r] = append(samples[r], evalshaUsec(ctx, b, c))
				}
			}
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "one script call, µs of server time (median of %d rounds of %d calls, %d existing keys)\n", rounds, calls, keys)
	fmt.Fprintf(&out, "%-8s %-4s %8s %11s %9s %9s %22s %13s %12s %14s\n", "form", "kind", "v0", secondName, "own-kind", "return-1", "own above return-1 / v0's", "round median", "of minima", "/ "+secondName)
	median := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	for _, r := range order {
		get := func(name string) []float64 { return samples[row{r.form, r.kind, name}] }
		m := func(name string) float64 { return median(get(name)) }
		v0, every, own, one := m("v0"), m("every-kind"), m("own-kind"), m("return-1")
		// The same ratio within each round, whose scripts ran seconds
		// apart, and of each script's fastest round: the machine's load
		// only adds time, and shifts less of it between rows of a round.
		var ratios, second []float64
		for i := range get("v0") {
			ratios = append(ratios, (get("own-kind")[i]-get("return-1")[i])/(get("v0")[i]-get("return-1")[i]))
			second = append(second, (get("own-kind")[i]-get("return-1")[i])/(get("every-kind")[i]-get("return-1")[i]))
		}
		lo := func(name string) float64 { return slices.Min(get(name)) }
		fmt.Fprintf(&out, "%-8s %-4s %8.2f %11.2f %9.2f %9.2f %22.2f %13.2f %12.2f %14.2f\n", r.form, r.kind, v0, every, own, one, (own-one)/(v0-one),
			median(ratios), (lo("own-kind")-lo("return-1"))/(lo("v0")-lo("return-1")), median(second))
	}
	fmt.Print(out.String())
	for range b.N {
	}
}

// evalshaUsec returns EVALSHA's usec_per_call in c's INFO commandstats.
func evalshaUsec(ctx context.Context, b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					x, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return x
				}
			}
		}
	}
	b.Fatal("no cmdstat_evalsha in INFO commandstats")
	return 0
}
