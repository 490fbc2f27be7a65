package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
)

// BenchmarkLeases measures ratelimit.Prefetch against redis_rate on one hot
// key shared by two processes, each with its own go-redis client and 64
// goroutines (the second process is this test binary run again, see
// TestLeasesChild, and both start at one agreed wall-clock instant), and a
// key at 1,000 decisions/s spread over 10 clients. Each row runs once for
// leasesSpan; run it with -benchtime 1x:
//
//	go test -run '^$' -bench '^BenchmarkLeases$' -benchtime 1x
//
// It reports decisions/s (both processes together), Redis calls per
// decision (the backend's decisions, blocks' takes included, per decision
// answered), and, where the limit binds, over-admission (units admitted
// beyond capacity + rate × span in the worst span, checked outside the
// library from every admission's local time) and under-admission (the
// share of capacity + rate × the run's span not admitted).
func BenchmarkLeases(b *testing.B) {
	addr := os.Getenv(redisAddrEnv)
	if addr == "" {
		b.Skipf("%s is not set: export it (host:port of a Redis), or use run.sh", redisAddrEnv)
	}
	for _, row := range []struct {
		name     string
		impl     string
		capacity int64
		rate     float64
		log      bool
	}{
		{"hot/2x64/under-limit/redis_rate", "redis_rate", 1_000_000_000, 1_000_000, false},
		{"hot/2x64/under-limit/Prefetch", "Prefetch", 1_000_000_000, 1_000_000, false},
		{"hot/2x64/full-load/redis_rate", "redis_rate", 1000, 5000, true},
		{"hot/2x64/full-load/Prefetch", "Prefetch", 1000, 5000, true},
	} {
		b.Run(row.name, func(b *testing.B) {
			cfg := leasesRun{
				Impl: row.impl, Key: fmt.Sprintf("leases:%s:%d", redisRunBase, redisRun.Add(1)),
				Capacity: row.capacity, Rate: row.rate, Goroutines: 64,
				Start: time.Now().Add(2 * time.Second).UnixNano(), Span: leasesSpan, Log: row.log,
			}
			out := runTwoProcesses(b, addr, cfg)
			report(b, cfg, out, 1)
		})
	}
	for _, row := range []struct {
		name     string
		capacity int64
		rate     float64
	}{
		// A quota: a large allowance refilling slowly, which the load
		// stays under.
		{"quota-1e6-10ps", 1_000_000, 10},
		// A rate the load stays under: 2,000 a second.
		{"rate-2000ps", 2000, 2000},
		// A rate the load exceeds: 500 a second.
		{"rate-500ps", 500, 500},
	} {
		for _, impl := range []string{"RedisTokenBucket", "Prefetch"} {
			b.Run("1000rps/10clients/"+row.name+"/"+impl, func(b *testing.B) {
				cfg := leasesRun{
					Impl: impl, Key: fmt.Sprintf("leases:%s:%d", redisRunBase, redisRun.Add(1)),
					Capacity: row.capacity, Rate: row.rate, Start: time.Now().Add(500 * time.Millisecond).UnixNano(),
					Span: leasesSpan, Log: true,
				}
				out := runPacedClients(b, addr, cfg, 10, 100)
				report(b, cfg, out, 10)
			})
		}
	}
}

// leasesSpan is how long each row of BenchmarkLeases runs.
const leasesSpan = 3 * time.Second

// leasesChildEnv holds, for the second process of a row, the row's
// leasesRun as JSON and the file to write its leasesOut to.
const (
	leasesChildEnv = "RATELIMIT_BENCH_LEASES_CHILD"
	leasesOutEnv   = "RATELIMIT_BENCH_LEASES_OUT"
)

// leasesRun is one process's share of a row.
type leasesRun struct {
	Impl       string // "redis_rate", "RedisTokenBucket" or "Prefetch"
	Key        string
	Capacity   int64
	Rate       float64 // units per second
	Goroutines int
	Start      int64 // Unix ns at which every process starts
	Span       time.Duration
	Log        bool // keep every admission's times
}

// leasesOut is what one process did.
type leasesOut struct {
	Decisions, Allowed, BackendCalls int64
	// Admits holds, when logged, each admission's local times before and
	// after its call, in ns since Start.
	Admits [][2]int64
	Err    string
}

// TestLeasesChild is the second process of a BenchmarkLeases row: run by
// the benchmark with leasesChildEnv set, it runs its share and writes what
// it did; otherwise it skips.
func TestLeasesChild(t *testing.T) {
	raw := os.Getenv(leasesChildEnv)
	if raw == "" {
		t.Skip("run by BenchmarkLeases only")
	}
	var cfg leasesRun
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		t.Fatal(err)
	}
	out := runLoad(os.Getenv(redisAddrEnv), cfg)
	data, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(os.Getenv(leasesOutEnv), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// runTwoProcesses runs cfg in this process and in a second one, started
// together at cfg.Start, and returns both outcomes.
func runTwoProcesses(b *testing.B, addr string, cfg leasesRun) []leasesOut {
	b.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		b.Fatal(err)
	}
	outFile := filepath.Join(b.TempDir(), "child.json")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeasesChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), leasesChildEnv+"="+string(raw), leasesOutEnv+"="+outFile, redisAddrEnv+"="+addr)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	mine := runLoad(addr, cfg)
	if err := cmd.Wait(); err != nil {
		b.Fatalf("the second process (pid %d): %v", cmd.Process.Pid, err)
	}
	data, err := os.ReadFile(outFile)
	if err != nil {
		b.Fatal(err)
	}
	var theirs leasesOut
	if err := json.Unmarshal(data, &theirs); err != nil {
		b.Fatal(err)
	}
	for _, o := range []leasesOut{mine, theirs} {
		if o.Err != "" {
			b.Fatal(o.Err)
		}
	}
	return []leasesOut{mine, theirs}
}

// callCounter counts the decisions a limiter reports.
type callCounter struct{ n atomic.Int64 }

func (c *callCounter) Decided(ratelimit.Event)                                       { c.n.Add(1) }
func (c *callCounter) BreakerChanged(ratelimit.BreakerState, ratelimit.BreakerState) {}

// newDecide returns the decision of one unit for cfg's key through a new
// client of the implementation, and its counter of backend calls (nil for
// redis_rate, whose every decision is one).
func newDecide(c *redis.Client, cfg leasesRun) (func(context.Context) (bool, error), *callCounter, func(), error) {
	if cfg.Impl == "redis_rate" {
		l := redis_rate.NewLimiter(c)
		limit := redis_rate.Limit{Rate: int(cfg.Rate), Burst: int(cfg.Capacity), Period: time.Second}
		return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, cfg.Key, limit)
			return err == nil && res.Allowed > 0, err
		}, nil, func() {}, nil
	}
	calls := &callCounter{}
	tb, err := ratelimit.NewRedisTokenBucket(c, ratelimit.PerSecond(int(cfg.Rate)), int(cfg.Capacity), ratelimit.WithHooks(calls))
	if err != nil {
		return nil, nil, nil, err
	}
	if cfg.Impl == "RedisTokenBucket" {
		return func(ctx context.Context) (bool, error) {
			res, err := tb.Allow(ctx, cfg.Key, 1)
			return res.Allowed, err
		}, calls, func() {}, nil
	}
	l, err := ratelimit.NewPrefetch(tb, ratelimit.PrefetchConfig{})
	if err != nil {
		return nil, nil, nil, err
	}
	return func(ctx context.Context) (bool, error) {
			res, err := l.Allow(ctx, cfg.Key, 1)
			return res.Allowed, err
		}, calls, func() {
			_ = l.Close(context.Background())
		}, nil
}

// runLoad runs cfg.Goroutines goroutines deciding one unit each, back to
// back, from cfg.Start for cfg.Span, on a client of its own.
func runLoad(addr string, cfg leasesRun) leasesOut {
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: cfg.Goroutines + 8})
	defer c.Close()
	decide, calls, closeFn, err := newDecide(c, cfg)
	if err != nil {
		return leasesOut{Err: err.Error()}
	}
	ctx := context.Background()
	if err := c.Ping(ctx).Err(); err != nil {
		return leasesOut{Err: err.Error()}
	}
	start := time.Unix(0, cfg.Start)
	time.Sleep(time.Until(start))
	end := start.Add(cfg.Span)
	var mu sync.Mutex
	var out leasesOut
	var wg sync.WaitGroup
	for range cfg.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var decisions, allowed int64
			var admits [][2]int64
			var firstErr error
			for {
				before := time.Now()
				if !before.Before(end) {
					break
				}
				ok, err := decide(ctx)
				if err != nil && firstErr == nil {
					firstErr = err
				}
				decisions++
				if ok {
					allowed++
					if cfg.Log {
						admits = append(admits, [2]int64{before.Sub(start).Nanoseconds(), time.Since(start).Nanoseconds()})
					}
				}
			}
			mu.Lock()
			defer mu.Unlock()
			out.Decisions += decisions
			out.Allowed += allowed
			out.Admits = append(out.Admits, admits...)
			if firstErr != nil && out.Err == "" {
				out.Err = firstErr.Error()
			}
		}()
	}
	wg.Wait()
	closeFn()
	if calls != nil {
		out.BackendCalls = calls.n.Load()
	} else {
		out.BackendCalls = out.Decisions
	}
	return out
}

// runPacedClients runs clients clients in this process, each with its own
// go-redis client and Prefetch, each deciding one unit perClient times a
// second, evenly, from cfg.Start for cfg.Span.
func runPacedClients(b *testing.B, addr string, cfg leasesRun, clients, perClient int) []leasesOut {
	b.Helper()
	outs := make([]leasesOut, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4})
			defer c.Close()
			decide, calls, closeFn, err := newDecide(c, cfg)
			if err != nil {
				outs[i].Err = err.Error()
				return
			}
			ctx := context.Background()
			start := time.Unix(0, cfg.Start)
			every := time.Second / time.Duration(perClient)
			// Each client starts at its own offset within the period.
			next := start.Add(every * time.Duration(i) / time.Duration(clients))
			end := start.Add(cfg.Span)
			for next.Before(end) {
				time.Sleep(time.Until(next))
				before := time.Now()
				ok, err := decide(ctx)
				if err != nil {
					outs[i].Err = err.Error()
					return
				}
				outs[i].Decisions++
				if ok {
					outs[i].Allowed++
					outs[i].Admits = append(outs[i].Admits, [2]int64{before.Sub(start).Nanoseconds(), time.Since(start).Nanoseconds()})
				}
				next = next.Add(every)
			}
			closeFn()
			outs[i].BackendCalls = calls.n.Load()
		}()
	}
	wg.Wait()
	for _, o := range outs {
		if o.Err != "" {
			b.Fatal(o.Err)
		}
	}
	return outs
}

// report reports the row's figures from the processes' (or clients')
// outcomes.
func report(b *testing.B, cfg leasesRun, outs []leasesOut, parts int) {
	b.Helper()
	var decisions, allowed, calls int64
	var admits [][2]int64
	for _, o := range outs {
		decisions += o.Decisions
		allowed += o.Allowed
		calls += o.BackendCalls
		admits = append(admits, o.Admits...)
	}
	b.ReportMetric(float64(decisions)/cfg.Span.Seconds(), "decisions/s")
	b.ReportMetric(float64(calls)/float64(max(decisions, 1)), "redis-calls/decision")
	b.ReportMetric(0, "ns/op")
	if !cfg.Log {
		return
	}
	over := overAdmitted(admits, cfg.Capacity, cfg.Rate)
	allowance := float64(cfg.Capacity) + cfg.Rate*cfg.Span.Seconds()
	b.ReportMetric(float64(over), "over-admitted-units")
	b.ReportMetric(100*(1-float64(allowed)/allowance), "under-admitted-%")
	b.Logf("%d decisions, %d allowed of an allowance of %.0f, %d Redis calls, worst span over by %d units (%d parts)",
		decisions, allowed, allowance, calls, over, parts)
}

// overAdmitted returns the most units by which the admissions in some span
// exceed capacity + rate × its length, 0 when never: an admission happened
// between its before and after times, so a span is charged from the
// latest before of its first admission to the latest after up to its
// last, which never blames the library for the time a call took.
func overAdmitted(admits [][2]int64, capacity int64, rate float64) int64 {
	slices.SortFunc(admits, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	perUnit := 1e9 / rate // ns per unit
	var worst int64
	minStart := 1e300
	maxAfter := int64(-1 << 62)
	for i, a := range admits {
		// units before i, in ns of refill, less i's before time
		minStart = min(minStart, float64(i)*perUnit-float64(a[0]))
		maxAfter = max(maxAfter, a[1])
		units := float64(i+1)*perUnit - float64(maxAfter) - minStart // units in the span, in ns, less its length
		if over := int64(units/perUnit) - capacity; over > worst {
			worst = over
		}
	}
	return worst
}
