package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

func TestMetricsCountWhatTheHooksReport(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.Decided(ratelimit.Event{Decision: ratelimit.Decision{Source: ratelimit.FromBackend, Result: ratelimit.Result{Allowed: true}}, Latency: time.Millisecond})
	m.Decided(ratelimit.Event{Decision: ratelimit.Decision{Source: ratelimit.FromFailClosed}, BackendErr: errors.New("down")})
	m.Decided(ratelimit.Event{Decision: ratelimit.Decision{Source: ratelimit.FromDenyCache}})
	m.Decided(ratelimit.Event{Decision: ratelimit.Decision{
		Source: ratelimit.FromShadow, WouldDeny: true,
		Result: ratelimit.Result{Allowed: true}, Enforced: ratelimit.Result{RetryAfter: time.Second},
	}})
	m.BreakerChanged(ratelimit.BreakerClosed, ratelimit.BreakerOpen)

	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.decisions.WithLabelValues("backend", "allowed")), 1, "allowed by the backend"},
		{testutil.ToFloat64(m.decisions.WithLabelValues("fail_closed", "denied")), 1, "denied by policy"},
		{testutil.ToFloat64(m.cacheHits), 1, "deny cache hits"},
		{testutil.ToFloat64(m.decisions.WithLabelValues("deny_cache", "denied")), 1, "denied by the deny cache"},
		{testutil.ToFloat64(m.decisions.WithLabelValues("shadow", "denied")), 1, "would-be denials"},
		{testutil.ToFloat64(m.breaker.WithLabelValues("open")), 1, "breaker open"},
		{testutil.ToFloat64(m.breaker.WithLabelValues("closed")), 0, "breaker not closed"},
		{testutil.ToFloat64(m.changes.WithLabelValues("open")), 1, "changes to open"},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
}

func TestMetricsCountTheAdjustmentsAGuardForwards(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	bucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 10, ratelimit.WithClock(ratelimittest.NewClock(time.Unix(0, 0))))
	if err != nil {
		t.Fatal(err)
	}
	guard, err := ratelimit.NewGuard(bucket, ratelimit.GuardConfig{Hooks: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := guard.Allow(ctx, "user:1", 4); err != nil {
		t.Fatal(err)
	}
	if _, err := guard.Settle(ctx, "user:1", 4, 6, ratelimit.WithToken("req-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := guard.Refund(ctx, "user:1", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := guard.Settle(ctx, "user:1", 11, 1); !errors.Is(err, ratelimit.ErrCostExceedsLimit) {
		t.Fatalf("a settle of more than the limit taken: got %v", err)
	}
	if err := guard.Reset(ctx, "user:1"); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(m.adjustments.WithLabelValues("settle", "ok")), 1, "settles applied"},
		{testutil.ToFloat64(m.adjustments.WithLabelValues("settle", "error")), 1, "settles failed"},
		{testutil.ToFloat64(m.adjustments.WithLabelValues("refund", "ok")), 1, "refunds applied"},
		{testutil.ToFloat64(m.adjustments.WithLabelValues("reset", "ok")), 1, "resets applied"},
		{testutil.ToFloat64(m.units.WithLabelValues("settle", "taken")), 4, "units settles replaced"},
		{testutil.ToFloat64(m.units.WithLabelValues("settle", "cost")), 6, "units settled"},
		{testutil.ToFloat64(m.units.WithLabelValues("refund", "taken")), 2, "units refunded"},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.what, c.got, c.want)
		}
	}
}
