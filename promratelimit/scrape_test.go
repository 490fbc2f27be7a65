package promratelimit_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// down is a backend that always fails, as Redis does when it is down.
type down struct{}

func (down) Allow(context.Context, string, int) (ratelimit.Result, error) {
	return ratelimit.Result{}, fmt.Errorf("%w: connection refused", ratelimit.ErrBackend)
}

// scrape returns the sample lines of reg's exposition, as promhttp serves
// them over HTTP, whose metric name starts with "ratelimit_" and which
// are not a histogram's buckets.
func scrape(t *testing.T, reg *prometheus.Registry) (samples []string, buckets []string) {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "text/plain")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain"), resp.Header.Get("Content-Type"))
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		switch {
		case !strings.HasPrefix(line, "ratelimit_"):
		case strings.Contains(line, "_bucket{"):
			buckets = append(buckets, line)
		default:
			samples = append(samples, line)
		}
	}
	require.NoError(t, lines.Err())
	return samples, buckets
}

func TestAScrapeShowsTheDocumentedSeriesAfterAKnownSequenceOfDecisions(t *testing.T) {
	reg := prometheus.NewRegistry()
	hooks, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	with := func(name string) []ratelimit.Option {
		return []ratelimit.Option{ratelimit.WithHooks(hooks), ratelimit.WithName(name), ratelimit.WithClock(clock)}
	}

	// A GCRA of 2 a second: 2 allowed, 1 denied for 500 ms, 1 call of 3
	// units that can never succeed.
	api, err := ratelimit.NewGCRA(2, time.Second, with("api")...)
	require.NoError(t, err)
	for range 3 {
		_, err := api.Allow(ctx, "user:1", 1)
		require.NoError(t, err)
	}
	_, err = api.Allow(ctx, "user:1", 3)
	require.ErrorIs(t, err, ratelimit.ErrCostExceedsLimit)

	// A second later: 2 units taken on an estimate and settled at 1, 1
	// more refunded, then the key reset.
	clock.Advance(time.Second)
	d, err := api.Decide(ctx, "user:2", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	hooks.Observe("/search", d, nil)
	_, err = api.Settle(ctx, "user:2", 2, 1)
	require.NoError(t, err)
	_, err = api.Refund(ctx, "user:2", 1)
	require.NoError(t, err)
	require.NoError(t, api.Reset(ctx, "user:2"))

	// A Guard before a backend that is down: 2 failures open its breaker;
	// all 3 calls are let through by its failure policy, under no policy
	// (the backend, of another package, never told one).
	orders, err := ratelimit.NewGuard(down{}, ratelimit.GuardConfig{
		OnFailure: ratelimit.FailOpen, BreakerFailures: 2, BreakerCoolDown: time.Minute,
		Hooks: hooks, Name: "orders", Clock: clock,
	})
	require.NoError(t, err)
	for range 3 {
		d, err := orders.Decide(ctx, "user:3", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		hooks.Observe("/orders", d, nil)
	}

	// A Shadow of a window of 1: the second call is let through against a
	// denial for the rest of the minute.
	window, err := ratelimit.NewFixedWindow(1, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	beta, err := ratelimit.NewShadow(window, ratelimit.ShadowConfig{Hooks: hooks, Name: "beta", Clock: clock})
	require.NoError(t, err)
	for range 2 {
		_, err := beta.Allow(ctx, "user:4", 1)
		require.NoError(t, err)
	}

	// A concurrency limit of 1: one lease granted, one denied (for the
	// lease's TTL, a minute), the lease released.
	jobs, err := ratelimit.NewConcurrency(1, time.Minute, with("jobs")...)
	require.NoError(t, err)
	lease, _, err := jobs.Acquire(ctx, "user:5", 1)
	require.NoError(t, err)
	require.True(t, lease.Held())
	_, d, err = jobs.Acquire(ctx, "user:5", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	hooks.Observe("/jobs", d, nil)
	require.NoError(t, lease.Release(ctx))

	// Two requests a middleware answered on an error: one without its
	// credential (401), the client's mistake, and one the backend failed
	// (503).
	hooks.Observe("/search", ratelimit.Decision{}, fmt.Errorf("%w: no Bearer credential", httplimit.ErrMissingCredential))
	_, err = down{}.Allow(ctx, "user:6", 1)
	hooks.Observe("/orders", ratelimit.Decision{}, err)

	assertDocumented(t, reg, false)
	samples, buckets := scrape(t, reg)
	assert.Equal(t, []string{
		`ratelimit_adjustment_units_total{limiter="api",op="refund",units="cost"} 0`,
		`ratelimit_adjustment_units_total{limiter="api",op="refund",units="taken"} 1`,
		`ratelimit_adjustment_units_total{limiter="api",op="settle",units="cost"} 1`,
		`ratelimit_adjustment_units_total{limiter="api",op="settle",units="taken"} 2`,
		`ratelimit_adjustment_units_total{limiter="jobs",op="release",units="cost"} 0`,
		`ratelimit_adjustment_units_total{limiter="jobs",op="release",units="taken"} 1`,
		`ratelimit_adjustments_total{limiter="api",op="refund",outcome="ok"} 1`,
		`ratelimit_adjustments_total{limiter="api",op="reset",outcome="ok"} 1`,
		`ratelimit_adjustments_total{limiter="api",op="settle",outcome="ok"} 1`,
		`ratelimit_adjustments_total{limiter="jobs",op="release",outcome="ok"} 1`,
		`ratelimit_breaker_transitions_total{breaker="default",to="open"} 1`,
		`ratelimit_breakers{breaker="default",state="open"} 1`,
		`ratelimit_decision_duration_seconds_sum{limiter="api",source="backend"} 0`,
		`ratelimit_decision_duration_seconds_count{limiter="api",source="backend"} 5`,
		`ratelimit_decision_duration_seconds_sum{limiter="beta",source="backend"} 0`,
		`ratelimit_decision_duration_seconds_count{limiter="beta",source="backend"} 1`,
		`ratelimit_decision_duration_seconds_sum{limiter="beta",source="shadow"} 0`,
		`ratelimit_decision_duration_seconds_count{limiter="beta",source="shadow"} 1`,
		`ratelimit_decision_duration_seconds_sum{limiter="jobs",source="backend"} 0`,
		`ratelimit_decision_duration_seconds_count{limiter="jobs",source="backend"} 2`,
		`ratelimit_decision_duration_seconds_sum{limiter="orders",source="fail_open"} 0`,
		`ratelimit_decision_duration_seconds_count{limiter="orders",source="fail_open"} 3`,
		`ratelimit_decision_units_total{limiter="api",outcome="allowed"} 4`,
		`ratelimit_decision_units_total{limiter="api",outcome="denied"} 1`,
		`ratelimit_decision_units_total{limiter="api",outcome="rejected"} 3`,
		`ratelimit_decision_units_total{limiter="beta",outcome="allowed"} 1`,
		`ratelimit_decision_units_total{limiter="beta",outcome="denied"} 1`,
		`ratelimit_decision_units_total{limiter="jobs",outcome="allowed"} 1`,
		`ratelimit_decision_units_total{limiter="jobs",outcome="denied"} 1`,
		`ratelimit_decision_units_total{limiter="orders",outcome="allowed"} 3`,
		`ratelimit_decisions_total{limiter="api",outcome="allowed",source="backend"} 3`,
		`ratelimit_decisions_total{limiter="api",outcome="denied",source="backend"} 1`,
		`ratelimit_decisions_total{limiter="api",outcome="rejected",source="backend"} 1`,
		`ratelimit_decisions_total{limiter="beta",outcome="allowed",source="backend"} 1`,
		`ratelimit_decisions_total{limiter="beta",outcome="denied",source="shadow"} 1`,
		`ratelimit_decisions_total{limiter="jobs",outcome="allowed",source="backend"} 1`,
		`ratelimit_decisions_total{limiter="jobs",outcome="denied",source="backend"} 1`,
		`ratelimit_decisions_total{limiter="orders",outcome="allowed",source="fail_open"} 3`,
		`ratelimit_errors_total{error_type="cost_exceeds_limit",limiter="api",op="decide"} 1`,
		`ratelimit_leases_held{limiter="jobs"} 0`,
		`ratelimit_requests_total{outcome="allowed",policy="default",route="/search"} 1`,
		`ratelimit_requests_total{outcome="allowed",policy="none",route="/orders"} 3`,
		`ratelimit_requests_total{outcome="denied",policy="default",route="/jobs"} 1`,
		`ratelimit_requests_total{outcome="error",policy="none",route="/orders"} 1`,
		`ratelimit_requests_total{outcome="rejected",policy="none",route="/search"} 1`,
		`ratelimit_retry_after_seconds_sum{limiter="api"} 0.5`,
		`ratelimit_retry_after_seconds_count{limiter="api"} 1`,
		`ratelimit_retry_after_seconds_sum{limiter="beta"} 60`,
		`ratelimit_retry_after_seconds_count{limiter="beta"} 1`,
		`ratelimit_retry_after_seconds_sum{limiter="jobs"} 60`,
		`ratelimit_retry_after_seconds_count{limiter="jobs"} 1`,
	}, samples)
	// Every decision took 0 s on the fake clock: the first bucket holds
	// them all. The retry-afters fall into the buckets of 0.5 s and 60 s.
	for _, line := range []string{
		`ratelimit_decision_duration_seconds_bucket{limiter="orders",source="fail_open",le="1e-06"} 3`,
		`ratelimit_retry_after_seconds_bucket{limiter="api",le="0.1"} 0`,
		`ratelimit_retry_after_seconds_bucket{limiter="api",le="0.5"} 1`,
		`ratelimit_retry_after_seconds_bucket{limiter="beta",le="30"} 0`,
		`ratelimit_retry_after_seconds_bucket{limiter="beta",le="60"} 1`,
		`ratelimit_retry_after_seconds_bucket{limiter="beta",le="+Inf"} 1`,
	} {
		assert.True(t, slices.Contains(buckets, line), "missing %s", line)
	}
}

// assertDocumented checks that the metrics reg gathers are those of the
// package documentation's tables, each of the type and labels it lists:
// those of NewOutboundObserver (ratelimit_outbound_) if outbound, else
// those of NewHooks.
func assertDocumented(t *testing.T, reg *prometheus.Registry, outbound bool) {
	t.Helper()
	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	documented := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		fields := strings.Fields(strings.TrimPrefix(line, "//"))
		if len(fields) < 3 || !strings.HasPrefix(fields[0], "ratelimit_") ||
			strings.HasPrefix(fields[0], "ratelimit_outbound_") != outbound {
			continue
		}
		var labels []string
		for _, f := range fields[2:] {
			labels = append(labels, strings.TrimSuffix(f, ","))
			if !strings.HasSuffix(f, ",") {
				break
			}
		}
		slices.Sort(labels)
		documented[fields[0]] = fields[1] + " " + strings.Join(labels, ",")
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	gathered := map[string]string{}
	for _, f := range families {
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		gathered[f.GetName()] = strings.ToLower(f.GetType().String()) + " " + strings.Join(labels, ",")
	}
	assert.Equal(t, documented, gathered)
}
