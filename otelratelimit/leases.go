package otelratelimit

import (
	"errors"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimit-go/ratelimit"
)

// leaseOpts is the measurement options of one limiter's leases held.
type leaseOpts struct {
	add []metric.AddOption
}

// releasesLease reports whether ev ends a lease this process held: a
// Release of a lease that held units (Taken > 0), whether or not the lease
// was still held by its limiter (ev.Result.Allowed) and whether or not the
// limiter could be reached (a backend error: the lease then expires by its
// TTL, and the process holds it no more). A Release refused as the
// caller's mistake (ratelimit.ErrCaller) ends nothing the limiter counted.
func releasesLease(ev ratelimit.AdjustEvent) bool {
	return ev.Op == ratelimit.AdjustRelease && ev.Taken > 0 && !errors.Is(ev.Err, ratelimit.ErrCaller)
}

// leaseOptions returns the measurement options of the leases held by the
// limiter named limiter, building them the first time it is seen (see
// options).
func (h *Hooks) leaseOptions(limiter string) *leaseOpts {
	if o, ok := (*h.leaseSets.Load())[limiter]; ok {
		return o
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	sets := *h.leaseSets.Load()
	if o, ok := sets[limiter]; ok {
		return o
	}
	kvs := append(h.baseAttrs(), LimiterKey.String(limiter))
	o := &leaseOpts{add: []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}}
	if len(sets) < maxCached {
		grown := maps.Clone(sets)
		grown[limiter] = o
		h.leaseSets.Store(&grown)
	}
	return o
}
