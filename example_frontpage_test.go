package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
)

// The README's limit outside HTTP: Allow answers at once, and a denial is a
// Result with the time to wait, not an error.
func ExampleTokenBucket_Allow() {
	ctx := context.Background()

	// readme:begin
	limiter := ratelimit.Must(ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 10)) // 5 a second, bursts of 10
	res, err := limiter.Allow(ctx, "user:42", 1)
	if err != nil {
		log.Fatal(err) // the limiter failed (Redis down, a bad key): not a denial
	}
	if !res.Allowed {
		fmt.Println("retry in", res.RetryAfter) // or answer 429
	}
	// readme:end

	fmt.Println(res.Allowed, res.Remaining)
	// Output:
	// true 9
}

// A worker (the README's) calls a partner's API at most 5 times a second,
// one call at a time, waiting before each call as long as the limiter
// says. WithoutJitter makes it sleep exactly that long, so that it gets the
// whole rate (one worker has no one to spread out from): two calls take
// 200 ms, with Wait's default jitter up to 220 ms. (Wait's tests check the
// exact sleeps on a fake clock; this runs the README's code.)
func ExampleWithoutJitter() {
	ctx := context.Background()
	jobs := []string{"a", "b"}
	call := func(job string) { fmt.Println("called for", job) }

	// readme:begin
	limiter := ratelimit.Must(ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 1)) // at most 5 a second, no burst
	for _, job := range jobs {
		if _, err := ratelimit.Wait(ctx, limiter, "partner-api", 1, ratelimit.WithoutJitter()); err != nil {
			log.Fatal(err) // the limiter failed, or ctx ends before the wait would
		}
		call(job)
	}
	// readme:end

	// Output:
	// called for a
	// called for b
}

// The README's Redis client, set up as docs/redis.md recommends; building
// the limiter does not dial the server.
func ExampleNewRedisTokenBucket() {
	// readme:begin
	client := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		MaxRetries:            -1,   // see docs/redis.md, "Retries never decide twice"
		ContextTimeoutEnabled: true, // let the client itself stop at ctx deadlines
	})
	limiter, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(5), 10)
	// readme:end
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	fmt.Println(limiter.Policy().Limit, limiter.Policy().Window)
	// Output:
	// 10 2s
}

// The README's Composite: a user's 10 a second and the user's tenant's
// 1000 an hour, in one decision taken on both or neither, on one embedded
// Redis. The tenant is the key's hash tag, so both parts' keys are in one
// slot of a cluster.
func ExampleComposite_perUserAndTenant() {
	server, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	defer client.Close()
	ctx := context.Background()
	tenantOf := func(key string) string { return key[:strings.IndexByte(key, '}')+1] }

	// readme:begin
	perUser, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(10), 10) // 10 a second per user
	if err != nil {
		log.Fatal(err)
	}
	perTenant, err := ratelimit.NewRedisGCRA(client, 1000, time.Hour) // 1000 an hour per tenant
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "user", Limiter: perUser},
		ratelimit.Part{Name: "tenant", Limiter: perTenant, Key: tenantOf}, // "{acme}:alice" → "{acme}"
	)
	if err != nil {
		log.Fatal(err)
	}
	d, err := limiter.Decide(ctx, "{acme}:alice", 1) // both, or neither
	// readme:end
	if err != nil {
		log.Fatal(err)
	}

	fmt.Println(d.Allowed, d.Policy.Name, d.Remaining)
	// Output:
	// true user 9
}
