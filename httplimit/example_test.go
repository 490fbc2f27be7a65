package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// Each API key gets a bucket of 10 requests refilling at 2 per second. The
// fake clock stands still, so the eleventh request in a row is denied.
func ExampleNewMiddleware() {
	clock := ratelimit.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewTokenBucket(10, 2, ratelimit.WithClock(clock))
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
	// 10: 200 RateLimit: "default";r=0;t=5  RateLimit-Policy: "default";q=10;w=5  Retry-After: ""
	// 11: 429 RateLimit: "default";r=0;t=5  RateLimit-Policy: "default";q=10;w=5  Retry-After: "1"
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
