// Command prometheus shows a Redis token bucket behind a DenyCache and a
// Guard, with the Guard's hooks exported as Prometheus metrics by
// promratelimit: each call's Decision says who answered, the DenyCache
// included, and each adjustment is counted with its units. It floods one key, settles a request at its
// true cost and refunds another, stops the (embedded) Redis, floods
// another key so that the breaker opens and the fallback answers, tries a
// settle that Redis cannot take, and prints the metrics it collected.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
}

// run runs the scenario and writes what it did, then the counters and
// gauges a scrape of the registry shows, to w.
func run(w io.Writer) error {
	reg := prometheus.NewRegistry()
	// The Guard's hooks: a Guard reports every call with the Source of
	// its Decision, the DenyCache behind it included, so it is the only
	// reporter needed; its breaker's series are named after it.
	hooks, err := promratelimit.NewHooks(reg)
	if err != nil {
		return err
	}
	metrics, err := hooks.Breaker("orders")
	if err != nil {
		return err
	}

	mini := miniredis.NewMiniRedis()
	if err := mini.StartAddr("127.0.0.1:0"); err != nil {
		return err
	}
	defer mini.Close()
	client := redis.NewClient(&redis.Options{
		Addr: mini.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1,
	})
	defer client.Close()

	shared, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(5), 10)
	if err != nil {
		return err
	}
	// The deny cache sits right on Redis; the guard outside it handles
	// failures. The fallback is this replica's share: with 4 replicas,
	// a quarter of the shared limit (its capacity rounded up).
	cached, err := ratelimit.NewDenyCache(shared, ratelimit.DenyCacheConfig{})
	if err != nil {
		return err
	}
	fallback, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(75), 3)
	if err != nil {
		return err
	}
	limiter, err := ratelimit.NewGuard(cached, ratelimit.GuardConfig{
		Timeout: 50 * time.Millisecond, OnFailure: ratelimit.FailOver, Fallback: fallback,
		BreakerFailures: 3, BreakerCoolDown: time.Second, Hooks: metrics, Name: "orders",
	})
	if err != nil {
		return err
	}

	ctx := context.Background()
	flood := func(key string) error {
		for i := 0; i < 1000; i++ {
			if _, err := limiter.Allow(ctx, key, 1); err != nil {
				return err
			}
		}
		return nil
	}
	fmt.Fprintln(w, "1000 requests for user:42 on Redis")
	if err := flood("user:42"); err != nil {
		return err
	}
	if err := adjust(ctx, w, limiter); err != nil {
		return err
	}
	fmt.Fprintln(w, "Redis stopped; 1000 requests for user:7")
	mini.Close()
	if err := flood("user:7"); err != nil {
		return err
	}
	// Adjustments go to the backend whatever the breaker says: with Redis
	// down, this one fails, and is counted as such.
	_, err = limiter.Settle(ctx, "user:9", 1, 2, ratelimit.WithToken("req-3"))
	fmt.Fprintln(w, "a settle for user:9 while Redis is down:", errors.Is(err, ratelimit.ErrBackend))

	families, err := reg.Gather()
	if err != nil {
		return err
	}
	var out strings.Builder
	for _, f := range families {
		if strings.HasSuffix(f.GetName(), "_seconds") {
			continue // histograms are long; the counters tell the story
		}
		if _, err := expfmt.MetricFamilyToText(&out, f); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, out.String())
	return err
}

// adjust takes 3 units for user:9 on an estimate and settles them at their
// true cost, 5, then takes 1 more and refunds it, each adjustment with its
// request's idempotency token.
func adjust(ctx context.Context, w io.Writer, limiter *ratelimit.Guard) error {
	fmt.Fprintln(w, "user:9: 3 units settled at 5, then 1 refunded")
	if _, err := limiter.Allow(ctx, "user:9", 3); err != nil {
		return err
	}
	if _, err := limiter.Settle(ctx, "user:9", 3, 5, ratelimit.WithToken("req-1")); err != nil {
		return err
	}
	if _, err := limiter.Allow(ctx, "user:9", 1); err != nil {
		return err
	}
	_, err := limiter.Refund(ctx, "user:9", 1, ratelimit.WithToken("req-2"))
	return err
}
