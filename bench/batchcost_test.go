package bench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
)

// batchScriptPath is the library's batch script, which the Redis limiters
// embed; the benchmark calls it directly to time full batches.
const batchScriptPath = "../scripts/batch.lua"

// fullBatch is the largest batch a Redis limiter sends (the coalescer's
// bound on requests per script call).
const fullBatch = 128

// BenchmarkRedisFullBatch times one call of the library's batch script
// deciding fullBatch requests of one check each, every request on a key of
// its own, for each algorithm: what one full batch holds the server for. It
// calls the script directly, with the arguments a limiter sends (limit
// 1,000,000 per 1000 s, cost 1), over 100 sets of fullBatch keys in turn, so
// that the keys exist and are updated, as under load.
//
// A row reports script-us/call (the server's time in EVALSHA, INFO
// commandstats), server-us/call (the server's CPU, INFO cpu) and their
// values per decision.
func BenchmarkRedisFullBatch(b *testing.B) {
	c := redisClient(b)
	src, err := os.ReadFile(batchScriptPath)
	if err != nil {
		b.Fatal(err)
	}
	script := redis.NewScript(string(src))
	ctx := context.Background()
	for _, kind := range []struct{ name, code, param string }{
		{"TokenBucket", "t", "1000"},    // µs per token
		{"GCRA", "g", "1000"},           // µs per request
		{"FixedWindow", "w", "1000000"}, // window in ms
	} {
		b.Run(kind.name+"/requests="+strconv.Itoa(fullBatch), func(b *testing.B) {
			args := []any{fullBatch, 1, kind.code, 1_000_000, kind.param}
			for range fullBatch {
				args = append(args, 1, 1, 1) // one check, of limit 1, cost 1
			}
			sets := make([][]string, 100)
			for i := range sets {
				sets[i] = redisBenchKeys(fullBatch)
				if err := script.Run(ctx, c, sets[i], args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			before, err := readServerStats(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := script.EvalSha(ctx, c, sets[i%len(sets)], args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after, err := readServerStats(ctx, c)
			if err != nil {
				b.Fatal(err)
			}
			d := after.sub(before)
			calls := float64(d.scriptCalls)
			b.ReportMetric(float64(d.scriptUsec)/calls, "script-us/call")
			b.ReportMetric(d.cpuSeconds*1e6/calls, "server-us/call")
			b.ReportMetric(float64(d.scriptUsec)/calls/fullBatch, "script-us/decision")
		})
	}
}
