package httplimit_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// Per-IP limiting behind a proxy in one call: 2 requests a minute per
// client address, believing X-Forwarded-For only from the load balancers
// at 10.0.0.0/8. The third request of 203.0.113.7 is answered 429 with
// Retry-After and the IETF fields; 198.51.100.1 has a limit of its own.
func ExamplePerIP() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") })

	limiter, err := ratelimit.NewGCRA(2, time.Minute, ratelimit.WithClock(clock))
	if err != nil {
		panic(err)
	}
	h, err := httplimit.PerIP(limiter, mux, httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))
	if err != nil {
		panic(err)
	}

	for _, client := range []string{"203.0.113.7", "203.0.113.7", "203.0.113.7", "198.51.100.1"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.5:41000" // the load balancer
		r.Header.Set("X-Forwarded-For", client)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%-12s %d RateLimit: %s  RateLimit-Policy: %s  Retry-After: %q\n", client, w.Code,
			w.Header().Get("RateLimit"), w.Header().Get("RateLimit-Policy"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 203.0.113.7  200 RateLimit: "default";r=1;t=30  RateLimit-Policy: "default";q=2;w=60  Retry-After: ""
	// 203.0.113.7  200 RateLimit: "default";r=0;t=30  RateLimit-Policy: "default";q=2;w=60  Retry-After: ""
	// 203.0.113.7  429 RateLimit: "default";r=0;t=30  RateLimit-Policy: "default";q=2;w=60  Retry-After: "30"
	// 198.51.100.1 200 RateLimit: "default";r=1;t=30  RateLimit-Policy: "default";q=2;w=60  Retry-After: ""
}

// Each Bearer token gets its own limit, under a hash of the token (never
// the token itself). A request without a token is answered 401 with the
// Bearer challenge; one with a malformed Authorization field, 400.
func ExampleKeyByBearer() {
	limiter, err := ratelimit.NewGCRA(100, time.Minute)
	if err != nil {
		panic(err)
	}
	m, err := httplimit.NewMiddleware(limiter, httplimit.KeyByBearer())
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "hello") }))

	for _, auth := range []string{"Bearer mF_9.B5f-4.1JqM", "", "Bearer two words"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%q: %d WWW-Authenticate: %q\n", auth, w.Code, w.Header().Get("WWW-Authenticate"))
	}
	// Output:
	// "Bearer mF_9.B5f-4.1JqM": 200 WWW-Authenticate: ""
	// "": 401 WWW-Authenticate: "Bearer"
	// "Bearer two words": 400 WWW-Authenticate: "Bearer error=\"invalid_request\""
}

// Each key's plan names its policy in the fields: a PolicyFunc gives the
// plan's limit, and WithPlanName its name (a ratelimit.PolicyTable's
// PlanOf and PolicyFunc give both).
func ExampleWithPlanName() {
	plans := map[string]string{"key-free": "free", "key-pro": "pro"}
	limits := map[string]int{"free": 10, "pro": 1000}
	limiter, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithPolicyFunc(func(_ context.Context, key string) (ratelimit.Policy, error) {
		return ratelimit.Policy{Limit: limits[plans[key]], Window: time.Minute}, nil
	}))
	if err != nil {
		panic(err)
	}
	m, err := httplimit.NewMiddleware(limiter, httplimit.KeyByHeader("X-API-Key"),
		httplimit.WithPlanName(func(key string) (string, bool) { p, ok := plans[key]; return p, ok }))
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	for _, key := range []string{"key-free", "key-pro"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s: RateLimit-Policy: %s\n", key, w.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// key-free: RateLimit-Policy: "free";q=10;w=60
	// key-pro: RateLimit-Policy: "pro";q=1000;w=60
}

// An observer counts decisions by route (the ServeMux pattern that
// matched) and outcome, as a metrics package would with labels.
func ExampleWithObserver() {
	counts := map[string]int{} // one goroutine here; guard it in a server
	observe := func(r *http.Request, d ratelimit.Decision, err error) {
		outcome := "allowed"
		switch {
		case err != nil:
			outcome = "error"
		case !d.Allowed:
			outcome = "denied"
		}
		counts[r.Pattern+" "+outcome]++
	}
	limiter, err := ratelimit.NewGCRA(2, time.Minute)
	if err != nil {
		panic(err)
	}
	m, err := httplimit.NewMiddleware(limiter, httplimit.KeyByHeader("X-API-Key"), httplimit.WithObserver(observe))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	for _, path := range []string{"/items/1", "/items/2", "/items/3"} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set("X-API-Key", "key-1")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	fmt.Println(counts)
	// Output:
	// map[GET /items/{id} allowed:2 GET /items/{id} denied:1]
}

// Without WithOnError, a limiter that fails (Redis down, say) is logged
// at Warn, one line per 10 seconds at most, and the request fails open.
// WithLogger sends the lines to a logger of your own.
func ExampleWithLogger() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{} // for a stable output
			}
			return a
		},
	}))
	m, err := httplimit.NewMiddleware(downLimiter{}, httplimit.KeyByHeader("X-API-Key"), httplimit.WithLogger(logger))
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /v1/things/{id}", m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	for range 3 {
		r := httptest.NewRequest(http.MethodGet, "/v1/things/42", nil)
		r.Header.Set("X-API-Key", "key-1")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	// Output:
	// level=WARN msg="httplimit: rate limiter error" error="ratelimit: backend failure: connection refused" method=GET route="GET /v1/things/{id}"
	// 200
	// 200
	// 200
}

// downLimiter fails every call as a limiter whose Redis is down does.
type downLimiter struct{}

func (downLimiter) Allow(context.Context, string, int) (ratelimit.Result, error) {
	return ratelimit.Result{}, fmt.Errorf("%w: connection refused", ratelimit.ErrBackend)
}
