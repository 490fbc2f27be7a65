package promratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
)

// observed is a handler that, as a Middleware would, tells observe of each
// request with the Decision it is given.
func observed(observe func(*http.Request, ratelimit.Decision, error), d ratelimit.Decision, err error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		observe(r, d, err)
	})
}

func TestTheHTTPObserverCountsEachRequestUnderItsMuxPattern(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	observe := h.HTTPObserver(nil)
	allowed := ratelimit.Decision{Result: ratelimit.Result{Allowed: true}, Policy: ratelimit.NamedPolicy{Name: "pro"}}
	denied := ratelimit.Decision{Policy: ratelimit.NamedPolicy{Name: "free"}}
	mux := http.NewServeMux()
	mux.Handle("GET /search", observed(observe, allowed, nil))
	mux.Handle("GET /users/{id}", observed(observe, denied, nil))
	mux.Handle("POST /upload", observed(observe, ratelimit.Decision{}, fmt.Errorf("%w: too big", ratelimit.ErrCostExceedsLimit)))

	for _, target := range []string{"/search", "/search?q=x", "/users/1", "/users/2", "/users/3"} {
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, target, nil))
	}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/upload", nil))

	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_requests_total Requests a middleware decided on, by route, policy and outcome (allowed, denied, rejected for the request's own mistake, error for any other error).
# TYPE ratelimit_requests_total counter
ratelimit_requests_total{outcome="allowed",policy="pro",route="GET /search"} 2
ratelimit_requests_total{outcome="denied",policy="free",route="GET /users/{id}"} 3
ratelimit_requests_total{outcome="rejected",policy="none",route="POST /upload"} 1
`), promratelimit.RequestsName))
}

func TestTheHTTPObserverTakesTheCallersRoute(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	tenant := func(r *http.Request) string { return r.Header.Get("X-Tenant-Plan") }
	observe := h.HTTPObserver(tenant)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Tenant-Plan", "gold")
	observe(r, ratelimit.Decision{Result: ratelimit.Result{Allowed: true}}, nil)

	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_requests_total Requests a middleware decided on, by route, policy and outcome (allowed, denied, rejected for the request's own mistake, error for any other error).
# TYPE ratelimit_requests_total counter
ratelimit_requests_total{outcome="allowed",policy="none",route="gold"} 1
`), promratelimit.RequestsName))
}

func TestTheGRPCObserverCountsEachCallUnderItsMethod(t *testing.T) {
	reg := prometheus.NewRegistry()
	h, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	observe := h.GRPCObserver()
	observe(context.Background(), "/shop.Orders/Create", ratelimit.Decision{Policy: ratelimit.NamedPolicy{Name: "default"}}, nil)

	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_requests_total Requests a middleware decided on, by route, policy and outcome (allowed, denied, rejected for the request's own mistake, error for any other error).
# TYPE ratelimit_requests_total counter
ratelimit_requests_total{outcome="denied",policy="default",route="/shop.Orders/Create"} 1
`), promratelimit.RequestsName))
}
