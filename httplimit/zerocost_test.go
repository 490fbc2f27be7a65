package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// zeroCostRun puts key "alice" of l three hours in debt (a plan of 1 a
// second, 10 at once, with room for the debt), then sends it 100 requests
// whose CostFunc says 0 and whose handler settles 5, through a Middleware
// built WithSettle, and returns how many ran.
func zeroCostRun(t *testing.T, l ratelimit.Limiter, clock ratelimit.Clock) int {
	t.Helper()
	a := l.(ratelimit.Adjuster)
	_, err := a.Settle(context.Background(), "alice", 0, 10+3*3600)
	require.NoError(t, err)
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader),
		httplimit.WithCost(func(*http.Request) (int, error) { return 0, nil }),
		httplimit.WithSettle(), httplimit.WithClock(clock))
	require.NoError(t, err)
	ran := 0
	h := m.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		ran++
		httplimit.SetCost(r.Context(), 5)
	}))
	for range 100 {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set(keyHeader, "alice")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, w.Code, w.Body.String())
	}
	return ran
}

// maxDebt leaves room for the three hours of debt of zeroCostRun, and
// unbounded lets its one Settle charge them.
var maxDebt, unbounded = ratelimit.WithMaxDebt(4 * 3600), ratelimit.WithMaxSettle(ratelimit.UnboundedSettle)

// A request of cost 0 never runs while its key is in debt: 100 requests
// estimated at 0, each settling 5, on a key three hours in debt all ran
// when a cost of 0 was a peek.
func TestACostOfZeroDoesNotRunOnAKeyInDebt(t *testing.T) {
	t.Run("in process", func(t *testing.T) {
		clock := ratelimittest.NewClock(epoch)
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 10, ratelimit.WithClock(clock), maxDebt, unbounded)
		require.NoError(t, err)
		assert.Equal(t, 0, zeroCostRun(t, l, clock))
	})
	t.Run("miniredis", func(t *testing.T) {
		_, client, _ := redistest.Miniredis(t, epoch)
		l, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(1), 10, maxDebt, unbounded)
		require.NoError(t, err)
		assert.Equal(t, 0, zeroCostRun(t, l, ratelimittest.NewClock(epoch)))
	})
	t.Run("redis-server", func(t *testing.T) {
		client := redistest.Start(t).Client(t)
		clock := ratelimittest.NewClock(time.Now())
		l, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(1), 10, ratelimit.WithCallerClock(clock), maxDebt, unbounded)
		require.NoError(t, err)
		assert.Equal(t, 0, zeroCostRun(t, l, clock))
	})
}

// A request of cost 0 takes a unit to run and gives it back after its
// handler, unless the handler reports a cost: a key of 3 runs three such
// requests at once, and is full again once they have returned.
func TestACostOfZeroHoldsAUnitWhileItRuns(t *testing.T) {
	l, clock := tokenBucket(t, ratelimit.Every(1000*time.Second), 3)
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader),
		httplimit.WithCost(func(*http.Request) (int, error) { return 0, nil }),
		httplimit.WithSettle(), httplimit.WithClock(clock))
	require.NoError(t, err)
	var codes []int
	var inner http.Handler
	depth := 0
	inner = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		depth++
		if depth <= 4 {
			// A request made while this one runs.
			rec := httptest.NewRecorder()
			inner2 := httptest.NewRequest(http.MethodGet, "/", nil)
			inner2.Header.Set(keyHeader, "alice")
			m.Handler(inner).ServeHTTP(rec, inner2)
			codes = append(codes, rec.Code)
		}
	})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(keyHeader, "alice")
	w := httptest.NewRecorder()
	m.Handler(inner).ServeHTTP(w, r)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, []int{http.StatusTooManyRequests, http.StatusOK, http.StatusOK}, codes, "three run at once, the fourth is denied")
	res, err := l.Allow(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, 3, res.Remaining, "every unit given back")
}
