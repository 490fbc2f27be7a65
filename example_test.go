package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// A bucket of 5 tokens refilling at 2 per second, asked for one token every
// 0.3 s. Eleven requests pass on the initial burst plus the refill, then the
// bucket alternates between empty and one token.
func ExampleTokenBucket() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 5, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	for i := 0; i < 15; i++ {
		res, err := limiter.Allow(context.Background(), "user:42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("[%02d] allowed=%-5v remaining=%d retry=%v\n", i, res.Allowed, res.Remaining, res.RetryAfter)
		clock.Advance(300 * time.Millisecond)
	}
	// Output:
	// [00] allowed=true  remaining=4 retry=0s
	// [01] allowed=true  remaining=3 retry=0s
	// [02] allowed=true  remaining=3 retry=0s
	// [03] allowed=true  remaining=2 retry=0s
	// [04] allowed=true  remaining=2 retry=0s
	// [05] allowed=true  remaining=2 retry=0s
	// [06] allowed=true  remaining=1 retry=0s
	// [07] allowed=true  remaining=1 retry=0s
	// [08] allowed=true  remaining=0 retry=0s
	// [09] allowed=true  remaining=0 retry=0s
	// [10] allowed=true  remaining=0 retry=0s
	// [11] allowed=false remaining=0 retry=200ms
	// [12] allowed=true  remaining=0 retry=0s
	// [13] allowed=false remaining=0 retry=100ms
	// [14] allowed=true  remaining=0 retry=0s
}

// A GCRA of 10 requests a minute lets a burst of 10 through, then one every
// 6 seconds.
func ExampleGCRA() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	allowed := 0
	for i := 0; i < 12; i++ {
		if res, _ := limiter.Allow(ctx, "api-key", 1); res.Allowed {
			allowed++
		}
	}
	res, _ := limiter.Allow(ctx, "api-key", 1)
	fmt.Printf("burst: %d allowed, next in %v\n", allowed, res.RetryAfter)
	clock.Advance(res.RetryAfter)
	res, _ = limiter.Allow(ctx, "api-key", 1)
	fmt.Printf("after the wait: allowed=%v, full again in %v\n", res.Allowed, res.ResetAfter)
	// Output:
	// burst: 10 allowed, next in 6s
	// after the wait: allowed=true, full again in 1m0s
}

// Asking for more than the capacity can never succeed, so it is an error
// rather than a denial.
func ExampleLimiter_errors() {
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 3)
	if err != nil {
		panic(err)
	}
	_, err = limiter.Allow(context.Background(), "k", 4)
	fmt.Println(err)
	_, err = ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 0)
	fmt.Println(err)
	// Output:
	// ratelimit: cost exceeds limit: n = 4, limit = 3
	// ratelimit: invalid configuration: NewTokenBucket: burst 0 must be > 0
}

// A fixed window of 20 requests per 30 s, asked for 25 at once: the first 20
// pass, the rest wait for the window to end, and then the key has 20 again.
func ExampleFixedWindow() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewFixedWindow(20, 30*time.Second, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	allowed := 0
	var last ratelimit.Result
	for i := 0; i < 25; i++ {
		res, err := limiter.Allow(ctx, "admin", 1)
		if err != nil {
			panic(err)
		}
		if res.Allowed {
			allowed++
		}
		last = res
	}
	fmt.Printf("%d of 25 allowed; the window ends in %v\n", allowed, last.RetryAfter)

	clock.Advance(10 * time.Second)
	res, _ := limiter.Allow(ctx, "admin", 1)
	fmt.Printf("10 s later: allowed=%v, retry after %v\n", res.Allowed, res.RetryAfter)

	clock.Advance(res.RetryAfter)
	res, _ = limiter.Allow(ctx, "admin", 1)
	fmt.Printf("a new window: allowed=%v, remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// 20 of 25 allowed; the window ends in 30s
	// 10 s later: allowed=false, retry after 20s
	// a new window: allowed=true, remaining=19
}

// Wait blocks until the limiter allows the work: here a bucket of one token
// refilling every millisecond, so the second call sleeps about 1 ms. It
// returns at once, without sleeping, when the wait would outlast the ctx's
// deadline or the cost can never be allowed.
func ExampleWait() {
	ctx := context.Background()
	fast, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1000), 1) // 1 token, 1000 per second
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 2; i++ {
		res, err := ratelimit.Wait(ctx, fast, "worker", 1)
		fmt.Printf("job %d: allowed=%v err=%v\n", i, res.Allowed, err)
	}

	// One token a minute, already taken: a 1 s deadline cannot be met.
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	slow, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(1), 1, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	_, _ = slow.Allow(ctx, "worker", 1)
	deadline, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	res, err := ratelimit.Wait(deadline, slow, "worker", 1)
	fmt.Printf("deadline: retry after %v, deadline exceeded: %v\n",
		res.RetryAfter, errors.Is(err, context.DeadlineExceeded))

	_, err = ratelimit.Wait(ctx, slow, "worker", 2)
	fmt.Println("cost 2 of 1:", errors.Is(err, ratelimit.ErrCostExceedsLimit))
	// Output:
	// job 1: allowed=true err=<nil>
	// job 2: allowed=true err=<nil>
	// deadline: retry after 1m0s, deadline exceeded: true
	// cost 2 of 1: true
}

// A DenyCache in front of a limiter answers a flood on a denied key itself,
// for as long as the limiter cannot allow it, and asks the limiter again
// once it could. The backend here is an in-process bucket on a fake clock;
// in production it is a Redis limiter, and each local answer saves a round
// trip.
func ExampleDenyCache() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	backend, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithClock(clock)) // 2 tokens, 1 per second
	if err != nil {
		panic(err)
	}
	local := &countSources{}
	cache, err := ratelimit.NewDenyCache(backend, ratelimit.DenyCacheConfig{Hooks: local, Clock: clock})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	allowed := 0
	for i := 0; i < 100; i++ {
		if res, _ := cache.Allow(ctx, "client-7", 1); res.Allowed {
			allowed++
		}
	}
	fmt.Printf("%d of 100 allowed, %d denials answered locally\n", allowed, local.n[ratelimit.FromDenyCache].Load())

	clock.Advance(400 * time.Millisecond)
	res, _ := cache.Allow(ctx, "client-7", 1)
	fmt.Printf("0.4 s later: allowed=%v, retry after %v\n", res.Allowed, res.RetryAfter)

	clock.Advance(res.RetryAfter)
	res, _ = cache.Allow(ctx, "client-7", 1)
	fmt.Printf("after the wait: allowed=%v, answered locally in all: %d\n", res.Allowed, local.n[ratelimit.FromDenyCache].Load())
	// Output:
	// 2 of 100 allowed, 97 denials answered locally
	// 0.4 s later: allowed=false, retry after 600ms
	// after the wait: allowed=true, answered locally in all: 98
}

// A Guard keeps a failing backend from failing the service. Here it denies
// while the backend is down (FailClosed) and stops asking it after two
// failures in a row (the circuit breaker); after the cool-down one probe goes
// through, and the Guard is back to the backend's answers. A failure is
// answered by the policy with a nil error: the caller sees a denial, and
// Hooks see the backend's error.
func ExampleGuard() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	bucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 10, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	backend := &flakyBackend{TokenBucket: bucket}
	guard, err := ratelimit.NewGuard(backend, ratelimit.GuardConfig{
		Timeout:         50 * time.Millisecond,
		OnFailure:       ratelimit.FailClosed,
		BreakerFailures: 2,
		BreakerCoolDown: 10 * time.Second,
		Clock:           clock,
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	show := func(label string) {
		res, err := guard.Allow(ctx, "user:42", 1)
		fmt.Printf("%-10s allowed=%-5v retry=%-4v err=%v breaker=%v\n",
			label, res.Allowed, res.RetryAfter, err, guard.BreakerState())
	}
	show("up")
	backend.down.Store(true)
	show("down")
	show("down")
	show("down")
	clock.Advance(10 * time.Second)
	backend.down.Store(false)
	show("recovered")
	// Output:
	// up         allowed=true  retry=0s   err=<nil> breaker=closed
	// down       allowed=false retry=1s   err=<nil> breaker=closed
	// down       allowed=false retry=1s   err=<nil> breaker=open
	// down       allowed=false retry=10s  err=<nil> breaker=open
	// recovered  allowed=true  retry=0s   err=<nil> breaker=closed
}

// flakyBackend is a token bucket whose backend can be switched off, as a
// Redis limiter's is by an outage. It embeds the bucket, a Decider, so it
// overrides Decide, which the Guard calls, as well as Allow.
type flakyBackend struct {
	*ratelimit.TokenBucket
	down atomic.Bool
}

func (b *flakyBackend) Decide(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	if b.down.Load() {
		return ratelimit.Decision{}, errors.New("dial tcp 10.0.0.7:6379: connect: connection refused")
	}
	return b.TokenBucket.Decide(ctx, key, n)
}

func (b *flakyBackend) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	d, err := b.Decide(ctx, key, n)
	return d.Result, err
}

// countSources counts the decisions a decorator reports, by who answered.
type countSources struct {
	ratelimit.NopHooks
	n [ratelimit.FromDenyCache + 1]atomic.Int64
}

func (c *countSources) Decided(ev ratelimit.Event) { c.n[ev.Source].Add(1) }

// newMiniredis starts an embedded Redis whose TIME stands still at a fixed
// instant, and a client to it. advance moves the server's time (TIME and key
// expiry) forward; stop closes both.
func newMiniredis() (client *redis.Client, advance func(time.Duration), stop func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(now)
	client = redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	advance = func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	}
	stop = func() {
		_ = client.Close()
		m.Close()
	}
	return client, advance, stop
}

// Two replicas of a service, each with its own client, share one bucket of 5
// tokens refilling at 2 per second: what one takes, the other cannot. The
// decision runs in Redis on the server's clock.
func ExampleRedisTokenBucket() {
	client, advance, stop := newMiniredis()
	defer stop()
	replicaA, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(2), 5)
	if err != nil {
		panic(err)
	}
	replicaB, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(2), 5)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	res, err := replicaA.Allow(ctx, "user:42", 3)
	fmt.Printf("A takes 3: allowed=%v remaining=%d err=%v\n", res.Allowed, res.Remaining, err)
	res, _ = replicaB.Allow(ctx, "user:42", 2)
	fmt.Printf("B takes 2: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	res, _ = replicaA.Allow(ctx, "user:42", 1)
	fmt.Printf("A takes 1: allowed=%v retry after %v\n", res.Allowed, res.RetryAfter)
	advance(res.RetryAfter)
	res, _ = replicaA.Allow(ctx, "user:42", 1)
	fmt.Printf("0.5 s on:  allowed=%v, full again in %v\n", res.Allowed, res.ResetAfter)
	// Output:
	// A takes 3: allowed=true remaining=2 err=<nil>
	// B takes 2: allowed=true remaining=0
	// A takes 1: allowed=false retry after 500ms
	// 0.5 s on:  allowed=true, full again in 2.5s
}

// A GCRA of 10 requests a minute on Redis: a burst of 10, then one every
// 6 s. Each key is a single string in Redis that expires once the key is
// back to its full limit.
func ExampleRedisGCRA() {
	client, advance, stop := newMiniredis()
	defer stop()
	limiter, err := ratelimit.NewRedisGCRA(client, 10, time.Minute)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	allowed := 0
	var last ratelimit.Result
	for i := 0; i < 12; i++ {
		res, err := limiter.Allow(ctx, "api-key", 1)
		if err != nil {
			panic(err)
		}
		if res.Allowed {
			allowed++
		}
		last = res
	}
	fmt.Printf("burst: %d of 12 allowed, next in %v\n", allowed, last.RetryAfter)
	advance(last.RetryAfter)
	res, _ := limiter.Allow(ctx, "api-key", 1)
	fmt.Printf("6 s on: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// burst: 10 of 12 allowed, next in 6s
	// 6 s on: allowed=true remaining=0
}

// A fixed window of 3 requests per 10 s on Redis. The window opens at the
// key's first counted request, and its end is the key's expiry in Redis.
func ExampleRedisFixedWindow() {
	client, advance, stop := newMiniredis()
	defer stop()
	limiter, err := ratelimit.NewRedisFixedWindow(client, 3, 10*time.Second)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		res, err := limiter.Allow(ctx, "login:alice", 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("attempt %d: allowed=%-5v remaining=%d retry after %v\n", i, res.Allowed, res.Remaining, res.RetryAfter)
	}
	advance(10 * time.Second)
	res, _ := limiter.Allow(ctx, "login:alice", 1)
	fmt.Printf("next window: allowed=%v remaining=%d\n", res.Allowed, res.Remaining)
	// Output:
	// attempt 1: allowed=true  remaining=2 retry after 0s
	// attempt 2: allowed=true  remaining=1 retry after 0s
	// attempt 3: allowed=true  remaining=0 retry after 0s
	// attempt 4: allowed=false remaining=0 retry after 10s
	// next window: allowed=true remaining=2
}
