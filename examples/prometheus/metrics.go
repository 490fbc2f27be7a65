package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit"
)

// Metrics exports what a Guard and a DenyCache report to their
// ratelimit.Hooks as Prometheus metrics. It is safe for concurrent use.
//
// Keys are deliberately not a label: they are unbounded (user ids, IPs) and
// would blow up the number of series.
type Metrics struct {
	decisions *prometheus.CounterVec   // by source and outcome
	latency   *prometheus.HistogramVec // by source
	breaker   *prometheus.GaugeVec     // 1 for the current state
	changes   *prometheus.CounterVec   // by the state changed to
	cacheHits prometheus.Counter       // denials a DenyCache answered itself
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratelimit_decisions_total",
			Help: "Rate-limit decisions a Guard made, by who answered (backend, fallback, fail_open, fail_closed) and outcome (allowed, denied, error). With a DenyCache behind the Guard, backend includes its local answers.",
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
	}
	for _, c := range []prometheus.Collector{m.decisions, m.latency, m.breaker, m.changes, m.cacheHits} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.breaker.WithLabelValues(ratelimit.BreakerClosed.String()).Set(1)
	return m, nil
}

// Decided counts a decision and observes its latency, or counts a
// DenyCache's local answer.
func (m *Metrics) Decided(d ratelimit.Decision) {
	if d.Source == ratelimit.FromDenyCache {
		m.cacheHits.Inc()
		return
	}
	outcome := "denied"
	switch {
	case d.Err != nil:
		outcome = "error"
	case d.Result.Allowed:
		outcome = "allowed"
	}
	source := d.Source.String()
	m.decisions.WithLabelValues(source, outcome).Inc()
	m.latency.WithLabelValues(source).Observe(d.Latency.Seconds())
}

// BreakerChanged moves the state gauge and counts the change.
func (m *Metrics) BreakerChanged(from, to ratelimit.BreakerState) {
	m.breaker.WithLabelValues(from.String()).Set(0)
	m.breaker.WithLabelValues(to.String()).Set(1)
	m.changes.WithLabelValues(to.String()).Inc()
}
