package httplimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// Each API key gets a bucket of 10 requests refilling at 2 per second. The
// fake clock stands still, so the eleventh request in a row is denied. On a
// denial, t of RateLimit is the wait until the request can succeed (0.5 s,
// rounded up), so it agrees with Retry-After; on an allowed request it is the
// policy's effective window, the seconds in which the key can take no more
// than r: the 0.5 s its next token takes to come back, rounded up.
func ExampleNewMiddleware() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 10, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := httplimit.NewMiddleware(limiter, httplimit.KeyByHeader("X-API-Key"))
	if err != nil {
		fmt.Println(err)
		return
	}
	api := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	}))

	for i := 1; i <= 11; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "key-1")
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		if i == 1 || i >= 10 {
			h := w.Header()
			fmt.Printf("%2d: %d RateLimit: %s  RateLimit-Policy: %s  Retry-After: %q\n",
				i, w.Code, h.Get("RateLimit"), h.Get("RateLimit-Policy"), h.Get("Retry-After"))
		}
	}
	// Output:
	//  1: 200 RateLimit: "default";r=9;t=1  RateLimit-Policy: "default";q=10;w=5  Retry-After: ""
	// 10: 200 RateLimit: "default";r=0;t=1  RateLimit-Policy: "default";q=10;w=5  Retry-After: ""
	// 11: 429 RateLimit: "default";r=0;t=1  RateLimit-Policy: "default";q=10;w=5  Retry-After: "1"
}

// Behind a load balancer at 10.0.0.0/8, clients are keyed by the address the
// balancer puts in X-Forwarded-For; a client talking to the server directly
// cannot choose its key with that header.
func ExampleKeyByIP() {
	key, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: []string{"10.0.0.0/8"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, tc := range []struct{ remote, xff string }{
		{"10.0.0.5:41000", "203.0.113.7"},               // through the balancer
		{"10.0.0.5:41000", "198.51.100.1, 203.0.113.7"}, // the client sent a header of its own
		{"203.0.113.7:52000", "198.51.100.1"},           // direct: the header is ignored
		{"10.0.0.5:41000", "2001:db8:aa:bb:1:2:3:4"},    // IPv6: grouped by /64
		{"[2001:db8:aa:bb::9]:52000", ""},               // direct IPv6
		{"10.0.0.5:41000", "unknown"},                   // the balancer could not tell
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.remote
		if tc.xff != "" {
			r.Header.Set("X-Forwarded-For", tc.xff)
		}
		k, err := key(r)
		fmt.Println(k, err)
	}
	// Output:
	// 203.0.113.7 <nil>
	// 203.0.113.7 <nil>
	// 203.0.113.7 <nil>
	// 2001:db8:aa:bb::/64 <nil>
	// 2001:db8:aa:bb::/64 <nil>
	// 10.0.0.5 <nil>
}

// The stack for production: the middleware over a Guard (timeout, fail over
// to a local limiter, circuit breaker) over a DenyCache (floods on denied
// keys answered locally) over a token bucket shared through Redis. Redis here
// is an embedded one whose clock stands still; the example then stops it, and
// the Guard's fallback answers.
func Example_production() {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	m.SetTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))

	// go-redis logs dial failures while Redis is down on a logger of its
	// own. Send its lines where yours go (here: slog at debug level, which
	// the default handler drops).
	redis.SetLogger(redisLogger{})

	client := redis.NewClient(&redis.Options{
		Addr:                  m.Addr(),
		MaxRetries:            -1,   // a retried script can take tokens twice
		ContextTimeoutEnabled: true, // let the Guard's Timeout bound each call
		DialerRetries:         1,    // a dead server fails fast
	})
	defer client.Close()

	// 100 requests at once per API key, refilling 50 per second, shared by
	// every replica.
	shared, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(50), 100)
	if err != nil {
		panic(err)
	}
	// Answer floods on denied keys locally (directly around Redis).
	cached, err := ratelimit.NewDenyCache(shared, ratelimit.DenyCacheConfig{})
	if err != nil {
		panic(err)
	}
	// This replica in the fleet of replicas on this Redis: a heartbeat
	// every second counts the replicas alive.
	fleet, err := ratelimit.NewFleet(client, ratelimit.FleetConfig{Name: "ratelimit:fleet:api"})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	if err := fleet.Beat(ctx); err != nil { // counted before serving
		panic(err)
	}
	running := make(chan error, 1)
	go func() { running <- fleet.Run(ctx) }() // until ctx ends, then it leaves
	defer func() { stop(); <-running }()
	// This replica's share, for when Redis is down: the shared limit ÷ the
	// replicas alive (a quarter with 4), capacity and rate alike.
	local, err := fleet.Fallback(shared)
	if err != nil {
		panic(err)
	}
	metrics := &sourceCounter{} // your metrics: see examples/prometheus
	limiter, err := ratelimit.NewGuard(cached, ratelimit.GuardConfig{
		Timeout:         250 * time.Millisecond,
		OnFailure:       ratelimit.FailOver,
		Fallback:        local,
		BreakerFailures: 5,
		BreakerCoolDown: 2 * time.Second,
		Hooks:           metrics,
	})
	if err != nil {
		panic(err)
	}
	mw, err := httplimit.NewMiddleware(limiter, httplimit.KeyByHeader("X-API-Key"))
	if err != nil {
		panic(err)
	}
	api := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	}))

	get := func(apiKey string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/v1/things", nil)
		r.Header.Set("X-API-Key", apiKey)
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		return w
	}

	first := get("key-1")
	fmt.Printf("first: %d, RateLimit-Policy %s, RateLimit %s\n",
		first.Code, first.Header().Get("RateLimit-Policy"), first.Header().Get("RateLimit"))
	ok := 1
	for ; ok < 150; ok++ {
		if w := get("key-1"); w.Code != http.StatusOK {
			fmt.Printf("then %d more 200s; request %d: %d, Retry-After %s, RateLimit %s\n",
				ok-1, ok+1, w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit"))
			break
		}
	}

	m.Close() // Redis goes away
	fallbackBefore := metrics.n[ratelimit.FromFallback].Load()
	answered := 0
	for i := 0; i < 10; i++ {
		if get("key-2").Code == http.StatusOK {
			answered++
		}
	}
	fmt.Printf("Redis down: %d of 10 answered 200, %d by the fallback; breaker %v\n",
		answered, metrics.n[ratelimit.FromFallback].Load()-fallbackBefore, limiter.BreakerState())
	// Output:
	// first: 200, RateLimit-Policy "default";q=100;w=2, RateLimit "default";r=99;t=1
	// then 99 more 200s; request 101: 429, Retry-After 1, RateLimit "default";r=0;t=1
	// Redis down: 10 of 10 answered 200, 10 by the fallback; breaker open
}

// redisLogger passes go-redis's own log lines to slog at debug level. Any
// type with this Printf method can be given to redis.SetLogger.
type redisLogger struct{}

func (redisLogger) Printf(ctx context.Context, format string, v ...any) {
	slog.DebugContext(ctx, fmt.Sprintf(format, v...))
}

// sourceCounter counts a Guard's decisions by who answered them.
type sourceCounter struct {
	ratelimit.NopHooks
	n [ratelimit.FromShadow + 1]atomic.Int64
}

func (c *sourceCounter) Decided(ev ratelimit.Event) { c.n[ev.Source].Add(1) }
