package promratelimit

import (
	"errors"

	"github.com/ratelimit-go/ratelimit"
)

// Adjusted counts ev by limiter, op and outcome ("ok" or "error", and
// then its error_type in ratelimit_errors_total), and, when it succeeded
// and is not a Reset, adds its Taken and Cost units. A Release of a lease
// (see releasesLease) takes 1 from the leases held by its limiter.
func (h *Hooks) Adjusted(ev ratelimit.AdjustEvent) {
	m := h.m
	op := ev.Op.String()
	if releasesLease(ev) {
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
	m.adjustUnits.WithLabelValues(ev.Limiter, op, "taken").Add(float64(max(ev.Taken, 0)))
	m.adjustUnits.WithLabelValues(ev.Limiter, op, "cost").Add(float64(max(ev.Cost, 0)))
}

// releasesLease reports whether ev ends a lease this process held: a
// Release of a lease that held units, whether or not its limiter still
// held it and whether or not the limiter could be reached (the lease then
// ends by its TTL). A Release refused as the caller's mistake
// (ratelimit.ErrCaller) ends nothing.
func releasesLease(ev ratelimit.AdjustEvent) bool {
	return ev.Op == ratelimit.AdjustRelease && ev.Taken > 0 && !errors.Is(ev.Err, ratelimit.ErrCaller)
}
