package promratelimit

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/keyclass"
)

// DurationBuckets are the default bucket boundaries of
// ratelimit_decision_duration_seconds, in seconds: from 1 µs (in-process
// decisions take well under it) to 250 ms (a Redis round trip in trouble).
var DurationBuckets = []float64{
	0.000001, 0.000005, 0.00001, 0.000025, 0.00005,
	0.0001, 0.00025, 0.0005, 0.001, 0.0025,
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
}

// RetryAfterBuckets are the default bucket boundaries of
// ratelimit_retry_after_seconds, in seconds: from 10 ms to an hour.
var RetryAfterBuckets = []float64{0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600}

// DefaultMaxRoutes is how many route values Observe keeps apart by
// default (see WithMaxRoutes).
const DefaultMaxRoutes = 100

// OtherRoute is the route label of the requests whose route came after
// the first WithMaxRoutes distinct ones.
const OtherRoute = "_other"

// DefaultBreaker is the breaker label of a Hooks that Breaker did not name.
const DefaultBreaker = "default"

// Option configures a Hooks (NewHooks) or an outbound observer
// (NewOutboundObserver); each option says which it configures, and the
// other constructor refuses it.
type Option func(*config) error

type config struct {
	duration   []float64
	retryAfter []float64
	maxRoutes  int

	// outbound is set when the options are given to NewOutboundObserver
	// rather than NewHooks.
	outbound bool
	// waits, pauses and limiter configure NewOutboundObserver.
	waits   []float64
	pauses  []float64
	limiter string
}

// hooksOnly returns the error of an option of NewHooks given to
// NewOutboundObserver, nil for one given to NewHooks.
func (c *config) hooksOnly(option string) error {
	if c.outbound {
		return fmt.Errorf("promratelimit: %s is an option of NewHooks, not of NewOutboundObserver", option)
	}
	return nil
}

// WithDurationBuckets replaces DurationBuckets, the bucket boundaries of
// ratelimit_decision_duration_seconds, in seconds. They must be
// increasing; none is an error. It is an option of NewHooks:
// NewOutboundObserver refuses it.
func WithDurationBuckets(b ...float64) Option {
	return func(c *config) error {
		if err := c.hooksOnly("WithDurationBuckets"); err != nil {
			return err
		}
		if err := checkBuckets(b); err != nil {
			return fmt.Errorf("promratelimit: WithDurationBuckets: %w", err)
		}
		c.duration = b
		return nil
	}
}

// WithRetryAfterBuckets replaces RetryAfterBuckets, the bucket boundaries
// of ratelimit_retry_after_seconds, in seconds. They must be increasing;
// none is an error. It is an option of NewHooks: NewOutboundObserver
// refuses it.
func WithRetryAfterBuckets(b ...float64) Option {
	return func(c *config) error {
		if err := c.hooksOnly("WithRetryAfterBuckets"); err != nil {
			return err
		}
		if err := checkBuckets(b); err != nil {
			return fmt.Errorf("promratelimit: WithRetryAfterBuckets: %w", err)
		}
		c.retryAfter = b
		return nil
	}
}

// WithMaxRoutes sets how many distinct route values Observe keeps apart,
// DefaultMaxRoutes by default: the requests of every route seen after the
// first n are counted under OtherRoute, so that a route built from
// request data by mistake cannot make a series per request. n < 1 is an
// error. It is an option of NewHooks: NewOutboundObserver refuses it.
func WithMaxRoutes(n int) Option {
	return func(c *config) error {
		if err := c.hooksOnly("WithMaxRoutes"); err != nil {
			return err
		}
		if n < 1 {
			return fmt.Errorf("promratelimit: WithMaxRoutes: %d routes, want at least 1", n)
		}
		c.maxRoutes = n
		return nil
	}
}

// checkBuckets reports whether b is a usable list of bucket boundaries.
func checkBuckets(b []float64) error {
	if len(b) == 0 {
		return errors.New("no buckets")
	}
	for i := 1; i < len(b); i++ {
		if !(b[i] > b[i-1]) {
			return fmt.Errorf("bucket %d (%g) is not above bucket %d (%g)", i, b[i], i-1, b[i-1])
		}
	}
	return nil
}

// Hooks is a ratelimit.Hooks that records what the limiters and decorators
// report to it, and what Observe is told, as the Prometheus metrics listed
// in the package documentation. It also implements ratelimit.AdjustHooks
// (Refund, Settle, Reset, and a Lease's Release and Extend) and
// ratelimit.KeylessHooks: keys are never a label, and the limiters report
// none to it. A Hooks is safe for concurrent use. Create one with
// NewHooks; Breaker returns one that shares its metrics under another
// breaker label.
//
// A nil *Hooks and the zero Hooks, which no constructor returns, have no
// metrics: every method does nothing, Breaker returns another Hooks that
// records nothing, and HTTPObserver and GRPCObserver return observers
// that record nothing. They never panic, so a Hooks{} given to
// ratelimit.WithHooks by mistake loses the metrics, not the requests.
type Hooks struct {
	m *collectors
	// breaker is the breaker label of BreakerChanged.
	breaker string
}

var (
	_ ratelimit.Hooks        = (*Hooks)(nil)
	_ ratelimit.AdjustHooks  = (*Hooks)(nil)
	_ ratelimit.KeylessHooks = (*Hooks)(nil)
)

// collectors holds the metrics that a Hooks and those Breaker derives
// from it share.
type collectors struct {
	decisions   *prometheus.CounterVec
	units       *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	retryAfter  *prometheus.HistogramVec
	errs        *prometheus.CounterVec
	adjustments *prometheus.CounterVec
	adjustUnits *prometheus.CounterVec
	breakers    *prometheus.GaugeVec
	transitions *prometheus.CounterVec
	leases      *prometheus.GaugeVec
	requests    *prometheus.CounterVec

	routes routeSet
}

// NewHooks creates the metrics, registers them with reg and returns the
// Hooks that records to them. Nothing is registered anywhere else: pass
// prometheus.DefaultRegisterer to use the global registry, and wrap reg
// (prometheus.WrapRegistererWith, prometheus.WrapRegistererWithPrefix) to
// add constant labels or a prefix. A nil reg, a bad option, or a metric
// reg refuses (a second NewHooks on the same registry, or another
// collector of the same name) is an error, and then none of the metrics is
// left registered. For several Guards with a breaker each, create one
// Hooks and derive one per Guard with Breaker.
func NewHooks(reg prometheus.Registerer, opts ...Option) (*Hooks, error) {
	if reg == nil {
		return nil, errors.New("promratelimit: NewHooks: nil Registerer")
	}
	cfg := config{duration: DurationBuckets, retryAfter: RetryAfterBuckets, maxRoutes: DefaultMaxRoutes}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("promratelimit: NewHooks: option %d is nil", i)
		}
		if err := opt(&cfg); err != nil {
			return nil, err
		}
	}
	m := newCollectors(cfg)
	all := m.all()
	for i, c := range all {
		if err := reg.Register(c); err != nil {
			for _, done := range all[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("promratelimit: NewHooks: %w", err)
		}
	}
	return &Hooks{m: m, breaker: DefaultBreaker}, nil
}

// Breaker returns a Hooks that records to h's metrics, with name as the
// breaker label of its breaker changes. BreakerChanged is not told which
// Guard's breaker changed: to tell the breakers of several Guards apart,
// give each Guard a Hooks of its own from Breaker (its GuardConfig.Name is
// a good name), and a ratelimit.Breaker that Guards share one for its
// BreakerConfig.Hooks. The new breaker's series exist from now on, at 0
// until it opens (those of DefaultBreaker, from its first change only, as
// a Hooks that no Guard reports to has no breaker). Decisions keep the
// limiter label they report. An empty name is an error.
//
// On a nil or zero Hooks, Breaker returns a zero Hooks, which records
// nothing.
func (h *Hooks) Breaker(name string) (*Hooks, error) {
	if name == "" {
		return nil, errors.New("promratelimit: Breaker: empty name")
	}
	if h.off() {
		return &Hooks{breaker: name}, nil
	}
	b := &Hooks{m: h.m, breaker: name}
	b.initBreaker()
	return b, nil
}

// off reports whether h has no metrics to record to: a nil or zero Hooks,
// whose methods do nothing.
func (h *Hooks) off() bool { return h == nil || h.m == nil }

// initBreaker makes h's breaker series exist at 0, so that a scrape shows
// them before the breaker opens.
func (h *Hooks) initBreaker() {
	for _, s := range []ratelimit.BreakerState{ratelimit.BreakerOpen, ratelimit.BreakerHalfOpen} {
		h.m.breakers.WithLabelValues(h.breaker, s.String())
	}
}

// IgnoresKeys tells the limiters and decorators reporting to h that it
// never reads a key (see ratelimit.KeylessHooks).
func (*Hooks) IgnoresKeys() {}

// Decided counts ev by limiter, source and outcome, adds its cost to the
// units of its outcome, records its latency (a negative one as 0), the
// RetryAfter of a denial, and the type of an error. An ev whose Lease is
// held (an Acquire that granted a lease) adds 1 to the leases held by its
// limiter.
//
// An error that is the request's own mistake (see the outcome label in
// the package documentation: a bad cost, a cost above the limit, a key
// the limiter refuses) counts as outcome "rejected", any other as
// "error"; both count in ratelimit_errors_total.
//
// A denial a Shadow let through (WouldDeny, Source FromShadow) counts as
// denied, what the enforced limit would have answered, with the enforced
// denial's RetryAfter, although the caller got an allowed Result.
func (h *Hooks) Decided(ev ratelimit.Event) {
	if h.off() {
		return
	}
	m := h.m
	out := outcomeOf(ev.Decision, ev.Err)
	source := ev.Source.String()
	m.decisions.WithLabelValues(ev.Limiter, source, out).Inc()
	if ev.Cost > 0 {
		m.units.WithLabelValues(ev.Limiter, out).Add(float64(ev.Cost))
	}
	m.duration.WithLabelValues(ev.Limiter, source).Observe(seconds(ev.Latency))
	switch out {
	case outcomeDenied:
		m.retryAfter.WithLabelValues(ev.Limiter).Observe(seconds(ev.Enforced.RetryAfter))
	case outcomeError, outcomeRejected:
		m.errs.WithLabelValues(ev.Limiter, opDecide, errorType(ev.Err)).Inc()
	}
	if ev.Lease.Held() {
		m.leases.WithLabelValues(ev.Limiter).Inc()
	}
}

// BreakerChanged moves a breaker from one state to the other in
// ratelimit_breakers and counts the change.
func (h *Hooks) BreakerChanged(from, to ratelimit.BreakerState) {
	if h.off() {
		return
	}
	if from != ratelimit.BreakerClosed {
		h.m.breakers.WithLabelValues(h.breaker, from.String()).Dec()
	}
	if to != ratelimit.BreakerClosed {
		h.m.breakers.WithLabelValues(h.breaker, to.String()).Inc()
	}
	h.m.transitions.WithLabelValues(h.breaker, to.String()).Inc()
}

// The outcome label's values.
const (
	outcomeAllowed = "allowed"
	outcomeDenied  = "denied"
	outcomeError   = "error"
	// outcomeRejected is an error that is the request's own mistake (see
	// rejected).
	outcomeRejected = "rejected"
)

// outcomeOf returns the outcome label of a call that decided d and
// returned err.
func outcomeOf(d ratelimit.Decision, err error) string {
	switch {
	case err != nil && rejected(err):
		return outcomeRejected
	case err != nil:
		return outcomeError
	case d.Allowed && !d.WouldDeny:
		return outcomeAllowed
	}
	return outcomeDenied
}

// rejected reports whether err is the request's own mistake, one that
// httplimit answers 401, 400 or 413 and grpclimit Unauthenticated,
// InvalidArgument or ResourceExhausted without a retry: a missing or
// malformed credential, a request httplimit cannot rate-limit as sent, a
// bad cost, a cost above the limit, or a key the limiter refuses. The
// other errors of class ratelimit.ErrCaller are not: a limiter never built
// (ErrInvalidConfig), a PolicyFunc that failed (ErrPolicy, perhaps its
// store down), keys one store cannot serve together (ErrKeysApart) are
// the server's, and fail every request alike.
// The classes are the ones httplimit and grpclimit answer by
// (internal/keyclass), and a cost above the limit.
func rejected(err error) bool {
	return errors.Is(err, ratelimit.ErrCostExceedsLimit) ||
		keyclass.Of(err, httplimit.ErrInvalidRequest) != keyclass.Server
}

// seconds is d in seconds, 0 for a negative d.
func seconds(d time.Duration) float64 { return max(d, 0).Seconds() }
