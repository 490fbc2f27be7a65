package bench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/redis/go-redis/v9"
)

// batchScriptSource returns the library's batch script of every kind on the
// server's TIME, assembled from ../scripts as the Redis limiters assemble
// theirs; the benchmarks call it directly to time full batches.
func batchScriptSource() ([]byte, error) {
	src, err := redisbatch.Assemble(os.DirFS("../scripts"), redisbatch.ServerTime, redisbatch.LuaKinds()...)
	return []byte(src), err
}

// fullBatch is the largest batch a Redis limiter sends (the coalescer's
// bound on requests per script call).
const fullBatch = 128

// BenchmarkRedisFullBatch times one call of the library's batch script
// deciding fullBatch requests of one check each, every request on a key of
// its own, for each algorithm, and of a Composite's two checks: what one full batch holds the server for. It
// calls the script directly, with the arguments a limiter sends (limit
// 1,000,000 per 1000 s, cost 1), over 100 sets of fullBatch keys in turn,
// as under load. At that rate a token-bucket or GCRA key is full again 1 ms
// after a check, so it has expired by its next one and the rows time keys
// being created (as BenchmarkRedis's do); the window's keys exist.
// BenchmarkRedisScriptFloor times existing keys of every kind.
//
// A row reports script-us/call (the server's time in EVALSHA, INFO
// commandstats), server-us/call (the server's CPU, INFO cpu) and their
// values per decision.
func BenchmarkRedisFullBatch(b *testing.B) {
	c := redisClient(b)
	src, err := batchScriptSource()
	if err != nil {
		b.Fatal(err)
	}
	script := redis.NewScript(string(src))
	ctx := context.Background()
	for _, kind := range []struct {
		name   string
		limits []any // kind, limit and param of each limit; a request has one check per limit
	}{
		{"TokenBucket", []any{"t", 1_000_000, 1000}},      // µs per token
		{"GCRA", []any{"g", 1_000_000, 1000}},             // µs per request
		{"FixedWindow", []any{"w", 1_000_000, 1_000_000}}, // window in ms
		// A Composite's request: both checks on keys of their own.
		{"Composite-TokenBucket+FixedWindow", []any{"t", 1_000_000, 1000, "w", 1_000_000, 1_000_000}},
	} {
		b.Run(kind.name+"/requests="+strconv.Itoa(fullBatch), func(b *testing.B) {
			checks := len(kind.limits) / 3
			args := append([]any{fullBatch, checks}, kind.limits...)
			for range fullBatch {
				args = append(args, checks)
				for s := 1; s <= checks; s++ {
					args = append(args, s, 1) // limit s, cost 1
				}
			}
			sets := make([][]string, 100)
			for i := range sets {
				sets[i] = redisBenchKeys(fullBatch * checks)
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
