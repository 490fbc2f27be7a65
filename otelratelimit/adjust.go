package otelratelimit

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimit-go/ratelimit"
)

// adjustKey is what distinguishes an adjustment's attribute set.
type adjustKey struct {
	limiter string
	op      ratelimit.AdjustOp
	errType errorType
}

// adjustOpts is the measurement options of one adjustment attribute set:
// its count's, and its units' by ratelimit.units.
type adjustOpts struct {
	count []metric.AddOption
	taken []metric.AddOption
	cost  []metric.AddOption
}

// Adjusted counts ev, and, when it succeeded and is not a Reset, its
// Taken and Cost units. A Release (see releasesLease) also takes 1 from
// the leases held by ev.Limiter. Keys are never recorded.
func (h *Hooks) Adjusted(ev ratelimit.AdjustEvent) {
	o := h.adjustOptions(adjustKey{limiter: ev.Limiter, op: ev.Op, errType: classify(ev.Err)})
	ctx := context.Background()
	h.adjustments.Add(ctx, 1, o.count...)
	if releasesLease(ev) {
		h.leases.Add(ctx, -1, h.leaseOptions(ev.Limiter).add...)
	}
	if ev.Err != nil || ev.Op == ratelimit.AdjustReset {
		return
	}
	if ev.Taken > 0 {
		h.units.Add(ctx, int64(ev.Taken), o.taken...)
	}
	if ev.Cost > 0 {
		h.units.Add(ctx, int64(ev.Cost), o.cost...)
	}
}

// adjustOptions returns the measurement options of k, building them the
// first time k is seen (see options).
func (h *Hooks) adjustOptions(k adjustKey) *adjustOpts {
	if o, ok := (*h.adjustSets.Load())[k]; ok {
		return o
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	sets := *h.adjustSets.Load()
	if o, ok := sets[k]; ok {
		return o
	}
	kvs := append(h.baseAttrs(), LimiterKey.String(k.limiter), OperationKey.String(k.op.String()))
	// with returns the options of a set of kvs and more.
	with := func(more ...attribute.KeyValue) []metric.AddOption {
		set := attribute.NewSet(append(append([]attribute.KeyValue(nil), kvs...), more...)...)
		return []metric.AddOption{metric.WithAttributeSet(set)}
	}
	o := &adjustOpts{}
	if k.errType == noError {
		o.count = with(OutcomeKey.String("ok"))
		o.taken, o.cost = with(UnitsKey.String("taken")), with(UnitsKey.String("cost"))
	} else {
		o.count = with(OutcomeKey.String(outcomeNames[failed]), ErrorTypeKey.String(errorTypeNames[k.errType]))
	}
	if len(sets) < maxCached {
		grown := maps.Clone(sets)
		grown[k] = o
		h.adjustSets.Store(&grown)
	}
	return o
}
