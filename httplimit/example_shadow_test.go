package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// A limit of 2 requests, refilling 1 a second, rolled out in shadow mode:
// no request is denied, and those that would have been say so in
// RateLimit-Shadow. Flipping the Shadow to enforce turns on 429s from the
// next request.
func ExampleWithShadowHeader() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	bucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	shadow, err := ratelimit.NewShadow(bucket, ratelimit.ShadowConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := httplimit.NewMiddleware(shadow, httplimit.KeyByHeader("X-API-Key"), httplimit.WithShadowHeader())
	if err != nil {
		fmt.Println(err)
		return
	}
	api := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "hello")
	}))
	get := func() {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "k1")
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		fmt.Printf("%d RateLimit: %s  RateLimit-Shadow: %q\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("RateLimit-Shadow"))
	}
	for range 3 {
		get()
	}
	shadow.SetEnforce(true)
	get()
	// Output:
	// 200 RateLimit: "default";r=1;t=1  RateLimit-Shadow: ""
	// 200 RateLimit: "default";r=0;t=1  RateLimit-Shadow: ""
	// 200 RateLimit: "default";r=0;t=1  RateLimit-Shadow: "\"default\";r=0;t=1"
	// 429 RateLimit: "default";r=0;t=1  RateLimit-Shadow: ""
}
