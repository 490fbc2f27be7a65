package promratelimit

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit/outbound"
)

// The names of the metrics of NewOutboundObserver (see the package
// documentation for their labels).
const (
	OutboundWaitName            = "ratelimit_outbound_wait_seconds"
	OutboundRefusalsName        = "ratelimit_outbound_refusals_total"
	OutboundUpstreamLimitedName = "ratelimit_outbound_upstream_limited_total"
	OutboundPauseName           = "ratelimit_outbound_pause_seconds"
	OutboundLearnedName         = "ratelimit_outbound_learned_total"
	OutboundRetriesName         = "ratelimit_outbound_retries_total"
	OutboundStoreFailuresName   = "ratelimit_outbound_store_failures_total"
	OutboundSettleFailuresName  = "ratelimit_outbound_settle_failures_total"
)

// WaitBuckets are the default bucket boundaries of
// ratelimit_outbound_wait_seconds, in seconds: from 1 ms (a limiter's
// next unit at a high rate) to 60 s (outbound.DefaultMaxWait).
var WaitBuckets = []float64{
	0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60,
}

// PauseBuckets are the default bucket boundaries of
// ratelimit_outbound_pause_seconds, in seconds: from 100 ms to 15 minutes
// (outbound.DefaultMaxPause, which bounds a pause).
var PauseBuckets = []float64{
	0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 900,
}

// DefaultOutboundLimiter is the limiter label of the metrics of a
// NewOutboundObserver that WithLimiterName did not name.
const DefaultOutboundLimiter = "default"

// MaxStatuses is how many distinct status labels a NewOutboundObserver
// keeps apart in each of ratelimit_outbound_upstream_limited_total and
// ratelimit_outbound_retries_total: the answers of every status seen
// after the first MaxStatuses, and of a status outside 100 to 599, are
// counted under OtherStatus.
const MaxStatuses = 16

// OtherStatus is the status label of the answers whose status came after
// the first MaxStatuses distinct ones, or is no HTTP status.
const OtherStatus = "_other"

// The reason label's values of ratelimit_outbound_refusals_total.
const (
	reasonLimited = "limited"
	reasonError   = "error"
)

// outboundOnly returns the error of an option of NewOutboundObserver
// given to NewHooks, nil for one given to NewOutboundObserver.
func (c *config) outboundOnly(option string) error {
	if !c.outbound {
		return fmt.Errorf("promratelimit: %s is an option of NewOutboundObserver, not of NewHooks", option)
	}
	return nil
}

// WithWaitBuckets replaces WaitBuckets, the bucket boundaries of
// ratelimit_outbound_wait_seconds, in seconds. They must be increasing;
// none is an error. It is an option of NewOutboundObserver: NewHooks
// refuses it.
func WithWaitBuckets(b ...float64) Option {
	return func(c *config) error {
		if err := c.outboundOnly("WithWaitBuckets"); err != nil {
			return err
		}
		if err := checkBuckets(b); err != nil {
			return fmt.Errorf("promratelimit: WithWaitBuckets: %w", err)
		}
		c.waits = b
		return nil
	}
}

// WithPauseBuckets replaces PauseBuckets, the bucket boundaries of
// ratelimit_outbound_pause_seconds, in seconds. They must be increasing;
// none is an error. It is an option of NewOutboundObserver: NewHooks
// refuses it.
func WithPauseBuckets(b ...float64) Option {
	return func(c *config) error {
		if err := c.outboundOnly("WithPauseBuckets"); err != nil {
			return err
		}
		if err := checkBuckets(b); err != nil {
			return fmt.Errorf("promratelimit: WithPauseBuckets: %w", err)
		}
		c.pauses = b
		return nil
	}
}

// WithLimiterName names the upstream a NewOutboundObserver records: the
// limiter label of all its metrics (DefaultOutboundLimiter without it).
// An outbound.Event names no upstream, so give each outbound.Upstream an
// observer of its own, named for it; the name of its limiter
// (ratelimit.WithName) joins its series to the limiter's decisions. An
// empty name, or one not valid UTF-8, is an error. It is an option of NewOutboundObserver:
// NewHooks, whose limiters name themselves, refuses it.
func WithLimiterName(name string) Option {
	return func(c *config) error {
		if err := c.outboundOnly("WithLimiterName"); err != nil {
			return err
		}
		if name == "" {
			return errors.New("promratelimit: WithLimiterName: empty name")
		}
		if !utf8.ValidString(name) {
			return fmt.Errorf("promratelimit: WithLimiterName: %q is not valid UTF-8", name)
		}
		c.limiter = name
		return nil
	}
}

// outboundObserver records an outbound.Upstream's Events.
type outboundObserver struct {
	waits   prometheus.Histogram
	pauses  prometheus.Histogram
	learned prometheus.Counter

	refusals       *prometheus.CounterVec
	storeFailures  *prometheus.CounterVec
	settleFailures *prometheus.CounterVec

	// refusedLimited is the series of a refusal for the limit;
	// refusedError, stored and settled, by error_type, those of a refusal
	// on an error and of the failures of the store and of settles.
	refusedLimited series
	refusedError   byErrorType
	stored         byErrorType
	settled        byErrorType

	limited statusSeries
	retries statusSeries
}

// NewOutboundObserver returns a func(outbound.Event) for
// outbound.Config.Observer that records the Upstream's Events as
// Prometheus metrics, which it registers with reg:
//
//   - ratelimit_outbound_wait_seconds, a histogram (WaitBuckets): how long
//     each call that waited (outbound.Waited) waited before it was sent,
//     for the limiter or for a pause. A call sent at once records nothing,
//     and a refused call's wait is not recorded here.
//   - ratelimit_outbound_refusals_total: the calls not sent
//     (outbound.Refused), by reason: "limited" when the error wraps
//     outbound.ErrLimited (the wait would have passed Config.MaxWait or
//     the call's deadline), with an empty error_type; else "error", with
//     error_type as for decisions ("canceled" for a context that ended
//     during a wait, "backend" for a Redis limiter that failed).
//   - ratelimit_outbound_upstream_limited_total: the answers by which the
//     upstream refused a call for its limit (outbound.UpstreamLimited), by
//     status.
//   - ratelimit_outbound_pause_seconds, a histogram (PauseBuckets): the
//     pauses answers set (outbound.Paused), already bounded by
//     Config.MaxPause; its _count counts them. With a shared Store, a
//     pause holds for the whole fleet, but only the replica that read the
//     answer records it.
//   - ratelimit_outbound_learned_total: the changes of the limit the
//     limiter applies that an answer made, once each (outbound.Learned).
//     The limit itself is not recorded: see below.
//   - ratelimit_outbound_retries_total: the calls sent again after the
//     upstream refused them (outbound.Retried), by status, that of the
//     answer that refused.
//   - ratelimit_outbound_store_failures_total: the failures of the
//     Upstream's Store (outbound.StoreFailed), by error_type; the calls
//     went on by the limiter alone.
//   - ratelimit_outbound_settle_failures_total: the settles of a call's
//     true cost that failed (outbound.SettleFailed), by error_type; the
//     calls kept the units they took.
//
// Every metric has the limiter label, WithLimiterName's name or
// DefaultOutboundLimiter. The first MaxStatuses distinct statuses are
// kept apart, the others counted as OtherStatus. The partition of an
// Event is never a label: partitions may be unbounded (per route, per
// credential) or secret. For the same reason no gauge holds the learned
// limit: without the partition, one gauge would show whichever partition
// spoke last.
//
// Registration is as NewHooks's: on reg and nowhere else. Observers of
// different names share one registry; a second observer of the same name
// on it is an error (prometheus.AlreadyRegisteredError), not a panic. A
// nil reg, a bad option or a metric reg refuses is an error, and then
// none of the metrics is left registered. NewOutboundObserver and
// NewHooks can share a registry.
//
// The observer allocates nothing once each series it records to exists,
// starts no goroutine and is safe for concurrent use. Events of a kind it
// does not know are ignored.
func NewOutboundObserver(reg prometheus.Registerer, opts ...Option) (func(outbound.Event), error) {
	if reg == nil {
		return nil, errors.New("promratelimit: NewOutboundObserver: nil Registerer")
	}
	cfg := config{outbound: true, waits: WaitBuckets, pauses: PauseBuckets, limiter: DefaultOutboundLimiter}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("promratelimit: NewOutboundObserver: option %d is nil", i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	o := newOutboundObserver(cfg)
	all := []prometheus.Collector{
		o.waits, o.refusals, o.limited.vec, o.pauses, o.learned,
		o.retries.vec, o.storeFailures, o.settleFailures,
	}
	for i, c := range all {
		if err := reg.Register(c); err != nil {
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("promratelimit: NewOutboundObserver: %w", err)
		}
	}
	return o.observe, nil
}

// newOutboundObserver returns the observer of cfg, its metrics not
// registered.
func newOutboundObserver(cfg config) *outboundObserver {
	labels := prometheus.Labels{"limiter": cfg.limiter}
	counter := func(name, help string, vars ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels}, vars)
	}
	histogram := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	o := &outboundObserver{
		waits: histogram(OutboundWaitName,
			"Time an outbound call waited before it was sent, for the limiter or a pause, by limiter.",
			cfg.waits),
		pauses: histogram(OutboundPauseName,
			"Pauses the upstream's answers set, by limiter.",
			cfg.pauses),
		learned: prometheus.NewCounter(prometheus.CounterOpts{Name: OutboundLearnedName, ConstLabels: labels,
			Help: "Changes of the limit the limiter applies that upstreams' answers made, by limiter."}),
		refusals: counter(OutboundRefusalsName,
			"Outbound calls not sent, by limiter, reason (limited: the wait allowed was too short; error) and error_type.",
			"reason", "error_type"),
		storeFailures: counter(OutboundStoreFailuresName,
			"Failures of the store of what upstreams taught, by limiter and error_type.",
			"error_type"),
		settleFailures: counter(OutboundSettleFailuresName,
			"Settles of an outbound call's true cost that failed, by limiter and error_type.",
			"error_type"),
		limited: statusSeries{vec: counter(OutboundUpstreamLimitedName,
			"Answers by which the upstream refused a call for its limit, by limiter and status.",
			"status")},
		retries: statusSeries{vec: counter(OutboundRetriesName,
			"Outbound calls sent again after the upstream refused them, by limiter and the status that refused.",
			"status")},
	}
	o.refusedLimited = series{vec: o.refusals, labels: []string{reasonLimited, ""}}
	o.refusedError = newByErrorType(o.refusals, reasonError)
	o.stored = newByErrorType(o.storeFailures)
	o.settled = newByErrorType(o.settleFailures)
	o.limited.init()
	o.retries.init()
	return o
}

// observe records e.
func (o *outboundObserver) observe(e outbound.Event) {
	switch e.Kind {
	case outbound.Waited:
		o.waits.Observe(seconds(e.Wait))
	case outbound.Refused:
		if errors.Is(e.Err, outbound.ErrLimited) {
			o.refusedLimited.inc()
		} else {
			o.refusedError.inc(e.Err)
		}
	case outbound.UpstreamLimited:
		o.limited.inc(e.Status)
	case outbound.Paused:
		o.pauses.Observe(seconds(e.Pause))
	case outbound.Learned:
		o.learned.Inc()
	case outbound.Retried:
		o.retries.inc(e.Status)
	case outbound.StoreFailed:
		o.stored.inc(e.Err)
	case outbound.SettleFailed:
		o.settled.inc(e.Err)
	}
}

// series is one series of a CounterVec, created on its first use, so
// that a scrape shows only the series that counted.
type series struct {
	vec    *prometheus.CounterVec
	labels []string
	c      atomic.Pointer[prometheus.Counter]
}

// inc adds 1 to s.
func (s *series) inc() {
	c := s.c.Load()
	if c == nil {
		// Callers that race here get the same child of the vec.
		child := s.vec.WithLabelValues(s.labels...)
		c = &child
		s.c.Store(c)
	}
	(*c).Inc()
}

// byErrorType holds the series of a CounterVec whose last label is
// error_type, after the values of prefix.
type byErrorType struct {
	vec    *prometheus.CounterVec
	prefix []string
	// series is read only: it holds every value of errorTypes.
	series map[string]*series
}

// newByErrorType returns the series of vec by error type, after the
// label values prefix.
func newByErrorType(vec *prometheus.CounterVec, prefix ...string) byErrorType {
	b := byErrorType{vec: vec, prefix: prefix, series: make(map[string]*series, len(errorTypes))}
	for _, t := range errorTypes {
		b.series[t] = &series{vec: vec, labels: append(slices.Clip(prefix), t)}
	}
	return b
}

// inc adds 1 to the series of err's error type.
func (b byErrorType) inc(err error) {
	t := errorType(err)
	if s, ok := b.series[t]; ok {
		s.inc()
		return
	}
	b.vec.WithLabelValues(append(slices.Clip(b.prefix), t)...).Inc() // a type errorTypes misses
}

// statusSeries holds the series of a CounterVec labelled by status: the
// first MaxStatuses distinct statuses, and OtherStatus.
type statusSeries struct {
	vec   *prometheus.CounterVec
	other series
	// seen maps a status to its series: a copy-on-write map, read without
	// a lock.
	seen atomic.Pointer[map[int]prometheus.Counter]
	mu   sync.Mutex // serialises writers of seen
}

// init prepares s, whose vec is set, for use.
func (s *statusSeries) init() {
	s.other = series{vec: s.vec, labels: []string{OtherStatus}}
	s.seen.Store(&map[int]prometheus.Counter{})
}

// inc adds 1 to the series of status.
func (s *statusSeries) inc(status int) {
	seen := *s.seen.Load()
	if c, ok := seen[status]; ok {
		c.Inc()
		return
	}
	if status < 100 || status > 599 || len(seen) >= MaxStatuses {
		s.other.inc()
		return
	}
	s.add(status).Inc()
}

// add returns the series of status, adding it to s.seen if there is
// still room, else returning OtherStatus's.
func (s *statusSeries) add(status int) prometheus.Counter {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := *s.seen.Load()
	if c, ok := seen[status]; ok {
		return c
	}
	if len(seen) >= MaxStatuses {
		return s.vec.WithLabelValues(OtherStatus)
	}
	grown := maps.Clone(seen)
	c := s.vec.WithLabelValues(strconv.Itoa(status))
	grown[status] = c
	s.seen.Store(&grown)
	return c
}
