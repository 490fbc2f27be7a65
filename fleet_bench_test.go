package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// BenchmarkFleetHeartbeat measures what one heartbeat costs a real
// redis-server, in a fleet of 3 and of 100 replicas: at the default
// Heartbeat of 1 s, each replica sends one per second, so the figures per
// beat are the figures per replica per second. It reports:
//
//   - script-us/beat: the usec of EVALSHA and EVAL in INFO commandstats,
//     the time the server spent running the script;
//   - server-cpu-us/beat: the server's CPU time (used_cpu_sys +
//     used_cpu_user of INFO cpu), networking included;
//   - in-B/beat, out-B/beat: total_net_input_bytes and
//     total_net_output_bytes of INFO stats: the request and the reply on
//     the wire.
//
// The row decision=RedisTokenBucket measures one decision of a
// RedisTokenBucket (without coalescing) the same way, for scale: the
// figures of a loaded machine vary, their ratio less.
func BenchmarkFleetHeartbeat(b *testing.B) {
	server := redistest.Start(b)
	runs := 0 // each run of a sub-benchmark beats in a fleet of its own
	for _, size := range []int{3, 100} {
		b.Run(fmt.Sprintf("replicas=%d", size), func(b *testing.B) {
			ctx := context.Background()
			runs++
			admin := server.Client(b)
			fleets := make([]*Fleet, size)
			for i := range fleets {
				f, err := NewFleet(admin, FleetConfig{Name: fmt.Sprintf("fleet:%d", runs)})
				if err != nil {
					b.Fatal(err)
				}
				if err := f.Beat(ctx); err != nil {
					b.Fatal(err)
				}
				fleets[i] = f
			}
			before := serverCounters(b, admin)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := fleets[i%size].Beat(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			after := serverCounters(b, admin)
			if live := fleets[0].Live(); live != size {
				b.Fatalf("Live() = %d, want %d", live, size)
			}
			reportServerCost(b, before, after)
		})
	}
	b.Run("decision=RedisTokenBucket", func(b *testing.B) {
		ctx := context.Background()
		admin := server.Client(b)
		l, err := NewRedisTokenBucket(admin, PerSecond(1e6), 1<<40, WithoutCoalescing())
		if err != nil {
			b.Fatal(err)
		}
		before := serverCounters(b, admin)
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, err := l.Allow(ctx, strconv.Itoa(i%1000), 1); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		reportServerCost(b, before, serverCounters(b, admin))
	})
}

// reportServerCost reports the server's work between two readings of
// serverCounters, per operation.
func reportServerCost(b *testing.B, before, after map[string]int64) {
	n := float64(b.N)
	b.ReportMetric(float64(after["script_usec"]-before["script_usec"])/n, "script-us/beat")
	b.ReportMetric(float64(after["cpu_usec"]-before["cpu_usec"])/n, "server-cpu-us/beat")
	b.ReportMetric(float64(after["total_net_input_bytes"]-before["total_net_input_bytes"])/n, "in-B/beat")
	b.ReportMetric(float64(after["total_net_output_bytes"]-before["total_net_output_bytes"])/n, "out-B/beat")
}

// serverCounters reads, from INFO, the server's CPU time in µs (cpu_usec),
// the usec of its script calls (script_usec) and its bytes in and out.
func serverCounters(b *testing.B, c *redis.Client) map[string]int64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu", "stats", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	counters := map[string]int64{}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch name {
		case "used_cpu_sys", "used_cpu_user":
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatal(err)
			}
			counters["cpu_usec"] += int64(v * 1e6)
		case "total_net_input_bytes", "total_net_output_bytes":
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			counters[name] = v
		case "cmdstat_evalsha", "cmdstat_eval":
			for field := range strings.SplitSeq(value, ",") {
				if v, ok := strings.CutPrefix(field, "usec="); ok {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						b.Fatal(err)
					}
					counters["script_usec"] += n
				}
			}
		}
	}
	return counters
}
