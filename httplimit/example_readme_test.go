package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// The README's first example: an API limited per client IP address behind
// load balancers at 10.0.0.0/8, in process. The eleventh request of one
// client within the burst is answered 429 with Retry-After and the IETF
// fields; another client behind the same proxy has a limit of its own.
func ExamplePerIP_frontPage() {
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux := http.NewServeMux()

	// readme:begin
	limiter := ratelimit.Must(ratelimit.NewTokenBucket(ratelimit.PerMinute(100), 10)) // 100 a minute, bursts of 10
	h := ratelimit.Must(httplimit.PerIP(limiter, api, httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))))
	mux.Handle("/api/", h)
	// readme:end

	for i, client := range []string{"203.0.113.7", "203.0.113.7", "203.0.113.7", "203.0.113.7",
		"203.0.113.7", "203.0.113.7", "203.0.113.7", "203.0.113.7", "203.0.113.7", "203.0.113.7",
		"203.0.113.7", "198.51.100.1"} {
		r := httptest.NewRequest(http.MethodGet, "/api/orders", nil)
		r.RemoteAddr = "10.0.0.5:41000" // the load balancer
		r.Header.Set("X-Forwarded-For", client)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if i >= 9 {
			fmt.Printf("%-12s %d RateLimit: %s  RateLimit-Policy: %s  Retry-After: %q\n", client, w.Code,
				w.Header().Get("RateLimit"), w.Header().Get("RateLimit-Policy"), w.Header().Get("Retry-After"))
		}
	}
	// Output:
	// 203.0.113.7  200 RateLimit: "default";r=0;t=1  RateLimit-Policy: "default";q=10;w=6  Retry-After: ""
	// 203.0.113.7  429 RateLimit: "default";r=0;t=1  RateLimit-Policy: "default";q=10;w=6  Retry-After: "1"
	// 198.51.100.1 200 RateLimit: "default";r=9;t=1  RateLimit-Policy: "default";q=10;w=6  Retry-After: ""
}

// The README's second example: the same limit shared by every replica
// through Redis. Three replicas, each with its own limiter on one server,
// take turns answering one client, and the eleventh request is refused
// whichever replica it reaches. (An embedded Redis stands in for the
// server here.)
func ExamplePerIP_redis() {
	server, err := miniredis.Run()
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()
	client := redis.NewClient(&redis.Options{Addr: server.Addr()})
	defer client.Close()
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })

	replica := func() http.Handler {
		// readme:begin
		limiter := ratelimit.Must(ratelimit.NewRedisTokenBucket(client, ratelimit.PerMinute(100), 10))
		h := ratelimit.Must(httplimit.PerIP(limiter, api, httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8"))))
		// readme:end
		return h
	}
	replicas := []http.Handler{replica(), replica(), replica()}

	for i := range 11 {
		r := httptest.NewRequest(http.MethodGet, "/api/orders", nil)
		r.RemoteAddr = "10.0.0.5:41000"
		r.Header.Set("X-Forwarded-For", "203.0.113.7")
		w := httptest.NewRecorder()
		replicas[i%3].ServeHTTP(w, r)
		if i >= 9 {
			fmt.Printf("request %d on replica %d: %d\n", i+1, i%3+1, w.Code)
		}
	}
	// Output:
	// request 10 on replica 1: 200
	// request 11 on replica 2: 429
}

// The README's third example: a handler's limit tested without sleeping.
// The limiter runs on a clock that moves only when told to: three requests
// a minute pass, the fourth is refused, and once the clock has moved on by
// the time one request takes to come back (20 s) the next one passes.
func ExamplePerIP_testing() {
	api := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })

	// readme:begin
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter := ratelimit.Must(ratelimit.NewGCRA(3, time.Minute, ratelimit.WithClock(clock)))
	h := ratelimit.Must(httplimit.PerIP(limiter, api))
	status := func() int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/api/orders", nil))
		return w.Code
	}
	fmt.Println(status(), status(), status(), status()) // 200 200 200 429
	clock.Advance(20 * time.Second)
	fmt.Println(status()) // 200
	// readme:end

	// Output:
	// 200 200 200 429
	// 200
}
