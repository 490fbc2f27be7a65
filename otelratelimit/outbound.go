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

	"github.com/ratelimit-go/ratelimit/outbound"
)

// The names of the instruments of NewOutboundObserver.
const (
	// OutboundWaitName is the histogram of how long the calls that waited
	// before they were sent waited (unit s, WaitBuckets).
	OutboundWaitName = "ratelimit.outbound.wait.duration"
	// OutboundRefusalsName counts the calls not sent (unit {call}), by
	// ratelimit.outbound.reason.
	OutboundRefusalsName = "ratelimit.outbound.refusals"
	// OutboundUpstreamLimitedName counts the answers by which the upstream
	// refused a call for its limit (unit {answer}), by
	// http.response.status_code.
	OutboundUpstreamLimitedName = "ratelimit.outbound.upstream_limited"
	// OutboundPausesName counts the pauses answers set (unit {pause}).
	OutboundPausesName = "ratelimit.outbound.pauses"
	// OutboundPauseName is the histogram of the pauses answers set (unit
	// s, PauseBuckets).
	OutboundPauseName = "ratelimit.outbound.pause.duration"
	// OutboundLearnedName counts the changes of the limit the limiter
	// applies that upstreams' answers made (unit {limit}).
	OutboundLearnedName = "ratelimit.outbound.learned"
	// OutboundRetriesName counts the calls sent again after the upstream
	// refused them (unit {retry}), by http.response.status_code.
	OutboundRetriesName = "ratelimit.outbound.retries"
	// OutboundStoreFailuresName counts the failures of the Upstream's
	// Store (unit {failure}), by error.type.
	OutboundStoreFailuresName = "ratelimit.outbound.store.failures"
	// OutboundSettleFailuresName counts the settles of a call's true cost
	// that failed (unit {failure}), by error.type.
	OutboundSettleFailuresName = "ratelimit.outbound.settle.failures"
)

// The attributes' keys of NewOutboundObserver's measurements, besides
// LimiterKey and ErrorTypeKey.
const (
	// ReasonKey says why an outbound call was not sent: "limited", it
	// would have waited past Config.MaxWait or its deadline (its error
	// wraps outbound.ErrLimited), or "error", the limiter failed or the
	// call's context ended while it waited.
	ReasonKey = attribute.Key("ratelimit.outbound.reason")
	// StatusKey is the status of the upstream's answer: 429, or 503 with
	// a Retry-After (a gRPC call's, as package outbound maps its code).
	StatusKey = attribute.Key("http.response.status_code")
)

// WaitBuckets are the bucket boundaries of the outbound wait histogram,
// in seconds: from 1 ms (a limiter's next unit at a high rate) to 60 s
// (outbound.DefaultMaxWait). A View can replace them.
var WaitBuckets = []float64{
	0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60,
}

// PauseBuckets are the bucket boundaries of the outbound pause histogram,
// in seconds: from 100 ms to 15 minutes (outbound.DefaultMaxPause, which
// bounds a pause). A View can replace them.
var PauseBuckets = []float64{
	0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 900,
}

// Reasons of a refusal, the values of ReasonKey.
const (
	reasonLimited = "limited"
	reasonError   = "error"
)

// outboundObserver records an outbound.Upstream's Events.
type outboundObserver struct {
	waits         metric.Float64Histogram
	refusals      metric.Int64Counter
	limited       metric.Int64Counter
	pauses        metric.Int64Counter
	pauseDuration metric.Float64Histogram
	learned       metric.Int64Counter
	retries       metric.Int64Counter
	storeFailures metric.Int64Counter
	settleFailed  metric.Int64Counter

	// plain is the options of the measurements that carry no attribute
	// of their own: the base attributes and the limiter's name.
	plain    []metric.AddOption
	plainRec []metric.RecordOption
	// refusedLimited is the options of a refusal of reason "limited";
	// refusedError and failed, of a refusal of reason "error" and of a
	// store failure, by errorType.
	refusedLimited []metric.AddOption
	refusedError   [len(errorTypeNames)][]metric.AddOption
	failed         [len(errorTypeNames)][]metric.AddOption

	// base is plain's attributes, which the sets by status extend.
	base []attribute.KeyValue
	// statuses maps a status to its options: a copy-on-write map, read
	// without a lock.
	statuses atomic.Pointer[map[int][]metric.AddOption]
	mu       sync.Mutex // serialises writers of statuses
}

// NewOutboundObserver returns a func(outbound.Event) for
// outbound.Config.Observer that records the Upstream's Events to
// OpenTelemetry instruments of a meter of mp named ScopeName:
//
//   - ratelimit.outbound.wait.duration, a Histogram (s, WaitBuckets): how
//     long each call that waited (outbound.Waited) waited before it was
//     sent, for the limiter or for a pause. A call that did not wait
//     records nothing, and a refused call's wait is not recorded here.
//   - ratelimit.outbound.refusals, a Counter ({call}): the calls not sent
//     (outbound.Refused), by ratelimit.outbound.reason: "limited" when
//     the error wraps outbound.ErrLimited (the wait would have passed
//     Config.MaxWait or the call's deadline), else "error", with
//     error.type as NewHooks classifies errors ("canceled" for a context
//     that ended during a wait, "backend" for a Redis limiter that
//     failed).
//   - ratelimit.outbound.upstream_limited, a Counter ({answer}): the
//     answers by which the upstream refused a call for its limit
//     (outbound.UpstreamLimited), by http.response.status_code.
//   - ratelimit.outbound.pauses, a Counter ({pause}), and
//     ratelimit.outbound.pause.duration, a Histogram (s, PauseBuckets):
//     the pauses answers set (outbound.Paused), already bounded by
//     Config.MaxPause. With a shared Store, a pause holds for the whole
//     fleet, but only the replica that read the answer records it.
//   - ratelimit.outbound.learned, a Counter ({limit}): the changes of the
//     limit the limiter applies that an answer made, once each
//     (outbound.Learned). The limit itself is not recorded: see below.
//   - ratelimit.outbound.retries, a Counter ({retry}): the calls sent
//     again after the upstream refused them (outbound.Retried), by
//     http.response.status_code, the status of the answer that refused.
//   - ratelimit.outbound.store.failures, a Counter ({failure}): the
//     failures of the Upstream's Store (outbound.StoreFailed), by
//     error.type; the calls went on by the limiter alone.
//   - ratelimit.outbound.settle.failures, a Counter ({failure}): the
//     settles of a call's true cost that failed (outbound.SettleFailed),
//     by error.type; the calls kept the units they took.
//
// Every measurement carries the options' WithAttributes, and
// ratelimit.limiter when WithLimiterName names the upstream: give each
// Upstream an observer of its own, named for it, to tell upstreams apart.
// The partition of an Event is never an attribute: partitions may be
// unbounded (per route, per credential) or secret. For the same reason no
// gauge holds the learned limit: without the partition, one gauge would
// show whichever partition spoke last.
//
// The observer allocates nothing once a status has been seen, starts no
// goroutine, and is safe for concurrent use. Events of a kind it does not
// know are ignored. A nil mp, a bad option or an instrument mp cannot
// create is an error.
func NewOutboundObserver(mp metric.MeterProvider, opts ...Option) (func(outbound.Event), error) {
	if mp == nil {
		return nil, errors.New("otelratelimit: NewOutboundObserver: nil MeterProvider")
	}
	var cfg config
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("otelratelimit: NewOutboundObserver: option %d is nil", i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	o := &outboundObserver{}
	if err := o.instruments(mp.Meter(ScopeName)); err != nil {
		return nil, fmt.Errorf("otelratelimit: %w", err)
	}
	o.base = append([]attribute.KeyValue(nil), cfg.attrs...)
	if cfg.limiter != "" {
		o.base = append(o.base, LimiterKey.String(cfg.limiter))
	}
	plain := attribute.NewSet(o.base...)
	o.plain = []metric.AddOption{metric.WithAttributeSet(plain)}
	o.plainRec = []metric.RecordOption{metric.WithAttributeSet(plain)}
	o.refusedLimited = o.addOptions(ReasonKey.String(reasonLimited))
	for t := range errorTypeNames {
		var kvs []attribute.KeyValue
		if errorType(t) != noError {
			kvs = append(kvs, ErrorTypeKey.String(errorTypeNames[t]))
		}
		o.refusedError[t] = o.addOptions(append(kvs, ReasonKey.String(reasonError))...)
		o.failed[t] = o.addOptions(kvs...)
	}
	o.statuses.Store(&map[int][]metric.AddOption{})
	return o.observe, nil
}

// instruments creates o's instruments with meter.
func (o *outboundObserver) instruments(meter metric.Meter) error {
	var err error
	if o.waits, err = meter.Float64Histogram(OutboundWaitName,
		metric.WithUnit("s"),
		metric.WithDescription("Time an outbound call waited before it was sent, for the limiter or a pause."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...),
	); err != nil {
		return err
	}
	counters := []struct {
		c                 *metric.Int64Counter
		name, unit, descr string
	}{
		{&o.refusals, OutboundRefusalsName, "{call}", "Outbound calls not sent, by reason: limited (the wait allowed was too short) or error."},
		{&o.limited, OutboundUpstreamLimitedName, "{answer}", "Answers by which the upstream refused a call for its limit, by status."},
		{&o.pauses, OutboundPausesName, "{pause}", "Pauses the upstream's answers set."},
		{&o.learned, OutboundLearnedName, "{limit}", "Changes of the limit the limiter applies that upstreams' answers made."},
		{&o.retries, OutboundRetriesName, "{retry}", "Outbound calls sent again after the upstream refused them, by the status that refused."},
		{&o.storeFailures, OutboundStoreFailuresName, "{failure}", "Failures of the store of what upstreams taught."},
		{&o.settleFailed, OutboundSettleFailuresName, "{failure}", "Settles of an outbound call's true cost that failed."},
	}
	for _, c := range counters {
		if *c.c, err = meter.Int64Counter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.descr)); err != nil {
			return err
		}
	}
	o.pauseDuration, err = meter.Float64Histogram(OutboundPauseName,
		metric.WithUnit("s"),
		metric.WithDescription("Pauses the upstream's answers set."),
		metric.WithExplicitBucketBoundaries(PauseBuckets...),
	)
	return err
}

// addOptions returns the options of a measurement with o's base
// attributes and kvs.
func (o *outboundObserver) addOptions(kvs ...attribute.KeyValue) []metric.AddOption {
	all := append(append(make([]attribute.KeyValue, 0, len(o.base)+len(kvs)), o.base...), kvs...)
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(all...))}
}

// observe records e.
func (o *outboundObserver) observe(e outbound.Event) {
	ctx := context.Background()
	switch e.Kind {
	case outbound.Waited:
		// A clock stepped back can make a wait negative: it counts as 0.
		o.waits.Record(ctx, max(e.Wait, 0).Seconds(), o.plainRec...)
	case outbound.Refused:
		if errors.Is(e.Err, outbound.ErrLimited) {
			o.refusals.Add(ctx, 1, o.refusedLimited...)
		} else {
			o.refusals.Add(ctx, 1, o.refusedError[classify(e.Err)]...)
		}
	case outbound.UpstreamLimited:
		o.limited.Add(ctx, 1, o.status(e.Status)...)
	case outbound.Paused:
		o.pauses.Add(ctx, 1, o.plain...)
		o.pauseDuration.Record(ctx, max(e.Pause, 0).Seconds(), o.plainRec...)
	case outbound.Learned:
		o.learned.Add(ctx, 1, o.plain...)
	case outbound.Retried:
		o.retries.Add(ctx, 1, o.status(e.Status)...)
	case outbound.StoreFailed:
		o.storeFailures.Add(ctx, 1, o.failed[classify(e.Err)]...)
	case outbound.SettleFailed:
		o.settleFailed.Add(ctx, 1, o.failed[classify(e.Err)]...)
	}
}

// status returns the options of a measurement of an answer of status s,
// building them the first time s is seen (see Hooks.options).
func (o *outboundObserver) status(s int) []metric.AddOption {
	if opts, ok := (*o.statuses.Load())[s]; ok {
		return opts
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	sets := *o.statuses.Load()
	if opts, ok := sets[s]; ok {
		return opts
	}
	opts := o.addOptions(StatusKey.Int(s))
	if len(sets) < maxCached {
		grown := maps.Clone(sets)
		grown[s] = opts
		o.statuses.Store(&grown)
	}
	return opts
}
