package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit"
)

// Metrics exports what a Guard reports to its ratelimit.Hooks as
// Prometheus metrics. The Guard reports every call with the Source of its
// Decision, which says who answered, the DenyCache behind it included, so
// it is the only reporter needed. As Metrics implements
// ratelimit.AdjustHooks too, the Guard also reports every Refund, Settle
// and Reset it forwards to Redis. It is safe for concurrent use.
//
// Keys are deliberately not a label: they are unbounded (user ids, IPs) and
// would blow up the number of series.
type Metrics struct {
	decisions *prometheus.CounterVec   // by source and outcome
	latency   *prometheus.HistogramVec // by source
	breaker   *prometheus.GaugeVec     // 1 for the current state
	changes   *prometheus.CounterVec   // by the state changed to
	cacheHits prometheus.Counter       // denials a DenyCache answered locally

	adjustments *prometheus.CounterVec // by op and outcome
	units       *prometheus.CounterVec // of the adjustments that succeeded, by op and taken or cost
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_decisions_total",
			Help: "Rate-limit decisions a Guard made, by who answered (backend, deny_cache, fallback, fail_open, fail_closed, shadow) and outcome (allowed, denied, error). A denial a Shadow let through is denied, of source shadow.",
		}, []string{"source", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratelimit_decision_seconds",
			Help:    "Time to decide, by who answered.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}, []string{"source"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ratelimit_breaker_state",
			Help: "1 for the circuit breaker's current state (closed, open, half_open), 0 for the others.",
		}, []string{"state"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_breaker_changes_total",
			Help: "Circuit breaker state changes, by the state changed to.",
		}, []string{"to"}),
		cacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ratelimit_deny_cache_hits_total",
			Help: "Denials a DenyCache answered without asking its backend (Redis calls saved).",
		}),
		adjustments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_adjustments_total",
			Help: "Refunds, settles and resets, by op (refund, settle, reset) and outcome (ok, error). An error of the backend may or may not have been applied: retry it with the same token.",
		}, []string{"op", "outcome"}),
		units: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_adjustment_units_total",
			Help: "Units of the refunds and settles that succeeded, by op: taken (the estimates they replaced) and cost (the true costs charged instead). taken - cost is the units given back.",
		}, []string{"op", "units"}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.latency, m.breaker, m.changes, m.cacheHits, m.adjustments, m.units} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.breaker.WithLabelValues(ratelimit.BreakerClosed.String()).Set(1)
	return m, nil
}

// Decided counts a decision by who answered and its outcome, and observes
// its latency; a DenyCache's local answer also counts as a cache hit. A
// denial a Shadow let through (WouldDeny) counts as denied: its Result is
// the allowed answer the caller got, the denial is in Enforced.
func (m *Metrics) Decided(ev ratelimit.Event) {
	if ev.Source == ratelimit.FromDenyCache {
		m.cacheHits.Inc()
	}
	outcome := "denied"
	switch {
	case ev.Err != nil:
		outcome = "error"
	case ev.Allowed && !ev.WouldDeny:
		outcome = "allowed"
	}
	source := ev.Source.String()
	m.decisions.WithLabelValues(source, outcome).Inc()
	m.latency.WithLabelValues(source).Observe(ev.Latency.Seconds())
}

// BreakerChanged moves the state gauge and counts the change.
func (m *Metrics) BreakerChanged(from, to ratelimit.BreakerState) {
	m.breaker.WithLabelValues(from.String()).Set(0)
	m.breaker.WithLabelValues(to.String()).Set(1)
	m.changes.WithLabelValues(to.String()).Inc()
}

// Adjusted counts a Refund, Settle or Reset by op and outcome, and the
// units of one that succeeded: a failed one changed nothing, or may not
// have.
func (m *Metrics) Adjusted(ev ratelimit.AdjustEvent) {
	op := ev.Op.String()
	if ev.Err != nil {
		m.adjustments.WithLabelValues(op, "error").Inc()
		return
	}
	m.adjustments.WithLabelValues(op, "ok").Inc()
	if ev.Op != ratelimit.AdjustReset {
		m.units.WithLabelValues(op, "taken").Add(float64(ev.Taken))
		m.units.WithLabelValues(op, "cost").Add(float64(ev.Cost))
	}
}
