package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
)

// plansFromDatabase stands for the application's source of truth: the
// plans, the customers on them, and the flags, as the application keeps
// them. A plan's part "" is the policy of a limiter of one policy.
func plansFromDatabase() ratelimit.PolicyTableEntries {
	return ratelimit.PolicyTableEntries{
		Plans: map[string]ratelimit.Plan{
			"free": {"": {Limit: 100, Window: time.Minute}},
			"pro":  {"": {Limit: 1000, Window: time.Minute}},
		},
		Keys:  map[string]string{"acme": "free"},
		Flags: map[string]bool{"enforce": false},
	}
}

// A replica of a fleet: its limiter decides each customer by the plan the
// shared table holds for it, and its Shadow enforces when the table's
// "enforce" flag says so. The replica seeds the table if it is missing, at start and
// whenever Run finds it gone (a FLUSHALL, a restart without persistence);
// Seed writes only if the table is still missing, so every replica may call
// it. A change made once, on any replica, reaches them all.
func ExamplePolicyTable() {
	server, err := miniredis.Run() // in production: the fleet's Redis
	if err != nil {
		panic(err)
	}
	defer server.Close()
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	defer func() { _ = client.Close() }()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()

	seed := func(table *ratelimit.PolicyTable) {
		if _, err := table.Seed(ctx, plansFromDatabase()); err != nil {
			log.Print(err)
		}
	}
	var table *ratelimit.PolicyTable
	table, err = ratelimit.NewPolicyTable(client, ratelimit.PolicyTableConfig{
		Name: "plans",
		OnError: func(err error) {
			if errors.Is(err, ratelimit.ErrTableMissing) {
				seed(table)
				return
			}
			log.Print(err)
		},
	})
	if err != nil {
		panic(err)
	}
	seed(table)
	if err := table.Load(ctx); err != nil { // ready before serving
		panic(err)
	}
	done := make(chan error, 1)
	go func() { done <- table.Run(ctx) }()

	bucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 10, ratelimit.WithPolicyFunc(table.PolicyFunc()))
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.NewShadow(bucket, ratelimit.ShadowConfig{})
	if err != nil {
		panic(err)
	}
	if err := table.FollowShadow("enforce", limiter); err != nil {
		panic(err)
	}
	res, _ := limiter.Allow(ctx, "acme", 1)
	fmt.Println("acme's limit:", res.Limit, "enforcing:", limiter.Enforcing())

	// Moved to pro in one write, for every replica.
	if err := table.Assign(ctx, "acme", "pro"); err != nil {
		panic(err)
	}
	if err := table.SetFlag(ctx, "enforce", true); err != nil {
		panic(err)
	}
	for on, _ := table.Flag("enforce"); !on; on, _ = table.Flag("enforce") {
		time.Sleep(time.Millisecond) // until this replica's Run hears of it
	}
	res, _ = limiter.Allow(ctx, "acme", 1)
	fmt.Println("acme's limit:", res.Limit, "enforcing:", limiter.Enforcing())
	stop()
	<-done
	// Output:
	// acme's limit: 100 enforcing: false
	// acme's limit: 1000 enforcing: true
}
