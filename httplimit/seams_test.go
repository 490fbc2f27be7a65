package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// constantKey keys every request by one key.
func constantKey(key string) httplimit.KeyFunc {
	return func(*http.Request) (string, error) { return key, nil }
}

// okHandler answers 200 and counts its calls.
func okHandler(calls *int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		*calls++
		w.WriteHeader(http.StatusOK)
	})
}

// TestStackedMiddlewaresSendOneCoherentSetOfFields: a plan middleware
// around a tokens middleware; every policy named anywhere is listed in
// RateLimit-Policy, and the legacy fields describe the first RateLimit
// item, whether the inner one allows, denies or refuses a request as too
// large.
func TestStackedMiddlewaresSendOneCoherentSetOfFields(t *testing.T) {
	clock := ratelimittest.NewClock(time.Unix(0, 0))
	plan, err := ratelimit.NewGCRA(300, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	tokens, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1000), 20000, ratelimit.WithClock(clock))
	require.NoError(t, err)
	cost := 0
	inner, err := httplimit.NewMiddleware(tokens, constantKey("tenant"), httplimit.WithPolicyName("tokens"),
		httplimit.WithCost(func(*http.Request) (int, error) { return cost, nil }))
	require.NoError(t, err)
	outer, err := httplimit.NewMiddleware(plan, constantKey("tenant"), httplimit.WithPolicyName("plan"),
		httplimit.WithRefund(func(_ *http.Request, status int) bool { return status >= 500 }))
	require.NoError(t, err)
	calls := 0
	h := outer.Handler(inner.Handler(okHandler(&calls)))
	serve := func(n int) *httptest.ResponseRecorder {
		cost = n
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		return w
	}

	w := serve(100)
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"tokens";q=20000;w=20, "plan";q=300;w=60`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"tokens";r=19900;t=1, "plan";r=299;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, "20000", w.Header().Get("RateLimit-Limit"), "the legacy fields describe the first item")
	assert.Equal(t, "19900", w.Header().Get("RateLimit-Remaining"))

	w = serve(20001)
	assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	assert.Equal(t, `"plan";r=298;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, "300", w.Header().Get("RateLimit-Limit"), "the legacy fields still describe the first item, the plan")
	assert.Equal(t, `"tokens";q=20000;w=20, "plan";q=300;w=60`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, 1, calls, "the handler never ran")
	d, err := plan.Decide(context.Background(), "tenant", 0)
	require.NoError(t, err)
	assert.Equal(t, 299, d.Remaining, "the plan gave back the request the tokens middleware refused, whatever its refund rule")

	w = serve(19950)
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, `"tokens";r=19900;t=1, "plan";r=298;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, "20000", w.Header().Get("RateLimit-Limit"))
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	d, err = plan.Decide(context.Background(), "tenant", 0)
	require.NoError(t, err)
	assert.Equal(t, 299, d.Remaining, "a 429 inside is given back too")
}

// TestAShadowsPolicyIsListedBesideTheEnforcedOnes: a shadowed per-IP limit
// around an enforced plan; the policy RateLimit-Shadow names is listed in
// RateLimit-Policy.
func TestAShadowsPolicyIsListedBesideTheEnforcedOnes(t *testing.T) {
	clock := ratelimittest.NewClock(time.Unix(0, 0))
	perIP, err := ratelimit.NewGCRA(1, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	shadow, err := ratelimit.NewShadow(perIP, ratelimit.ShadowConfig{})
	require.NoError(t, err)
	plan, err := ratelimit.NewGCRA(300, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	outer, err := httplimit.NewMiddleware(shadow, constantKey("10.0.0.1"), httplimit.WithPolicyName("per-ip"), httplimit.WithShadowHeader())
	require.NoError(t, err)
	inner, err := httplimit.NewMiddleware(plan, constantKey("tenant"), httplimit.WithPolicyName("plan"))
	require.NoError(t, err)
	calls := 0
	h := outer.Handler(inner.Handler(okHandler(&calls)))
	for range 2 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, 3, calls)
	assert.Equal(t, `"per-ip";r=0;t=60`, w.Header().Get("RateLimit-Shadow"))
	assert.Equal(t, `"plan";q=300;w=60, "per-ip";q=1;w=60`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"plan";r=297;t=1, "per-ip";r=0;t=60`, w.Header().Get("RateLimit"))
}

// downBackend is a Decider whose backend is down.
type downBackend struct{ policies []ratelimit.NamedPolicy }

// Allow fails as a backend that cannot be reached.
func (d downBackend) Allow(context.Context, string, int) (ratelimit.Result, error) {
	return ratelimit.Result{}, errors.Join(ratelimit.ErrBackend, errors.New("connection refused"))
}

// Decide fails as Allow does.
func (d downBackend) Decide(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	res, err := d.Allow(ctx, key, n)
	return ratelimit.Decision{Result: res}, err
}

// Policies returns the backend's policies.
func (d downBackend) Policies(context.Context, string) ([]ratelimit.NamedPolicy, error) {
	return d.policies, nil
}

// TestFailOverWithACompositeFallbackSendsOnePolicysNumbers: with the backend
// down, the fields of a fallback's answer name the policy whose limit and
// remaining they show.
func TestFailOverWithACompositeFallbackSendsOnePolicysNumbers(t *testing.T) {
	backend := downBackend{policies: []ratelimit.NamedPolicy{
		{Name: "requests", Policy: ratelimit.Policy{Limit: 30, Window: time.Minute}, PerCall: true},
		{Name: "tokens", Policy: ratelimit.Policy{Limit: 20000, Window: time.Minute}},
	}}
	requests, err := ratelimit.NewGCRA(15, time.Minute)
	require.NoError(t, err)
	tokens, err := ratelimit.NewGCRA(10000, time.Minute)
	require.NoError(t, err)
	fallback, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "requests", Limiter: requests, PerCall: true},
		ratelimit.Part{Name: "tokens", Limiter: tokens},
	)
	require.NoError(t, err)
	g, err := ratelimit.NewGuard(backend, ratelimit.GuardConfig{OnFailure: ratelimit.FailOver, Fallback: fallback})
	require.NoError(t, err)
	mw, err := httplimit.NewMiddleware(g, constantKey("tenant"), httplimit.WithCost(func(*http.Request) (int, error) { return 100, nil }))
	require.NoError(t, err)
	calls := 0
	w := httptest.NewRecorder()
	mw.Handler(okHandler(&calls)).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, http.StatusOK, w.Code)
	// Every part's remaining, the bound one first, each with its
	// fallback's t, as the bound one's is: the tokens part's fallback
	// answers in its share (10000) of the limit it is shown under (20000),
	// and its next unit is 6 ms away.
	assert.Equal(t, `"requests";r=14;t=4, "tokens";r=9900;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, "30", w.Header().Get("RateLimit-Limit"))
	assert.Equal(t, "14", w.Header().Get("RateLimit-Remaining"))
	assert.Equal(t, `"requests";q=30;w=60, "tokens";q=20000;w=60`, w.Header().Get("RateLimit-Policy"))
}

// gcraAt returns a GCRA of limit a minute on a fake clock.
func gcraAt(t *testing.T, limit int) *ratelimit.GCRA {
	t.Helper()
	l, err := ratelimit.NewGCRA(limit, time.Minute, ratelimit.WithClock(ratelimittest.NewClock(time.Unix(0, 0))))
	require.NoError(t, err)
	return l
}

// TestStackedMiddlewaresOfOtherStylesStayCoherent: whatever the two header
// styles, the legacy fields describe the first RateLimit item.
func TestStackedMiddlewaresOfOtherStylesStayCoherent(t *testing.T) {
	for _, style := range []httplimit.HeaderStyle{httplimit.IETFHeaders, httplimit.LegacyHeaders} {
		outer, err := httplimit.NewMiddleware(gcraAt(t, 300), constantKey("k"), httplimit.WithPolicyName("plan"))
		require.NoError(t, err)
		inner, err := httplimit.NewMiddleware(gcraAt(t, 10), constantKey("k"), httplimit.WithPolicyName("tokens"), httplimit.WithHeaderStyle(style))
		require.NoError(t, err)
		calls := 0
		w := httptest.NewRecorder()
		outer.Handler(inner.Handler(okHandler(&calls))).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
		assert.Equal(t, `"tokens";r=9;t=6, "plan";r=299;t=1`, w.Header().Get("RateLimit"), "inner style %d", style)
		assert.Equal(t, `"tokens";q=10;w=60, "plan";q=300;w=60`, w.Header().Get("RateLimit-Policy"), "inner style %d", style)
		assert.Equal(t, "10", w.Header().Get("RateLimit-Limit"), "inner style %d", style)
		assert.Equal(t, "9", w.Header().Get("RateLimit-Remaining"), "inner style %d", style)
	}
}

// TestARequestTheHandlerMakesOfItsOwnIsNotTheOneRefused: a handler behind
// a settling middleware sends sub-requests, with writers of their own, to
// a handler limited by another middleware; their refusals do not refund
// the request that ran, which is settled at the cost it reported.
func TestARequestTheHandlerMakesOfItsOwnIsNotTheOneRefused(t *testing.T) {
	plan := gcraAt(t, 300)
	outer, err := httplimit.NewMiddleware(plan, constantKey("k"), httplimit.WithPolicyName("plan"), httplimit.WithSettle())
	require.NoError(t, err)
	inner, err := httplimit.NewMiddleware(gcraAt(t, 1), constantKey("k"), httplimit.WithPolicyName("sub"))
	require.NoError(t, err)
	calls := 0
	sub := inner.Handler(okHandler(&calls))
	h := outer.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 2 {
			sub.ServeHTTP(httptest.NewRecorder(), r)
		}
		httplimit.SetCost(r.Context(), 5)
		w.WriteHeader(http.StatusOK)
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, 1, calls, "the second sub-request was refused")
	d, err := plan.Decide(context.Background(), "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 295, d.Remaining, "settled at 5, not refunded")
}

// TestTwoShadowsKeepBothShadowItems: two shadowing middlewares that would
// both deny are both named in RateLimit-Shadow.
func TestTwoShadowsKeepBothShadowItems(t *testing.T) {
	shadowed := func(name string) *httplimit.Middleware {
		s, err := ratelimit.NewShadow(gcraAt(t, 1), ratelimit.ShadowConfig{})
		require.NoError(t, err)
		m, err := httplimit.NewMiddleware(s, constantKey("k"), httplimit.WithPolicyName(name), httplimit.WithShadowHeader())
		require.NoError(t, err)
		return m
	}
	calls := 0
	h := shadowed("per-ip").Handler(shadowed("per-user").Handler(okHandler(&calls)))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, `"per-user";r=0;t=60, "per-ip";r=0;t=60`, w.Header().Get("RateLimit-Shadow"))
	assert.Equal(t, 2, calls)
}

// TestAShadowWhosePolicyFuncFailsDeniesNoOne: a limit being rolled out in
// a Shadow does not refuse requests for its own errors, unless
// WithFailClosed asks for it.
func TestAShadowWhosePolicyFuncFailsDeniesNoOne(t *testing.T) {
	failing := func(context.Context, string) (ratelimit.Policy, error) {
		return ratelimit.Policy{}, errors.New("plan store unreachable")
	}
	l, err := ratelimit.NewGCRA(5, time.Minute, ratelimit.WithPolicyFunc(failing))
	require.NoError(t, err)
	s, err := ratelimit.NewShadow(l, ratelimit.ShadowConfig{})
	require.NoError(t, err)
	var seen []error
	mw, err := httplimit.NewMiddleware(s, constantKey("k"), httplimit.WithOnError(func(_ *http.Request, err error) { seen = append(seen, err) }))
	require.NoError(t, err)
	calls := 0
	w := httptest.NewRecorder()
	mw.Handler(okHandler(&calls)).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, 1, calls)
	require.Len(t, seen, 1)
	assert.ErrorIs(t, seen[0], ratelimit.ErrPolicy)

	mw, err = httplimit.NewMiddleware(s, constantKey("k"), httplimit.WithFailClosed(0))
	require.NoError(t, err)
	w = httptest.NewRecorder()
	mw.Handler(okHandler(&calls)).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
}
