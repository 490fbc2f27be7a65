package promratelimit

import (
	"github.com/ratelimit-go/ratelimit"
)

// Adjusted counts ev by limiter, op and outcome ("ok" or "error", and
// then its error_type in ratelimit_errors_total), and, when it succeeded
// and is not a Reset, adds its Taken and Cost units. A Release that gave
// its lease's units back (see freesLease) takes 1 from the leases held by
// its limiter; one that gave nothing back adds no units.
func (h *Hooks) Adjusted(ev ratelimit.AdjustEvent) {
	if h.off() {
		return
	}
	m := h.m
	op := ev.Op.String()
	if freesLease(ev) {
		m.leases.WithLabelValues(ev.Limiter).Dec()
	}
	if ev.Err != nil {
		m.adjustments.WithLabelValues(ev.Limiter, op, "error").Inc()
		m.errs.WithLabelValues(ev.Limiter, op, errorType(ev.Err)).Inc()
		return
	}
	m.adjustments.WithLabelValues(ev.Limiter, op, "ok").Inc()
	if ev.Op == ratelimit.AdjustReset {
		return
	}
	taken := max(ev.Taken, 0)
	if ev.Op == ratelimit.AdjustRelease && !ev.Result.Allowed {
		taken = 0 // a lease already released or expired: nothing came back
	}
	m.adjustUnits.WithLabelValues(ev.Limiter, op, "taken").Add(float64(taken))
	m.adjustUnits.WithLabelValues(ev.Limiter, op, "cost").Add(float64(max(ev.Cost, 0)))
}

// freesLease reports whether ev is a Release that gave a lease's units
// back to its key: its limiter still held the lease (Result.Allowed, see
// ratelimit.AdjustRelease) and it returned no error. A second Release of
// the same lease, a Release after the lease expired or its key was Reset,
// and a Release that failed free nothing, so the leases held count each
// lease once, on the Release that ended it; a lease that expired is
// never taken off (see the package documentation).
func freesLease(ev ratelimit.AdjustEvent) bool {
	return ev.Op == ratelimit.AdjustRelease && ev.Taken > 0 && ev.Err == nil && ev.Result.Allowed
}
