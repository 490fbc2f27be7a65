package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// Three replicas share 30 requests per second on one Redis. Each sizes its
// Guard's fallback by the replicas alive: 10 at once, 10 per second.
func ExampleFleet_Fallback() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	ctx := context.Background()
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) // time stands still here

	var guards []*ratelimit.Guard
	var fleets []*ratelimit.Fleet
	for i := range 3 {
		// Each replica is a process of its own, with its own client.
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1})
		defer client.Close()
		fleet, err := ratelimit.NewFleet(client, ratelimit.FleetConfig{
			Name: "ratelimit:fleet:api", ID: fmt.Sprint("replica-", i),
		})
		if err != nil {
			panic(err)
		}
		// In a service: fleet.Beat once before serving, then go
		// fleet.Run(ctx) for a heartbeat every second.
		if err := fleet.Beat(ctx); err != nil {
			panic(err)
		}
		shared, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(30), 30)
		if err != nil {
			panic(err)
		}
		fallback, err := fleet.Fallback(shared, ratelimit.WithClock(clock))
		if err != nil {
			panic(err)
		}
		guard, err := ratelimit.NewGuard(shared, ratelimit.GuardConfig{
			Timeout: 100 * time.Millisecond, OnFailure: ratelimit.FailOver, Fallback: fallback,
		})
		if err != nil {
			panic(err)
		}
		fleets, guards = append(fleets, fleet), append(guards, guard)
	}
	for _, f := range fleets {
		_ = f.Beat(ctx) // the heartbeats that follow count all three
	}
	fmt.Println("replicas alive:", fleets[0].Live(), fleets[1].Live(), fleets[2].Live())
	share := fleets[0].Share(ratelimit.Policy{Limit: 30, Window: time.Second})
	fmt.Printf("a share of 30 per second: %d per %v\n", share.Limit, share.Window)

	m.SetError("LOADING Redis is loading the dataset in memory") // Redis fails
	_ = fleets[0].Beat(ctx)                                      // fails: the count stays
	allowed := 0
	for _, g := range guards {
		for range 20 {
			if d, err := g.Decide(ctx, "tenant", 1); err == nil && d.Allowed {
				allowed++
			}
		}
	}
	fmt.Println("replicas alive while Redis fails:", fleets[0].Live())
	fmt.Println("allowed by the three fallbacks at once:", allowed)
	// Output:
	// replicas alive: 3 3 3
	// a share of 30 per second: 10 per 1s
	// replicas alive while Redis fails: 3
	// allowed by the three fallbacks at once: 30
}
