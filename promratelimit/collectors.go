package promratelimit

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics' names (see the package documentation for their labels).
const (
	DecisionsName       = "ratelimit_decisions_total"
	DecisionUnitsName   = "ratelimit_decision_units_total"
	DurationName        = "ratelimit_decision_duration_seconds"
	RetryAfterName      = "ratelimit_retry_after_seconds"
	ErrorsName          = "ratelimit_errors_total"
	AdjustmentsName     = "ratelimit_adjustments_total"
	AdjustmentUnitsName = "ratelimit_adjustment_units_total"
	BreakersName        = "ratelimit_breakers"
	TransitionsName     = "ratelimit_breaker_transitions_total"
	LeasesHeldName      = "ratelimit_leases_held"
	RequestsName        = "ratelimit_requests_total"
)

// newCollectors returns the metrics of cfg, not registered.
func newCollectors(cfg config) *collectors {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	return &collectors{
		decisions: counter(DecisionsName,
			"Rate-limit decisions, by limiter, who answered (source: backend, fallback, fail_open, fail_closed, deny_cache, shadow) and outcome (allowed, denied, rejected for the request's own mistake, error for any other error).",
			"limiter", "source", "outcome"),
		units: counter(DecisionUnitsName,
			"Units the decisions were asked for (their cost), by limiter and outcome.",
			"limiter", "outcome"),
		duration: histogram(DurationName,
			"Time a rate-limit decision took, by limiter and who answered.",
			cfg.duration, "limiter", "source"),
		retryAfter: histogram(RetryAfterName,
			"Retry-After of the denials: the wait until the same request can succeed, by limiter.",
			cfg.retryAfter, "limiter"),
		errs: counter(ErrorsName,
			"Calls that returned an error, by limiter, op (decide, settle, refund, reset, release, extend) and error_type.",
			"limiter", "op", "error_type"),
		adjustments: counter(AdjustmentsName,
			"Refunds, settles, resets, releases and extends, by limiter, op and outcome (ok, error).",
			"limiter", "op", "outcome"),
		adjustUnits: counter(AdjustmentUnitsName,
			"Units of the adjustments that succeeded, by limiter, op and units: taken (those they replaced) and cost (those they charged instead).",
			"limiter", "op", "units"),
		breakers: gauge(BreakersName,
			"Circuit breakers in each state other than closed (open, half_open), by breaker.",
			"breaker", "state"),
		transitions: counter(TransitionsName,
			"Circuit breaker state changes, by breaker and the state changed to.",
			"breaker", "to"),
		leases: gauge(LeasesHeldName,
			"Leases of concurrency limiters acquired and not yet given back by a Release, by limiter: a lease that expired without one stays counted.",
			"limiter"),
		requests: counter(RequestsName,
			"Requests a middleware decided on, by route, policy and outcome (allowed, denied, rejected for the request's own mistake, error for any other error).",
			"route", "policy", "outcome"),
		routes: routeSet{max: cfg.maxRoutes, seen: map[string]struct{}{}},
	}
}

// all returns every metric of m, in the order they are registered.
func (m *collectors) all() []prometheus.Collector {
	return []prometheus.Collector{
		m.decisions, m.units, m.duration, m.retryAfter, m.errs,
		m.adjustments, m.adjustUnits, m.breakers, m.transitions, m.leases, m.requests,
	}
}
