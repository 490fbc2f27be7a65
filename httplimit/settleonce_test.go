package httplimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// trialWork sends 41 requests for one key, evenly over 3 s on the clock
// advance moves, each with the same Idempotency-Key, an estimate of 1
// (WithCost) and a true cost of 5 (SetCost), through a Middleware built
// WithSettle over l, a plan of 5 a second; and returns the requests whose
// handler ran, and the units of work they did.
func trialWork(t *testing.T, l ratelimit.Limiter, clock ratelimit.Clock, advance func(time.Duration)) (ran, work int) {
	t.Helper()
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader),
		httplimit.WithCost(func(*http.Request) (int, error) { return 1, nil }),
		httplimit.WithSettle(), httplimit.WithClock(clock))
	require.NoError(t, err)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ran++
		work += 5
		httplimit.SetCost(r.Context(), 5)
	}))
	const requests, span = 41, 3 * time.Second
	for i := range requests {
		if i > 0 {
			advance(span / (requests - 1))
		}
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set(keyHeader, "alice")
		r.Header.Set("Idempotency-Key", "same-key-every-time")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		require.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, w.Code, "request %d: %s", i, w.Body)
	}
	return ran, work
}

// trialBound is the most work the trial's key may do: the plan's 5 at
// once, 5 a second over the 3 s, and one request's settle beyond, which
// the key then owes.
const trialBound = 5 + 5*3 + 5

// A client that sends the same Idempotency-Key on every request is charged
// the true cost of each request that ran: 41 requests over 3 s on a plan
// of 5 a second, estimated at 1 and costing 5, do no more work than the
// plan allows (they did 75 units when the key's settles were merged).
func TestOneIdempotencyKeyCannotEscapeTheSettle(t *testing.T) {
	t.Run("in process", func(t *testing.T) {
		clock := ratelimittest.NewClock(epoch)
		l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 5, ratelimit.WithClock(clock))
		require.NoError(t, err)
		ran, work := trialWork(t, l, clock, clock.Advance)
		assert.LessOrEqual(t, work, trialBound, "%d requests ran", ran)
		t.Logf("%d requests ran, %d units of work", ran, work)
	})
	t.Run("miniredis", func(t *testing.T) {
		_, client, advance := redistest.Miniredis(t, epoch)
		clock := ratelimittest.NewClock(epoch)
		l, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(5), 5)
		require.NoError(t, err)
		ran, work := trialWork(t, l, clock, func(d time.Duration) { clock.Advance(d); advance(d) })
		assert.LessOrEqual(t, work, trialBound, "%d requests ran", ran)
		t.Logf("%d requests ran, %d units of work", ran, work)
	})
	t.Run("redis-server", func(t *testing.T) {
		client := redistest.Start(t).Client(t)
		clock := ratelimittest.NewClock(time.Now())
		l, err := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(5), 5, ratelimit.WithCallerClock(clock))
		require.NoError(t, err)
		ran, work := trialWork(t, l, clock, clock.Advance)
		assert.LessOrEqual(t, work, trialBound, "%d requests ran", ran)
		t.Logf("%d requests ran, %d units of work", ran, work)
	})
}

// Every request that ran is settled once, whatever its headers: N
// requests that ran and cost 5 each leave the key owing N × 5 less what
// refilled (here nothing refills).
func TestEveryRequestThatRanIsSettledOnce(t *testing.T) {
	_, client, _ := redistest.Miniredis(t, epoch)
	l, err := ratelimit.NewRedisTokenBucket(client, ratelimit.Every(1000*time.Second), 100) // nothing refills during the test
	require.NoError(t, err)
	h, _ := adjusting(t, l, httplimit.WithSettle())
	for i := range 4 {
		r := httptest.NewRequest(http.MethodGet, "/?cost=10", nil)
		r.Header.Set(keyHeader, "alice")
		r.Header.Set("Idempotency-Key", "k-"+strconv.Itoa(i%2)) // two requests per key
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	w := get(h, "alice", "/")
	assert.Equal(t, "59", w.Header().Get("RateLimit-Remaining"), "100 - 4 × 10 - 1")
}

// lossyAdjuster passes its calls to a limiter and fails the first Settle
// with a backend error: after applying it (a reply lost) when applied is
// true, before (a request that never arrived) otherwise.
type lossyAdjuster struct {
	ratelimit.Adjuster
	applied bool
	settles int
}

func (l *lossyAdjuster) Settle(ctx context.Context, key string, taken, cost int, opts ...ratelimit.AdjustOption) (ratelimit.Result, error) {
	l.settles++
	if l.settles > 1 {
		return l.Adjuster.Settle(ctx, key, taken, cost, opts...)
	}
	if l.applied {
		if _, err := l.Adjuster.Settle(ctx, key, taken, cost, opts...); err != nil {
			return ratelimit.Result{}, err
		}
	}
	return ratelimit.Result{}, fmt.Errorf("%w: connection reset", ratelimit.ErrBackend)
}

// A Settle that fails with a backend error is tried once more with the
// same token: applied once whether the first try reached Redis or not.
func TestASettleThatFailedIsTriedOnceMoreAndAppliedOnce(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied before the failure: %v", applied), func(t *testing.T) {
			_, client, _ := redistest.Miniredis(t, epoch)
			l, err := ratelimit.NewRedisTokenBucket(client, ratelimit.Every(1000*time.Second), 100) // nothing refills during the test
			require.NoError(t, err)
			lossy := &lossyAdjuster{Adjuster: l, applied: applied}
			var log errorLog
			h, _ := adjusting(t, lossy, httplimit.WithSettle(), httplimit.WithOnError(log.hook))
			get(h, "alice", "/?cost=30")
			assert.Equal(t, 2, lossy.settles, "tried twice")
			assert.Empty(t, log.errs)
			w := get(h, "alice", "/")
			assert.Equal(t, "69", w.Header().Get("RateLimit-Remaining"), "100 - 30 - 1: settled once")
		})
	}
}
