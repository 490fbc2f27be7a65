package otelratelimit_test

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// A token bucket of 3 reports its decisions; 5 requests, 2 denied.
func ExampleNewHooks() {
	// In a service: the MeterProvider your exporter is set up with, or
	// otel.GetMeterProvider().
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	hooks, err := otelratelimit.NewHooks(mp)
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 3,
		ratelimit.WithHooks(hooks), ratelimit.WithName("api"),
		ratelimit.WithClock(ratelimittest.NewClock(time.Unix(0, 0))))
	if err != nil {
		panic(err)
	}
	for range 5 {
		_, _ = limiter.Allow(context.Background(), "user:42", 1)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == otelratelimit.DecisionsName {
			for _, dp := range sum.DataPoints {
				lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value))
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// ratelimit.decisions{ratelimit.limiter=api,ratelimit.outcome=allowed,ratelimit.source=backend} 3
	// ratelimit.decisions{ratelimit.limiter=api,ratelimit.outcome=denied,ratelimit.source=backend} 2
}

// One Hooks per Guard, named as the Guard, tells breakers apart.
func ExampleWithLimiterName() {
	mp := sdkmetric.NewMeterProvider()
	redisLimiter, _ := ratelimit.NewGCRA(100, time.Second) // a Redis limiter in a real service

	hooks, err := otelratelimit.NewHooks(mp, otelratelimit.WithLimiterName("orders"))
	if err != nil {
		panic(err)
	}
	guard, err := ratelimit.NewGuard(redisLimiter, ratelimit.GuardConfig{
		BreakerFailures: 5, BreakerCoolDown: time.Second,
		Hooks: hooks, Name: "orders",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(guard.BreakerState())
	// Output: closed
}

// A concurrency limiter's leases held: two acquired, one released.
func ExampleHooks_leasesHeld() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()

	hooks, err := otelratelimit.NewHooks(mp)
	if err != nil {
		panic(err)
	}
	jobs, err := ratelimit.NewConcurrency(5, time.Minute, ratelimit.WithHooks(hooks), ratelimit.WithName("jobs"))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	first, _, _ := jobs.Acquire(ctx, "key:alice", 1)
	_, _, _ = jobs.Acquire(ctx, "key:bob", 1)
	_ = first.Release(ctx)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == otelratelimit.LeasesHeldName {
			for _, dp := range sum.DataPoints {
				fmt.Printf("%s{%s} %d\n", m.Name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
			}
		}
	}
	// Output:
	// ratelimit.leases.held{ratelimit.limiter=jobs} 1
}
