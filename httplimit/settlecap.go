package httplimit

import (
	"fmt"
	"math"
	"net/http"

	"github.com/ratelimit-go/ratelimit"
)

// settleBound returns the most the middleware settles for a request
// decided by d (see WithMaxSettle): its limits times the smallest Limit of
// d's policies that count units; -1, unbounded, when there is none or the
// option says so.
func (m *Middleware) settleBound(d ratelimit.Decision) int64 {
	limits := int64(m.maxSettle)
	if limits == 0 {
		limits = ratelimit.DefaultMaxSettle
	}
	if limits < 0 {
		return -1
	}
	smallest := int64(-1)
	for _, p := range d.Policies {
		if !p.PerCall && !p.InFlight && p.Limit > 0 && (smallest < 0 || int64(p.Limit) < smallest) {
			smallest = int64(p.Limit)
		}
	}
	if len(d.Policies) == 0 && d.Limit > 0 {
		smallest = int64(d.Limit)
	}
	if smallest < 0 {
		return -1
	}
	if smallest > math.MaxInt64/limits {
		return math.MaxInt64
	}
	return limits * smallest
}

// boundSettle returns cost, a request's reported cost (or costUnset), at
// most most (unbounded below 0), and tells the WithOnError hook of a cost
// it bounds.
func (m *Middleware) boundSettle(r *http.Request, cost, most int64) int64 {
	if most < 0 || cost <= most {
		return cost
	}
	if m.onError != nil {
		m.onError(r, fmt.Errorf("%w: a cost of %d is above the most one request is settled at (WithMaxSettle), %d: settled at %d", ErrAdjustment, cost, most, most))
	}
	return most
}
