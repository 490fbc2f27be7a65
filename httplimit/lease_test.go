package httplimit_test

import (
	"bufio"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold/leaseholdtest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// concurrency returns an in-process concurrency limiter of limit in flight
// per key, whose leases last ttl, on a new fake clock.
func concurrency(t testing.TB, limit int, ttl time.Duration, opts ...ratelimit.Option) (*ratelimit.Concurrency, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.NewClock(epoch)
	l, err := ratelimit.NewConcurrency(limit, ttl, append([]ratelimit.Option{ratelimit.WithClock(clock)}, opts...)...)
	require.NoError(t, err)
	return l, clock
}

// leased returns the handler of a Middleware built WithLeases (and opts)
// over l in front of next.
func leased(t testing.TB, l ratelimit.Limiter, next http.Handler, opts ...httplimit.Option) http.Handler {
	t.Helper()
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), append([]httplimit.Option{httplimit.WithLeases()}, opts...)...)
	require.NoError(t, err)
	return m.Handler(next)
}

// blocker is a handler that counts the requests inside it, keeps the
// most there ever were, and holds each until release is closed.
type blocker struct {
	inside, most atomic.Int64
	entered      chan struct{} // one receive per request that got in
	release      chan struct{}
}

func newBlocker() *blocker {
	return &blocker{entered: make(chan struct{}, 64), release: make(chan struct{})}
}

func (b *blocker) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	n := b.inside.Add(1)
	defer b.inside.Add(-1)
	for {
		most := b.most.Load()
		if n <= most || b.most.CompareAndSwap(most, n) {
			break
		}
	}
	b.entered <- struct{}{}
	<-b.release
	w.WriteHeader(http.StatusOK)
}

// Thirty-two requests at once on a limit of 5 in flight: five get in and
// stay in, the other 27 are answered 429 at once; once the five are done,
// their slots are back.
func TestLeasesLetNoMoreThanTheLimitInFlight(t *testing.T) {
	l, _ := concurrency(t, 5, time.Minute)
	b := newBlocker()
	h := leased(t, l, b)

	codes := make(chan *httptest.ResponseRecorder, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() { codes <- do(h, "alice", "") })
	}
	for range 5 {
		<-b.entered
	}
	for range 27 {
		w := <-codes
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, "60", w.Header().Get("Retry-After"))
		assert.Equal(t, `"default";q=5;qu="concurrent-requests"`, w.Header().Get("RateLimit-Policy"))
		assert.Equal(t, `"default";r=0;t=60`, w.Header().Get("RateLimit"))
	}
	assert.Equal(t, int64(5), b.inside.Load())
	close(b.release)
	wg.Wait()
	close(codes)
	for w := range codes {
		assert.Equal(t, http.StatusOK, w.Code)
	}
	assert.Equal(t, int64(5), b.most.Load())

	// Every slot came back.
	d, err := l.Decide(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, d.Remaining)
}

// Thirty-two clients each send 50 requests as fast as they can, to
// handlers that take a while: however they interleave, never more than
// the limit are inside the handler at once.
func TestLeasesHoldTheLimitUnderChurn(t *testing.T) {
	l, _ := concurrency(t, 5, time.Minute)
	var inside, most, served atomic.Int64
	slow := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := inside.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		for range 20 {
			runtime.Gosched()
		}
		inside.Add(-1)
		served.Add(1)
	})
	h := leased(t, l, slow)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 50 {
				do(h, "alice", "")
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int64(5))
	assert.Positive(t, served.Load())
	d, err := l.Decide(context.Background(), "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, d.Remaining, "every slot came back")
}

// A request holds its slot while its handler runs and gives it back when
// the handler returns, whatever the lease's TTL: with a limit of 1 and a
// clock that never moves, every request in turn gets the one slot.
func TestLeaseReleasedWhenTheHandlerReturns(t *testing.T) {
	l, clock := concurrency(t, 1, 30*time.Second)
	h, next := limitedLeased(t, l)
	for i := range 3 {
		w := do(h, "alice", "")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i)
		assert.Equal(t, map[string][]string{
			"RateLimit-Limit":     {"1"},
			"RateLimit-Remaining": {"0"},
			"RateLimit-Reset":     {"30"},
			"RateLimit-Policy":    {`"default";q=1;qu="concurrent-requests"`},
			"RateLimit":           {`"default";r=0`}, // a release may free the slot at any moment: no t
		}, fields(w.Header()), "request %d", i)
		clock.Advance(time.Second)
	}
	assert.Equal(t, int64(3), next.calls.Load())
}

// limitedLeased returns a Middleware built WithLeases over l in front of a
// counter, and the counter.
func limitedLeased(t testing.TB, l ratelimit.Limiter, opts ...httplimit.Option) (http.Handler, *counter) {
	t.Helper()
	next := &counter{}
	return leased(t, l, next, opts...), next
}

// A handler that panics gives its slot back, and the panic goes on up
// unchanged, http.ErrAbortHandler included.
func TestLeaseReleasedWhenTheHandlerPanics(t *testing.T) {
	for _, v := range []any{"boom", http.ErrAbortHandler} {
		l, _ := concurrency(t, 1, time.Minute)
		h := leased(t, l, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(v) }))
		assert.PanicsWithValue(t, v, func() { do(h, "alice", "") })
		assert.PanicsWithValue(t, v, func() { do(h, "alice", "") }, "the slot came back")
		d, err := l.Decide(context.Background(), "alice", 0)
		require.NoError(t, err)
		assert.Equal(t, 1, d.Remaining)
	}
}

// A streamed response holds its slot until the handler's last write:
// between its flushes another request is denied, and once it is done the
// slot is free.
func TestStreamingResponseHoldsItsLeaseUntilItEnds(t *testing.T) {
	l, _ := concurrency(t, 1, time.Minute)
	step := make(chan struct{})
	stream := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		rc := http.NewResponseController(w)
		for i := range 3 {
			_, _ = w.Write([]byte{'a' + byte(i), '\n'})
			_ = rc.Flush()
			<-step
		}
	})
	srv := httptest.NewServer(leased(t, l, stream))
	defer srv.Close()

	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set(keyHeader, "alice")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body := bufio.NewReader(resp.Body)
	other := leased(t, l, &counter{})
	for i := range 3 {
		line, err := body.ReadString('\n')
		require.NoError(t, err)
		assert.Equal(t, string([]byte{'a' + byte(i), '\n'}), line)
		assert.Equal(t, http.StatusTooManyRequests, do(other, "alice", "").Code, "while chunk %d is out", i)
		step <- struct{}{}
	}
	_, err = body.ReadString('\n')
	require.Error(t, err) // the end of the body: the handler has returned
	assert.Equal(t, http.StatusOK, do(other, "alice", "").Code)
}

// A denial of a limit in flight is a 429 whose Retry-After is the time
// until the earliest lease of the key expires, with the fields of the
// policy in flight.
func TestInFlightDenialAnswers429WithRetryAfterAndTheQuotaUnit(t *testing.T) {
	l, clock := concurrency(t, 2, 30*time.Second)
	b := newBlocker()
	h := leased(t, l, b)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(b.release)
	firsts := make(chan *httptest.ResponseRecorder, 2)
	wg.Go(func() { firsts <- do(h, "alice", "") })
	<-b.entered
	clock.Advance(10 * time.Second)
	wg.Go(func() { firsts <- do(h, "alice", "") })
	<-b.entered
	clock.Advance(5 * time.Second)

	w := do(h, "alice", "application/json")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, map[string][]string{
		"RateLimit-Limit":     {"2"},
		"RateLimit-Remaining": {"0"},
		"RateLimit-Reset":     {"15"},
		"RateLimit-Policy":    {`"default";q=2;qu="concurrent-requests"`},
		"RateLimit":           {`"default";r=0;t=15`},
		"Retry-After":         {"15"}, // the first lease's expiry
	}, fields(w.Header()))
	assert.Contains(t, w.Body.String(), `"violated-policies":["default"]`)
	assert.Contains(t, w.Body.String(), "in flight")

	// Another key has slots of its own.
	other := leased(t, l, &counter{})
	w = do(other, "bob", "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"default";r=1`, w.Header().Get("RateLimit"))
}

// Without WithLeases, a limiter of requests in flight is refused: every
// request would hold its slot for the lease's whole TTL.
func TestInFlightLimiterNeedsWithLeases(t *testing.T) {
	l, _ := concurrency(t, 5, time.Minute)
	_, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithLeases")

	planned, _ := concurrency(t, 5, time.Minute, ratelimit.WithPolicyFunc(func(context.Context, string) (ratelimit.Policy, error) {
		return ratelimit.Policy{Limit: 2, Window: time.Minute}, nil
	}))
	_, err = httplimit.NewMiddleware(planned, httplimit.KeyByHeader(keyHeader))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

	_, err = httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithLeases(), httplimit.WithPolicyWindow(time.Minute))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithPolicyWindow")

	_, err = httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithLeases())
	require.NoError(t, err)
}

// With a rate limiter, whose leases hold nothing, WithLeases changes
// nothing: the same answers and fields, and no lease for the handler.
func TestWithLeasesOverARateLimiterChangesNothing(t *testing.T) {
	plain, _ := tokenBucket(t, ratelimit.PerSecond(1), 3)
	withLeases, _ := tokenBucket(t, ratelimit.PerSecond(1), 3)
	var found []bool
	rec := func(next *counter) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, ok := httplimit.LeaseOf(r.Context())
			found = append(found, ok)
			d, ok := httplimit.DecisionOf(r.Context())
			assert.True(t, ok)
			assert.True(t, d.Allowed)
			next.ServeHTTP(w, r)
		})
	}
	a, err := httplimit.NewMiddleware(plain, httplimit.KeyByHeader(keyHeader), httplimit.WithDecisionContext())
	require.NoError(t, err)
	b, err := httplimit.NewMiddleware(withLeases, httplimit.KeyByHeader(keyHeader), httplimit.WithDecisionContext(), httplimit.WithLeases())
	require.NoError(t, err)
	ha, hb := a.Handler(rec(&counter{})), b.Handler(rec(&counter{}))
	for i := range 5 {
		wa, wb := do(ha, "alice", ""), do(hb, "alice", "")
		assert.Equal(t, wa.Code, wb.Code, "request %d", i)
		assert.Equal(t, wa.Header(), wb.Header(), "request %d", i)
		assert.Equal(t, wa.Body.String(), wb.Body.String(), "request %d", i)
	}
	assert.Equal(t, []bool{false, false, false, false, false, false}, found)
}

// The handler finds its lease with LeaseOf, and its Decision with
// DecisionOf under WithDecisionContext.
func TestTheHandlerFindsItsLeaseAndDecision(t *testing.T) {
	l, _ := concurrency(t, 5, time.Minute)
	var lease ratelimit.Lease
	var found, decided bool
	var d ratelimit.Decision
	h := leased(t, l, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		lease, found = httplimit.LeaseOf(r.Context())
		d, decided = httplimit.DecisionOf(r.Context())
	}), httplimit.WithDecisionContext(), httplimit.WithCost(func(*http.Request) (int, error) { return 2, nil }))
	require.Equal(t, http.StatusOK, do(h, "alice", "").Code)
	require.True(t, found)
	assert.True(t, lease.Held())
	assert.Equal(t, "alice", lease.Key())
	assert.Equal(t, 2, lease.Units())
	assert.Equal(t, time.Minute, lease.TTL())
	require.True(t, decided)
	assert.True(t, d.Allowed)
	assert.True(t, d.Policy.InFlight)
	assert.Equal(t, 3, d.Remaining)

	_, ok := httplimit.LeaseOf(context.Background())
	assert.False(t, ok)
}

// inFlightAndRate is a Decider of two policies, one of requests in flight
// and one of requests a minute, that allows every request.
type inFlightAndRate struct{}

var inFlightAndRatePolicies = []ratelimit.NamedPolicy{
	{Name: "running", Policy: ratelimit.Policy{Limit: 5, Window: time.Minute}, InFlight: true},
	{Name: "per-minute", Policy: ratelimit.Policy{Limit: 100, Window: time.Minute}},
}

func (inFlightAndRate) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	d, err := inFlightAndRate{}.Decide(ctx, key, n)
	return d.Result, err
}

func (inFlightAndRate) Decide(context.Context, string, int) (ratelimit.Decision, error) {
	res := ratelimit.Result{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: time.Second}
	return ratelimit.Decision{Result: res, Policy: inFlightAndRatePolicies[1], Policies: inFlightAndRatePolicies, PolicyIndex: 1, Enforced: res}, nil
}

func (inFlightAndRate) Policies(context.Context, string) ([]ratelimit.NamedPolicy, error) {
	return inFlightAndRatePolicies, nil
}

// In a list of policies, the one in flight names its quota unit and the
// rate one keeps its window.
func TestPolicyListNamesTheQuotaUnitOfThePolicyInFlight(t *testing.T) {
	_, err := httplimit.NewMiddleware(inFlightAndRate{}, httplimit.KeyByHeader(keyHeader))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	h, _ := limitedLeased(t, inFlightAndRate{})
	w := do(h, "alice", "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"running";q=5;qu="concurrent-requests", "per-minute";q=100;w=60`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"per-minute";r=99`, w.Header().Get("RateLimit"), "a Decider of another package tells no t")
}

// On the system's timers, a running handler's lease is extended: with a
// TTL of 150 ms, two extensions come about 50 ms apart, then the release.
func TestLeaseExtendedOnRealTimers(t *testing.T) {
	events := make(leaseholdtest.AdjustEvents, 16)
	l, err := ratelimit.NewConcurrency(1, 150*time.Millisecond, ratelimit.WithHooks(events))
	require.NoError(t, err)
	var hookErrs atomic.Int64
	h := leased(t, l, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		events.AssertExtended(t, 2)
	}), httplimit.WithOnError(func(*http.Request, error) { hookErrs.Add(1) }))
	require.Equal(t, http.StatusOK, do(h, "alice", "").Code)
	e, ok := events.NextRelease(t)
	require.True(t, ok)
	assert.True(t, e.Result.Allowed, "the lease was still held when released")
	assert.Zero(t, hookErrs.Load())
}
