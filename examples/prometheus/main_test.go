package main

import (
	"strings"
	"testing"
)

// TestTheScrapeShowsEachSourceTheScenarioGoesThrough runs the scenario and
// checks that what it prints has the series of every answer it provokes:
// Redis's, the DenyCache's, the fallback's once Redis is down, the
// breaker opening, and the adjustments, applied and failed.
func TestTheScrapeShowsEachSourceTheScenarioGoesThrough(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	for _, series := range []string{
		`ratelimit_decisions_total{limiter="orders",outcome="allowed",source="backend"}`,
		`ratelimit_decisions_total{limiter="orders",outcome="denied",source="deny_cache"}`,
		`ratelimit_decisions_total{limiter="orders",outcome="allowed",source="fallback"}`,
		`ratelimit_decisions_total{limiter="orders",outcome="denied",source="fallback"}`,
		`ratelimit_breaker_transitions_total{breaker="orders",to="open"} 1`,
		`ratelimit_adjustments_total{limiter="orders",op="settle",outcome="ok"} 1`,
		`ratelimit_adjustments_total{limiter="orders",op="settle",outcome="error"} 1`,
		`ratelimit_adjustments_total{limiter="orders",op="refund",outcome="ok"} 1`,
		`ratelimit_adjustment_units_total{limiter="orders",op="settle",units="cost"} 5`,
		`ratelimit_errors_total{error_type="backend",limiter="orders",op="settle"} 1`,
	} {
		if !strings.Contains(out.String(), series) {
			t.Errorf("missing %s in:\n%s", series, out.String())
		}
	}
}
