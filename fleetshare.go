package ratelimit

import (
	"math/bits"
	"time"
)

// shareInFlight returns one share of p, a policy of units in flight, among
// live replicas: a Limit of p.Limit/live rounded down, at least 1, and the
// same Window, the leases' TTL, which a share of units in flight has no
// reason to stretch (a lease holds its units until it is released, not at
// a rate). With one replica, or a Limit that is not positive, it returns
// p.
func shareInFlight(p Policy, live int) Policy {
	if live <= 1 || p.Limit <= 0 {
		return p
	}
	share := p // and its Zone, a calendar window's
	share.Limit = max(p.Limit/live, 1)
	return share
}

// sharePolicy returns one share of p among live replicas. See Fleet.Share.
func sharePolicy(p Policy, live int) Policy {
	if live <= 1 || p.Limit <= 0 || p.Window <= 0 {
		return p
	}
	share := max(p.Limit/live, 1)
	// Window × share × live / Limit, rounded up, in 128 bits; share × live
	// is at most max(Limit, live).
	// A window beyond what an in-process limiter's clock holds (maxSpan)
	// is that bound: a smaller rate share, never a refused policy.
	hi, lo := bits.Mul64(uint64(p.Window), uint64(share)*uint64(live))
	if hi >= uint64(p.Limit) {
		return Policy{Limit: share, Window: maxSpan}
	}
	q, r := bits.Div64(hi, lo, uint64(p.Limit))
	if r != 0 {
		q++
	}
	if q > maxSpan {
		return Policy{Limit: share, Window: maxSpan}
	}
	return Policy{Limit: share, Window: time.Duration(q)}
}
