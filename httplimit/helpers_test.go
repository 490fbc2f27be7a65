package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// epoch is where every fake clock in these tests starts.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// keyHeader is the header the tests key requests by.
const keyHeader = "X-Api-Key"

// tokenBucket returns an in-process token bucket on a new fake clock.
func tokenBucket(t testing.TB, rate ratelimit.Rate, capacity int) (*ratelimit.TokenBucket, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.NewClock(epoch)
	l, err := ratelimit.NewTokenBucket(rate, capacity, ratelimit.WithClock(clock))
	require.NoError(t, err)
	return l, clock
}

// counter is a handler that answers 200 "ok" and counts its calls.
type counter struct{ calls atomic.Int64 }

func (c *counter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	c.calls.Add(1)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write([]byte("ok"))
}

// limited returns m's handler in front of a counter, and the counter.
func limited(t testing.TB, l ratelimit.Limiter, opts ...httplimit.Option) (http.Handler, *counter) {
	t.Helper()
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), opts...)
	require.NoError(t, err)
	next := &counter{}
	return m.Handler(next), next
}

// do sends one GET for key, with Accept accept unless it is empty, through h.
func do(h http.Handler, key, accept string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	if key != "" {
		r.Header.Set(keyHeader, key)
	}
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// stubLimiter returns a fixed Result and error, and records its calls.
type stubLimiter struct {
	res ratelimit.Result
	err error

	mu    sync.Mutex
	calls []stubCall
}

// stubCall is one Allow call's arguments.
type stubCall struct {
	key string
	n   int
}

func (s *stubLimiter) Allow(_ context.Context, key string, n int) (ratelimit.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, stubCall{key, n})
	return s.res, s.err
}

// callCount returns how many times Allow was called.
func (s *stubLimiter) callCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.calls)
}

// rateLimitFields are the header fields the middleware sets on a decision.
var rateLimitFields = []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"}
