package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// Two limits at once: 5 requests a second and 8 an hour per API key, in a
// Composite. RateLimit-Policy lists both. On an allowed request, RateLimit
// lists each policy's service limit, the one that bound the decision (the
// one with the smallest share of its limit left) first, each with its own
// r and t, its effective window: 1 s for per-second, whose next unit comes
// back within 200 ms, and 450 s for per-hour, one unit's time. A denial
// lists the policy that denied, whose t is the Retry-After.
// RateLimit-Limit and RateLimit-Remaining are the bound policy's. The fake
// clock stands still except where the example moves it, one second before
// request 7.
func ExampleNewMiddleware_composite() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perSecond, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 5, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	perHour, err := ratelimit.NewGCRA(8, time.Hour, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	limiter, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "per-second", Limiter: perSecond},
		ratelimit.Part{Name: "per-hour", Limiter: perHour},
	)
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

	for i := 1; i <= 10; i++ {
		if i == 7 {
			clock.Advance(time.Second) // per-second is full again
		}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "key-1")
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		h := w.Header()
		if i == 1 {
			fmt.Println("RateLimit-Policy:", h.Get("RateLimit-Policy"))
		}
		fmt.Printf("%2d: %d RateLimit: %-42s Limit: %s Remaining: %s Retry-After: %q\n",
			i, w.Code, h.Get("RateLimit"), h.Get("RateLimit-Limit"), h.Get("RateLimit-Remaining"), h.Get("Retry-After"))
	}
	// Output:
	// RateLimit-Policy: "per-second";q=5;w=1, "per-hour";q=8;w=3600
	//  1: 200 RateLimit: "per-second";r=4;t=1, "per-hour";r=7;t=450 Limit: 5 Remaining: 4 Retry-After: ""
	//  2: 200 RateLimit: "per-second";r=3;t=1, "per-hour";r=6;t=450 Limit: 5 Remaining: 3 Retry-After: ""
	//  3: 200 RateLimit: "per-second";r=2;t=1, "per-hour";r=5;t=450 Limit: 5 Remaining: 2 Retry-After: ""
	//  4: 200 RateLimit: "per-second";r=1;t=1, "per-hour";r=4;t=450 Limit: 5 Remaining: 1 Retry-After: ""
	//  5: 200 RateLimit: "per-second";r=0;t=1, "per-hour";r=3;t=450 Limit: 5 Remaining: 0 Retry-After: ""
	//  6: 429 RateLimit: "per-second";r=0;t=1                       Limit: 5 Remaining: 0 Retry-After: "1"
	//  7: 200 RateLimit: "per-hour";r=2;t=449, "per-second";r=4;t=1 Limit: 8 Remaining: 2 Retry-After: ""
	//  8: 200 RateLimit: "per-hour";r=1;t=449, "per-second";r=3;t=1 Limit: 8 Remaining: 1 Retry-After: ""
	//  9: 200 RateLimit: "per-hour";r=0;t=449, "per-second";r=2;t=1 Limit: 8 Remaining: 0 Retry-After: ""
	// 10: 429 RateLimit: "per-hour";r=0;t=449                       Limit: 8 Remaining: 0 Retry-After: "449"
}

// Failures of the service itself (5xx) should not cost clients their
// quota: WithRefund gives the unit back after any such response. Here the
// backend fails the first five requests, each of which is refunded, and
// the key still has its three requests afterwards.
func ExampleWithRefund() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 3, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := httplimit.NewMiddleware(limiter, httplimit.KeyByHeader("X-API-Key"),
		httplimit.WithRefund(func(_ *http.Request, status int) bool { return status >= 500 }))
	if err != nil {
		fmt.Println(err)
		return
	}
	backendUp := false
	api := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if !backendUp {
			http.Error(w, "backend unavailable", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))

	var codes []string
	for i := 1; i <= 9; i++ {
		backendUp = i > 5
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-API-Key", "key-1")
		w := httptest.NewRecorder()
		api.ServeHTTP(w, r)
		codes = append(codes, strconv.Itoa(w.Code))
	}
	fmt.Println(strings.Join(codes, " "))
	// Output:
	// 503 503 503 503 503 200 200 200 429
}

// On a login endpoint keyed by account, only failed attempts should count:
// WithRefund gives back the unit of every successful login. Three failures
// lock the account for a while (here a GCRA of 3 per 15 minutes forgives
// one every 5 minutes), whatever successes come between them.
func ExampleWithRefund_login() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewGCRA(3, 15*time.Minute, ratelimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	byAccount := func(r *http.Request) (string, error) {
		if user := r.PostFormValue("user"); user != "" {
			return user, nil
		}
		return "", httplimit.ErrNoKey
	}
	m, err := httplimit.NewMiddleware(limiter, byAccount,
		httplimit.WithRefund(func(_ *http.Request, status int) bool { return status < 400 }))
	if err != nil {
		fmt.Println(err)
		return
	}
	login := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.PostFormValue("password") != "right" {
			http.Error(w, "wrong user or password", http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "welcome")
	}))

	for _, password := range []string{"wrong", "right", "right", "wrong", "right", "wrong", "right"} {
		form := strings.NewReader("user=alice&password=" + password)
		r := httptest.NewRequest(http.MethodPost, "/login", form)
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		login.ServeHTTP(w, r)
		fmt.Printf("%-5s %d Retry-After: %q\n", password, w.Code, w.Header().Get("Retry-After"))
	}
	// Output:
	// wrong 401 Retry-After: ""
	// right 200 Retry-After: ""
	// right 200 Retry-After: ""
	// wrong 401 Retry-After: ""
	// right 200 Retry-After: ""
	// wrong 401 Retry-After: ""
	// right 429 Retry-After: "300"
}

// A search endpoint whose cost is the number of results it returns, known
// only once the search has run: the middleware takes 1 unit up front, and
// the handler reports the true cost with SetCost, which the middleware
// settles after it returns. A search that returns more than the units left
// puts the key in debt, and later requests wait until it is paid off.
func ExampleSetCost() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 10, ratelimit.WithClock(clock)) // 10 results, 2 more a second
	if err != nil {
		fmt.Println(err)
		return
	}
	m, err := httplimit.NewMiddleware(limiter, httplimit.KeyByHeader("X-API-Key"), httplimit.WithSettle())
	if err != nil {
		fmt.Println(err)
		return
	}
	search := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		results, _ := strconv.Atoi(r.URL.Query().Get("results")) // stands for running the search
		httplimit.SetCost(r.Context(), results)
		fmt.Fprintf(w, "%d results\n", results)
	}))

	for _, results := range []string{"3", "0", "14", "1"} {
		r := httptest.NewRequest(http.MethodGet, "/search?results="+results, nil)
		r.Header.Set("X-API-Key", "key-1")
		w := httptest.NewRecorder()
		search.ServeHTTP(w, r)
		fmt.Printf("%-2s results: %d RateLimit: %s Retry-After: %q\n", results, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 3  results: 200 RateLimit: "default";r=9;t=1 Retry-After: ""
	// 0  results: 200 RateLimit: "default";r=6;t=1 Retry-After: ""
	// 14 results: 200 RateLimit: "default";r=6;t=1 Retry-After: ""
	// 1  results: 429 RateLimit: "default";r=0;t=4 Retry-After: "4"
}
