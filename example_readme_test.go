package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// The Examples of this file are shown in README.md, the lines between
// "// readme:begin" and "// readme:end" (see readme_test.go).

// A tenant's LLM tokens a minute on Redis: each call is admitted on an
// estimate of its tokens, and settled at its true count once the response
// is in. WithToken makes the Settle safe to retry.
func ExampleRedisGCRA_Settle() {
	client, _, stop := newMiniredis()
	defer stop()
	tokens, err := ratelimit.NewRedisGCRA(client, 1000, time.Minute) // 1000 tokens a minute per tenant
	if err != nil {
		panic(err)
	}
	ctx, key, estimate, requestID := context.Background(), "tenant:acme", 200, "req-1"
	doTheWork := func() int { return 350 } // the response's true token count

	// readme:begin
	res, err := tokens.Allow(ctx, key, estimate) // admit on an estimate
	if err != nil || !res.Allowed {
		return // answer 429
	}
	taken := time.Now()
	used := doTheWork()
	res, err = tokens.Settle(ctx, key, estimate, used,
		ratelimit.TakenAt(taken), ratelimit.WithToken(requestID))
	// readme:end
	fmt.Printf("settled at %d: remaining=%d err=%v\n", used, res.Remaining, err)
	// Output:
	// settled at 350: remaining=650 err=<nil>
}

// At most 5 jobs in flight per API key on Redis: each holds a lease from
// Acquire until it ends, and the sixth is denied until one is released.
func ExampleRedisConcurrency() {
	client, _, stop := newMiniredis()
	defer stop()
	ctx, apiKey := context.Background(), "key:7"

	// readme:begin
	jobs, _ := ratelimit.NewRedisConcurrency(client, 5, time.Minute) // 5 in flight per key, leases of a minute
	lease, d, err := jobs.Acquire(ctx, apiKey, 1)
	if err != nil || !d.Allowed {
		return // answer 429, Retry-After d.RetryAfter: the earliest a lease can expire
	}
	defer lease.Release(context.WithoutCancel(ctx))
	// readme:end
	fmt.Printf("job 1: allowed=%v remaining=%d\n", d.Allowed, d.Remaining)
	for i := 2; i <= 6; i++ {
		lease, d, err := jobs.Acquire(ctx, apiKey, 1)
		if err != nil {
			panic(err)
		}
		defer lease.Release(context.WithoutCancel(ctx)) // a denial's Lease holds nothing
		fmt.Printf("job %d: allowed=%v remaining=%d\n", i, d.Allowed, d.Remaining)
	}
	// Output:
	// job 1: allowed=true remaining=4
	// job 2: allowed=true remaining=3
	// job 3: allowed=true remaining=2
	// job 4: allowed=true remaining=1
	// job 5: allowed=true remaining=0
	// job 6: allowed=false remaining=0
}
