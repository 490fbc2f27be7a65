package promratelimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

func TestHTTPLimitsObserverCountsRequestsPerRoute(t *testing.T) {
	reg := prometheus.NewRegistry()
	hooks, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	limiter, err := ratelimit.NewGCRA(2, time.Minute, ratelimit.WithHooks(hooks), ratelimit.WithName("api"),
		ratelimit.WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	mw, err := httplimit.NewMiddleware(limiter, httplimit.KeyByBearer(), httplimit.WithObserver(hooks.HTTPObserver(nil)))
	require.NoError(t, err)
	ok := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mux := http.NewServeMux()
	mux.Handle("GET /search", mw.Handler(ok))
	mux.Handle("GET /users/{id}", mw.Handler(ok))
	for _, target := range []string{"/search", "/users/1", "/users/2"} {
		r := httptest.NewRequest(http.MethodGet, target, nil)
		r.Header.Set("Authorization", "Bearer t0k3n")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/search", nil)) // no credential
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_requests_total Requests a middleware decided on, by route, policy and outcome (allowed, denied, rejected for the request's own mistake, error for any other error).
# TYPE ratelimit_requests_total counter
ratelimit_requests_total{outcome="allowed",policy="default",route="GET /search"} 1
ratelimit_requests_total{outcome="allowed",policy="default",route="GET /users/{id}"} 1
ratelimit_requests_total{outcome="denied",policy="default",route="GET /users/{id}"} 1
ratelimit_requests_total{outcome="rejected",policy="none",route="GET /search"} 1
`), promratelimit.RequestsName))
}

func TestARequestWithoutItsCredentialIsRejectedAndABackendFailureIsAnError(t *testing.T) {
	reg := prometheus.NewRegistry()
	hooks, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	mw, err := httplimit.NewMiddleware(down{}, httplimit.KeyByBearer(), httplimit.WithObserver(hooks.HTTPObserver(nil)))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /search", mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))

	anonymous := httptest.NewRecorder()
	mux.ServeHTTP(anonymous, httptest.NewRequest(http.MethodGet, "/search", nil))
	require.Equal(t, http.StatusUnauthorized, anonymous.Code)
	r := httptest.NewRequest(http.MethodGet, "/search", nil)
	r.Header.Set("Authorization", "Bearer t0k3n")
	mux.ServeHTTP(httptest.NewRecorder(), r) // the backend is down

	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_requests_total Requests a middleware decided on, by route, policy and outcome (allowed, denied, rejected for the request's own mistake, error for any other error).
# TYPE ratelimit_requests_total counter
ratelimit_requests_total{outcome="error",policy="none",route="GET /search"} 1
ratelimit_requests_total{outcome="rejected",policy="none",route="GET /search"} 1
`), promratelimit.RequestsName))
}
