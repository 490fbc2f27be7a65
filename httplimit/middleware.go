package httplimit

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/errlog"
	"github.com/ratelimit-go/ratelimit/internal/leasehold"
	"github.com/ratelimit-go/ratelimit/internal/nilcheck"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// Middleware rate-limits the requests of the handlers it wraps with one
// Limiter, keyed by a KeyFunc.
//
// A Middleware is safe for concurrent use; one may wrap any number of
// handlers, which then share its limiter's keys. The zero value is not
// usable (its handlers answer 500); create one with NewMiddleware.
type Middleware struct {
	limiter      ratelimit.Limiter
	decider      ratelimit.Decider // the limiter, when it is one
	key          KeyFunc
	cost         CostFunc
	skip         func(*http.Request) bool
	onError      func(*http.Request, error) // WithOnError's, or logError
	observer     Observer
	planName     func(string) (string, bool) // WithPlanName's, or nil
	log          *errlog.Logger              // the default log of errors; nil under WithOnError
	failClosed   bool
	closedRetry  int64 // seconds, >= 1
	passUnknown  bool  // WithPolicyErrorsPass
	keyError     ErrorHandler
	denied       DeniedHandler
	fields       fieldWriter
	replies      replies
	shadowHeader bool
	quotaUnit    string       // WithQuotaUnit's, or ""
	partition    *partitioner // WithPartitionKey's, or nil

	// policyName and window name and size the policy of a limiter of
	// one, as WithPolicyName and WithPolicyWindow say.
	policyName    string
	policyNameSet bool
	window        time.Duration
	windowSet     bool
	formats       [formats]atomic.Pointer[format]
	nextFormat    atomic.Uint32

	// adjuster is the limiter, when a WithRefund or WithSettle option
	// adjusts requests after their handler; nil otherwise.
	adjuster    ratelimit.Adjuster
	refund      func(*http.Request, int) bool
	settle      bool
	tokens      *tokens // the adjustments' tokens; nil without adjuster
	decisionCtx bool    // WithDecisionContext
	adjustWait  time.Duration
	clock       ratelimit.Clock // nil: time.Now
	maxSettle   int             // WithMaxSettle's limits; 0: the default, < 0: unbounded

	// leases says each request's units are taken with the limiter's Acquire
	// and held for its handler's life (WithLeases); after starts the
	// timer that extends a held lease (time.AfterFunc; tests replace it).
	leases bool
	after  func(time.Duration, func()) leasehold.Timer
}

// NewMiddleware returns a Middleware that asks l about every request, under
// the key that key gives it.
//
// Every request is decided through the limiter's Decide, and the fields and
// answers come from its Decision alone: RateLimit-Limit and q are the Limit
// of the policy that bound the decision, w its Window rounded up to whole
// seconds, RateLimit-Policy lists every policy that applied, and
// RateLimit, RateLimit-Limit and the problem document of a denial name the
// policy that bound it. So the fields through a Guard, DenyCache or Shadow
// equal those of the bare limiter, also while a Guard's backend is down. A
// limiter of another package, which tells only a Result, is sent as one
// policy of the Result's Limit, without w unless WithPolicyWindow sets it;
// a limit that is unknown (0) is never sent.
//
// A limiter of one policy has it named as WithPolicyName says, or as the
// limiter names it ("default"). A limiter of several policies (a
// ratelimit.Composite, or a decorator around one) names each itself; such a
// limiter must report a limit > 0 for every policy and names that are
// printable ASCII, and WithPolicyName and WithPolicyWindow, which describe
// one policy, are errors with it.
//
// A limiter of requests in flight (a policy whose InFlight is set, such
// as a ratelimit.Concurrency's) needs WithLeases, under which each request
// is decided by the limiter's Acquire and holds its units while its handler
// runs.
//
// It returns an error wrapping ratelimit.ErrInvalidConfig for a nil l
// (including an interface holding a nil pointer), a nil key, a nil Option,
// an option given a value it cannot use, an option that does not apply to
// l (WithRefund or WithSettle with an l that is not a ratelimit.Adjuster,
// WithPolicyName or WithPolicyWindow with an l of several policies,
// WithPolicyWindow with an l of requests in flight), an l of requests in
// flight without WithLeases, or an l of several policies one of which
// cannot be sent.
//
// A request a ratelimit.Shadow let through against a denial (the
// Decision's WouldDeny) took nothing, so it is never refunded or settled,
// and under WithShadowHeader its response says it would have been denied.
func NewMiddleware(l ratelimit.Limiter, key KeyFunc, opts ...Option) (*Middleware, error) {
	return newMiddleware(l, key, false, opts)
}

// newMiddleware is NewMiddleware, and PerIP's when perIP is true: then it
// takes WithTrustedProxies and keys by the client's address past them, in
// place of key.
func newMiddleware(l ratelimit.Limiter, key KeyFunc, perIP bool, opts []Option) (*Middleware, error) {
	if isNil(l) {
		return nil, fmt.Errorf("%w: httplimit: nil limiter", ratelimit.ErrInvalidConfig)
	}
	if key == nil && !perIP {
		return nil, fmt.Errorf("%w: httplimit: nil KeyFunc", ratelimit.ErrInvalidConfig)
	}
	s := settings{policyName: defaultPolicyName, closedRetry: defaultClosedRetry, adjustWait: DefaultAdjustTimeout}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: httplimit: option %d is nil", ratelimit.ErrInvalidConfig, i)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	if s.trustedSet && !perIP {
		return nil, fmt.Errorf("%w: httplimit: WithTrustedProxies is PerIP's; with NewMiddleware, name the proxies in KeyByIP's IPConfig", ratelimit.ErrInvalidConfig)
	}
	if perIP {
		key = perIPKey(s.trusted)
	}
	m := &Middleware{
		limiter:       l,
		key:           key,
		cost:          s.cost,
		skip:          s.skip,
		onError:       s.onError,
		observer:      s.observer,
		planName:      s.planName,
		failClosed:    s.failClosed,
		closedRetry:   max(ratefields.CeilSeconds(s.closedRetry), 1),
		passUnknown:   s.passUnknown,
		keyError:      s.keyError,
		denied:        s.denied,
		fields:        fieldWriter{style: s.style},
		replies:       newReplies(),
		shadowHeader:  s.shadowHeader,
		quotaUnit:     s.quotaUnit,
		partition:     s.partition,
		policyName:    s.policyName,
		policyNameSet: s.policyNameSet,
		window:        s.window,
		windowSet:     s.windowSet,
		refund:        s.refund,
		settle:        s.settle,
		decisionCtx:   s.decisionCtx,
		adjustWait:    s.adjustWait,
		clock:         s.clock,
		maxSettle:     s.maxSettle,
		leases:        s.leases,
		after:         leasehold.AfterFunc,
	}
	if m.onError == nil {
		m.log = newLog(m, s.logger)
		m.onError = m.logError
	}
	m.decider, _ = l.(ratelimit.Decider)
	if err := m.setAdjuster(l); err != nil {
		return nil, err
	}
	if err := m.checkPolicies(); err != nil {
		return nil, err
	}
	return m, nil
}

// checkPolicies reads the limiter's policies once, for the key "" (a
// PolicyFunc sees that one call, and its error is ignored): a policy of
// requests in flight needs WithLeases and refuses WithPolicyWindow;
// several policies refuse WithPolicyName and WithPolicyWindow, and must
// all be sendable. The policies of each request are checked again when first
// seen.
func (m *Middleware) checkPolicies() error {
	if m.decider == nil {
		return nil
	}
	policies, err := m.decider.Policies(context.Background(), "")
	if i := leasehold.InFlightIndex(policies); i >= 0 {
		// Policies may come with an error (a PolicyFunc's): a
		// concurrency limiter still reports its policy in flight.
		switch {
		case !m.leases:
			return fmt.Errorf("%w: httplimit: the limiter (%T) limits requests in flight (policy %q): build the Middleware WithLeases, so that each request holds its units only while its handler runs; without it, every request would hold them for the policy's whole lease TTL", ratelimit.ErrInvalidConfig, m.limiter, policies[i].Name)
		case m.windowSet:
			return fmt.Errorf("%w: httplimit: WithPolicyWindow sets w, which a policy of requests in flight (%q of %T) does not have", ratelimit.ErrInvalidConfig, policies[i].Name, m.limiter)
		}
	}
	if err != nil || len(policies) < 2 {
		return nil
	}
	switch {
	case m.planName != nil:
		return fmt.Errorf("%w: httplimit: WithPlanName names a limiter's one policy; this limiter (%T) has %d, named by itself", ratelimit.ErrInvalidConfig, m.limiter, len(policies))
	case m.policyNameSet:
		return fmt.Errorf("%w: httplimit: WithPolicyName names a limiter's one policy; this limiter (%T) has %d, named by itself", ratelimit.ErrInvalidConfig, m.limiter, len(policies))
	case m.windowSet:
		return fmt.Errorf("%w: httplimit: WithPolicyWindow sets a limiter's one policy window; this limiter (%T) has %d policies, and reports the window of each", ratelimit.ErrInvalidConfig, m.limiter, len(policies))
	}
	_, err = m.formatFor(policies, false)
	return err
}

// setAdjuster keeps l as the Adjuster that WithRefund or WithSettle needs,
// with the tokens of its adjustments, or returns an error when they are
// set and l is not one.
func (m *Middleware) setAdjuster(l ratelimit.Limiter) error {
	if m.refund == nil && !m.settle {
		return nil
	}
	a, ok := l.(ratelimit.Adjuster)
	if !ok {
		option := "WithRefund"
		if m.refund == nil {
			option = "WithSettle"
		}
		return fmt.Errorf("%w: httplimit: %s needs a limiter that can give units back, a ratelimit.Adjuster; %T is not one", ratelimit.ErrInvalidConfig, option, l)
	}
	m.adjuster, m.tokens = a, newTokens()
	return nil
}

// Handler returns a handler that rate-limits requests and passes those
// allowed to next. It starts nothing and may be called any number of times.
//
// A nil next, a nil m or an m not made by NewMiddleware is a programming
// error that Handler cannot return, so the handler it returns answers every
// request 500 Internal Server Error without asking the limiter, which makes
// the mistake plain on the first request.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	switch {
	case m == nil || m.limiter == nil || m.key == nil:
		return brokenHandler("httplimit: Middleware not made by NewMiddleware")
	case isNil(next):
		return brokenHandler("httplimit: nil next handler")
	}
	return &limitedHandler{m: m, next: next}
}

// brokenHandler answers every request 500 with its text: the handler of a
// Middleware that cannot work.
type brokenHandler string

// ServeHTTP answers 500 Internal Server Error.
func (b brokenHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, string(b), http.StatusInternalServerError)
}

// isNil reports whether v is nil or an interface holding a nil pointer.
func isNil(v any) bool { return nilcheck.IsNil(v) }

// now returns the time of a decision, for ratelimit.TakenAt.
func (m *Middleware) now() time.Time {
	if m.clock != nil {
		return m.clock.Now()
	}
	return time.Now()
}
