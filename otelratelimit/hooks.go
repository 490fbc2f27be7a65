// Package otelratelimit exports what ratelimit's limiters and decorators
// report to their ratelimit.Hooks as OpenTelemetry metrics: decisions by
// outcome and source, their latency, the state of a Guard's circuit
// breaker, adjustments (Refund, Settle, Reset, and a Lease's Release and
// Extend: how many, how many failed, and the units they settled), and the
// leases a process holds.
//
// It is a module of its own, so the ratelimit module does not depend on
// OpenTelemetry. Give a Hooks to any limiter with ratelimit.WithHooks, and to
// a Guard, DenyCache or Shadow through its config's Hooks field:
//
//	h, err := otelratelimit.NewHooks(otel.GetMeterProvider())
//	bucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 10, ratelimit.WithHooks(h), ratelimit.WithName("api"))
//
// Keys are never an attribute: they are unbounded (user ids, IPs) and would
// make a series each, and may be secrets. The Hooks tells the limiters so
// (ratelimit.KeylessHooks), and they report no key to it.
//
// NewOutboundObserver does the same for an outbound.Upstream, the limiter
// of calls to other people's APIs: its Config.Observer records the waits
// before calls, the calls refused, the upstream's 429s, the pauses and
// limits its answers set, the retries, and the failures of its Store, as
// the ratelimit.outbound.* instruments. Partitions are never an
// attribute, as keys are not:
//
//	observe, err := otelratelimit.NewOutboundObserver(otel.GetMeterProvider(), otelratelimit.WithLimiterName("partner-api"))
//	up, err := outbound.New(limiter, outbound.Config{Observer: observe})
package otelratelimit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/ratelimit-go/ratelimit"
)

// ScopeName is the instrumentation scope of the meter the Hooks record with:
// this module's path.
const ScopeName = "github.com/ratelimit-go/ratelimit/otelratelimit"

// The instruments' names.
const (
	// DecisionsName counts decisions (unit {decision}).
	DecisionsName = "ratelimit.decisions"
	// DurationName is the histogram of decision latency (unit s).
	DurationName = "ratelimit.decision.duration"
	// BreakerStateName counts circuit breakers by state, open and
	// half_open (unit {breaker}).
	BreakerStateName = "ratelimit.breaker.state"
	// BreakerTransitionsName counts breaker state changes by the state
	// changed to (unit {transition}).
	BreakerTransitionsName = "ratelimit.breaker.transitions"
	// AdjustmentsName counts Refunds, Settles and Resets, and Leases'
	// Releases and Extends (unit {adjustment}).
	AdjustmentsName = "ratelimit.adjustments"
	// AdjustmentUnitsName counts the units of the Refunds, Settles,
	// Releases and Extends that succeeded: those they replaced and those
	// they charged instead (unit {unit}).
	AdjustmentUnitsName = "ratelimit.adjustment.units"
	// LeasesHeldName is the gauge of leases held: those acquired and not
	// yet released (unit {lease}).
	LeasesHeldName = "ratelimit.leases.held"
)

// The attributes' keys.
const (
	// LimiterKey is the reporting limiter's name: Event.Limiter, which
	// ratelimit.WithName or a decorator's config Name sets; on breaker
	// and outbound measurements, the name WithLimiterName gave, if any.
	LimiterKey = attribute.Key("ratelimit.limiter")
	// OutcomeKey is "allowed", "denied" or "error" on decisions; "ok" or
	// "error" on adjustments.
	OutcomeKey = attribute.Key("ratelimit.outcome")
	// SourceKey is who answered: ratelimit.Source's String ("backend",
	// "fallback", "fail_open", "fail_closed", "deny_cache", "shadow").
	SourceKey = attribute.Key("ratelimit.source")
	// ErrorTypeKey, on decisions and adjustments of outcome "error" only,
	// classifies the error: "invalid_cost", "cost_exceeds_limit",
	// "corrupt_state", "invalid_config", "invalid_key" (a key longer than
	// the limiter takes), "lease_expired" (an Extend of a
	// lease no longer held), "canceled", "deadline_exceeded", "backend"
	// (any other ratelimit.ErrBackend), or "_OTHER".
	ErrorTypeKey = attribute.Key("error.type")
	// BreakerStateKey is a breaker state's String: "closed", "open" or
	// "half_open".
	BreakerStateKey = attribute.Key("ratelimit.breaker.state")
	// OperationKey is an adjustment's call, ratelimit.AdjustOp's String:
	// "settle", "refund", "reset", "release" or "extend".
	OperationKey = attribute.Key("ratelimit.operation")
	// UnitsKey says which units of an adjustment are counted: "taken",
	// the units it replaced (AdjustEvent.Taken), or "cost", those it
	// charged instead (AdjustEvent.Cost).
	UnitsKey = attribute.Key("ratelimit.units")
)

// DurationBuckets are the duration histogram's explicit bucket boundaries,
// in seconds: from 1 µs (in-process decisions take well under it) to
// 250 ms (a Redis round trip in trouble). A View can replace them.
var DurationBuckets = []float64{
	0.000001, 0.000005, 0.00001, 0.000025, 0.00005,
	0.0001, 0.00025, 0.0005, 0.001, 0.0025,
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
}

// maxCached bounds the attribute sets a Hooks keeps; past it, decisions
// are still recorded, with sets built for each call. Limiter names come
// from the program, so a real one never gets near it.
const maxCached = 1024

// Option configures a Hooks, or the observer of NewOutboundObserver.
type Option func(*config) error

type config struct {
	limiter string
	attrs   []attribute.KeyValue
}

// WithLimiterName sets the ratelimit.limiter attribute of the breaker
// measurements. Hooks.BreakerChanged is not told which Guard's breaker
// changed: to tell breakers apart, give each Guard a Hooks of its own, with
// its GuardConfig.Name here (and a ratelimit.Breaker that Guards share, which
// reports to its BreakerConfig.Hooks and not to the Guards', one with its
// own name). Decisions keep the name they report. For
// NewOutboundObserver, it names the upstream: the ratelimit.limiter
// attribute of every measurement, since an outbound.Event names none. An
// empty name is an error.
func WithLimiterName(name string) Option {
	return func(c *config) error {
		if name == "" {
			return errors.New("otelratelimit: WithLimiterName: empty name")
		}
		c.limiter = name
		return nil
	}
}

// WithAttributes adds attrs to every measurement, decisions, breaker
// changes and outbound events alike; for instance a tier or region that
// several Hooks share one meter with. Keep them few and of few values. An
// empty key, or one of this package's, is an error.
func WithAttributes(attrs ...attribute.KeyValue) Option {
	return func(c *config) error {
		for _, kv := range attrs {
			switch kv.Key {
			case LimiterKey, OutcomeKey, SourceKey, ErrorTypeKey, BreakerStateKey, OperationKey, UnitsKey, ReasonKey, StatusKey:
				return fmt.Errorf("otelratelimit: WithAttributes: %s is set by the Hooks", kv.Key)
			}
			if !kv.Valid() {
				return errors.New("otelratelimit: WithAttributes: an attribute with an empty key")
			}
		}
		c.attrs = append(c.attrs, attrs...)
		return nil
	}
}

// Hooks is a ratelimit.Hooks that records to OpenTelemetry instruments:
//
//   - ratelimit.decisions, a Counter ({decision}): every decision reported,
//     with ratelimit.limiter, ratelimit.outcome, ratelimit.source, and
//     error.type when the outcome is "error".
//   - ratelimit.decision.duration, a Histogram (s, DurationBuckets): each
//     decision's Latency, with the same attributes.
//   - ratelimit.breaker.state, an UpDownCounter ({breaker}): how many of
//     the breakers reporting here are in each state, by
//     ratelimit.breaker.state "open" or "half_open". Closed breakers are
//     not counted: a Hooks does not know the Guards it serves until they
//     report a change. With one Hooks per Guard, it is 1 for the state the
//     breaker is in and 0 for the other, and both are 0 while it is
//     closed.
//   - ratelimit.breaker.transitions, a Counter ({transition}): breaker
//     changes, by ratelimit.breaker.state, the state changed to.
//   - ratelimit.adjustments, a Counter ({adjustment}): every Refund,
//     Settle, Reset, Release and Extend reported (see
//     ratelimit.AdjustHooks), with
//     ratelimit.limiter, ratelimit.operation, ratelimit.outcome ("ok" or
//     "error"), and error.type when the outcome is "error": the failed
//     adjustments are those of outcome "error".
//   - ratelimit.adjustment.units, a Counter ({unit}): the units of the
//     Refunds, Settles, Releases and Extends that succeeded, with
//     ratelimit.limiter, ratelimit.operation and ratelimit.units:
//     "taken", the units they replaced, and "cost", the units they
//     charged instead. The sum of "cost" of settles is the units settled
//     (the work's true cost); "taken" minus "cost", the units given back
//     net: a Release's taken is its lease's units, its cost 0; an
//     Extend's taken and cost are both its lease's units. A failed
//     adjustment counts no units: it changed nothing, or may not have.
//   - ratelimit.leases.held, an UpDownCounter ({lease}): the leases of
//     concurrency limiters that this process acquired and has not
//     released, with ratelimit.limiter only (see Decided and Adjusted): a
//     lease counts 1 whatever its units. A lease that expires unreleased
//     stays counted until it is released: a steady rise is a holder that
//     forgets to release. Each Release reported counts as one lease ended,
//     so a lease released twice is uncounted twice: release each once
//     (defer lease.Release). Only the limiter that grants the leases
//     reports them, both its Acquires and their Releases: a layer around
//     it (a Guard, a Shadow, a DenyCache) reports neither, so its series
//     stays at 0.
//
// The breaker measurements carry ratelimit.limiter only when
// WithLimiterName sets it. Options' WithAttributes are on every
// measurement.
//
// A decision of source "shadow" is a denial a ratelimit.Shadow let
// through: its outcome is "denied", what the enforced limit would have
// answered. One Hooks can serve many limiters; a call that passes several
// of them (a limiter WithHooks inside a Guard with the same Hooks) is
// counted once by each, under each's ratelimit.limiter.
//
// Recording a decision allocates nothing once its attribute set has been
// seen. A Hooks is safe for concurrent use. Create one with NewHooks.
type Hooks struct {
	decisions   metric.Int64Counter
	duration    metric.Float64Histogram
	breakers    metric.Int64UpDownCounter
	transitions metric.Int64Counter
	adjustments metric.Int64Counter
	units       metric.Int64Counter
	leases      metric.Int64UpDownCounter

	// base is the attributes of every measurement (WithAttributes).
	base []attribute.KeyValue
	// sets maps a decision's attributes to its options: a copy-on-write
	// map, read without a lock.
	sets atomic.Pointer[map[setKey]*decisionOpts]
	mu   sync.Mutex // serialises writers of sets
	// breakerOpts is indexed by BreakerState; the last is for states this
	// package does not know.
	breakerOpts [4]breakerOpts
	// adjustSets maps an adjustment's attributes to its options, as sets
	// does a decision's.
	adjustSets atomic.Pointer[map[adjustKey]*adjustOpts]
	// leaseSets maps a limiter's name to the options of its leases held,
	// as sets does a decision's.
	leaseSets atomic.Pointer[map[string]*leaseOpts]
}

var (
	_ ratelimit.Hooks        = (*Hooks)(nil)
	_ ratelimit.AdjustHooks  = (*Hooks)(nil)
	_ ratelimit.KeylessHooks = (*Hooks)(nil)
)

// IgnoresKeys tells the limiters and decorators reporting to h that it
// never reads a key (see ratelimit.KeylessHooks): their reports to it carry
// none, and cost no key digest.
func (*Hooks) IgnoresKeys() {}

// setKey is what distinguishes a decision's attribute set.
type setKey struct {
	limiter string
	outcome outcome
	source  ratelimit.Source
	errType errorType
}

// decisionOpts is the measurement options of one attribute set, built
// once so that recording allocates nothing.
type decisionOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// breakerOpts is the measurement options of one breaker state.
type breakerOpts struct {
	add []metric.AddOption
}

type outcome uint8

const (
	allowed outcome = iota
	denied
	failed
)

var outcomeNames = [...]string{allowed: "allowed", denied: "denied", failed: "error"}

type errorType uint8

const (
	noError errorType = iota
	invalidCost
	costExceedsLimit
	corruptState
	invalidConfig
	invalidKey
	leaseExpired
	canceled
	deadlineExceeded
	backendError
	otherError
)

var errorTypeNames = [...]string{
	invalidCost:      "invalid_cost",
	costExceedsLimit: "cost_exceeds_limit",
	corruptState:     "corrupt_state",
	invalidConfig:    "invalid_config",
	invalidKey:       "invalid_key",
	leaseExpired:     "lease_expired",
	canceled:         "canceled",
	deadlineExceeded: "deadline_exceeded",
	backendError:     "backend",
	otherError:       "_OTHER",
}

// classify returns err's errorType.
func classify(err error) errorType {
	switch {
	case err == nil:
		return noError
	case errors.Is(err, ratelimit.ErrInvalidCost):
		return invalidCost
	case errors.Is(err, ratelimit.ErrCostExceedsLimit):
		return costExceedsLimit
	case errors.Is(err, ratelimit.ErrCorruptState):
		return corruptState
	case errors.Is(err, ratelimit.ErrInvalidConfig):
		return invalidConfig
	case errors.Is(err, ratelimit.ErrInvalidKey):
		return invalidKey
	case errors.Is(err, ratelimit.ErrLeaseExpired):
		return leaseExpired
	case errors.Is(err, context.Canceled):
		return canceled
	case errors.Is(err, context.DeadlineExceeded):
		return deadlineExceeded
	case errors.Is(err, ratelimit.ErrBackend):
		return backendError
	}
	return otherError
}

// NewHooks returns Hooks recording with a meter of mp named ScopeName. Pass
// otel.GetMeterProvider() for the global provider. A nil mp, a bad option
// or an instrument mp cannot create is an error.
func NewHooks(mp metric.MeterProvider, opts ...Option) (*Hooks, error) {
	if mp == nil {
		return nil, errors.New("otelratelimit: NewHooks: nil MeterProvider")
	}
	var cfg config
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("otelratelimit: NewHooks: option %d is nil", i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	meter := mp.Meter(ScopeName)
	h := &Hooks{base: cfg.attrs}
	var err error
	if h.decisions, err = meter.Int64Counter(DecisionsName,
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by limiter, outcome and who answered."),
	); err != nil {
		return nil, fmt.Errorf("otelratelimit: %w", err)
	}
	if h.duration, err = meter.Float64Histogram(DurationName,
		metric.WithUnit("s"),
		metric.WithDescription("Time a rate-limit decision took."),
		metric.WithExplicitBucketBoundaries(DurationBuckets...),
	); err != nil {
		return nil, fmt.Errorf("otelratelimit: %w", err)
	}
	if h.breakers, err = meter.Int64UpDownCounter(BreakerStateName,
		metric.WithUnit("{breaker}"),
		metric.WithDescription("Circuit breakers in each state other than closed."),
	); err != nil {
		return nil, fmt.Errorf("otelratelimit: %w", err)
	}
	if h.transitions, err = meter.Int64Counter(BreakerTransitionsName,
		metric.WithUnit("{transition}"),
		metric.WithDescription("Circuit breaker state changes, by the state changed to."),
	); err != nil {
		return nil, fmt.Errorf("otelratelimit: %w", err)
	}
	if h.adjustments, err = meter.Int64Counter(AdjustmentsName,
		metric.WithUnit("{adjustment}"),
		metric.WithDescription("Refunds, Settles, Resets, Releases and Extends, by limiter, operation and outcome."),
	); err != nil {
		return nil, fmt.Errorf("otelratelimit: %w", err)
	}
	if h.units, err = meter.Int64Counter(AdjustmentUnitsName,
		metric.WithUnit("{unit}"),
		metric.WithDescription("Units of the Refunds, Settles, Releases and Extends that succeeded: those taken that they replaced, and their cost."),
	); err != nil {
		return nil, fmt.Errorf("otelratelimit: %w", err)
	}
	if h.leases, err = meter.Int64UpDownCounter(LeasesHeldName,
		metric.WithUnit("{lease}"),
		metric.WithDescription("Leases of concurrency limiters acquired and not yet released, by limiter."),
	); err != nil {
		return nil, fmt.Errorf("otelratelimit: %w", err)
	}
	for i := range h.breakerOpts {
		state := ratelimit.BreakerState(i)
		kvs := append(h.baseAttrs(), BreakerStateKey.String(state.String()))
		if cfg.limiter != "" {
			kvs = append(kvs, LimiterKey.String(cfg.limiter))
		}
		h.breakerOpts[i].add = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
	}
	h.sets.Store(&map[setKey]*decisionOpts{})
	h.adjustSets.Store(&map[adjustKey]*adjustOpts{})
	h.leaseSets.Store(&map[string]*leaseOpts{})
	return h, nil
}

// baseAttrs returns a copy of the attributes of every measurement, with
// room for a few more.
func (h *Hooks) baseAttrs() []attribute.KeyValue {
	return append(make([]attribute.KeyValue, 0, len(h.base)+4), h.base...)
}

// Decided counts ev and records its latency (a negative one as 0). An ev
// whose Lease is held (an Acquire that granted a lease) also adds 1 to the
// leases held by ev.Limiter.
//
// A denial a Shadow let through (WouldDeny, Source FromShadow) counts as
// "denied" of source "shadow", what the enforced limit would have
// answered, although its Result is the allowed answer the caller got
// (the denial is in ev.Enforced): the metrics say what they said when the
// Result was the denial itself.
func (h *Hooks) Decided(ev ratelimit.Event) {
	k := setKey{limiter: ev.Limiter, outcome: denied, source: ev.Source}
	switch {
	case ev.Err != nil:
		k.outcome, k.errType = failed, classify(ev.Err)
	case ev.Allowed && !ev.WouldDeny:
		k.outcome = allowed
	}
	o := h.options(k)
	ctx := context.Background()
	h.decisions.Add(ctx, 1, o.add...)
	// A clock stepped back can make a latency negative: it counts as 0.
	h.duration.Record(ctx, max(ev.Latency, 0).Seconds(), o.record...)
	if ev.Lease.Held() {
		h.leases.Add(ctx, 1, h.leaseOptions(ev.Limiter).add...)
	}
}

// BreakerChanged moves a breaker from one state to the other and counts
// the change.
func (h *Hooks) BreakerChanged(from, to ratelimit.BreakerState) {
	ctx := context.Background()
	if from != ratelimit.BreakerClosed {
		h.breakers.Add(ctx, -1, h.breakerState(from).add...)
	}
	if to != ratelimit.BreakerClosed {
		h.breakers.Add(ctx, 1, h.breakerState(to).add...)
	}
	h.transitions.Add(ctx, 1, h.breakerState(to).add...)
}

// breakerState returns the options of state s.
func (h *Hooks) breakerState(s ratelimit.BreakerState) *breakerOpts {
	if s < 0 || int(s) >= len(h.breakerOpts)-1 {
		return &h.breakerOpts[len(h.breakerOpts)-1] // "unknown"
	}
	return &h.breakerOpts[s]
}

// options returns the measurement options of k, building them the first
// time k is seen.
func (h *Hooks) options(k setKey) *decisionOpts {
	if o, ok := (*h.sets.Load())[k]; ok {
		return o
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	sets := *h.sets.Load()
	if o, ok := sets[k]; ok {
		return o
	}
	kvs := append(h.baseAttrs(),
		LimiterKey.String(k.limiter),
		OutcomeKey.String(outcomeNames[k.outcome]),
		SourceKey.String(k.source.String()),
	)
	if k.errType != noError {
		kvs = append(kvs, ErrorTypeKey.String(errorTypeNames[k.errType]))
	}
	set := attribute.NewSet(kvs...)
	o := &decisionOpts{
		add:    []metric.AddOption{metric.WithAttributeSet(set)},
		record: []metric.RecordOption{metric.WithAttributeSet(set)},
	}
	if len(sets) < maxCached {
		grown := maps.Clone(sets)
		grown[k] = o
		h.sets.Store(&grown)
	}
	return o
}
