package httplimit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/nilcheck"
)

// Middleware rate-limits the requests of the handlers it wraps with one
// Limiter, keyed by a KeyFunc.
//
// A Middleware is immutable and safe for concurrent use; one may wrap any
// number of handlers, which then share its limiter's keys. The zero value is
// not usable (its handlers answer 500); create one with NewMiddleware.
type Middleware struct {
	limiter     ratelimit.Limiter
	key         KeyFunc
	cost        CostFunc
	skip        func(*http.Request) bool
	onError     func(*http.Request, error)
	failClosed  bool
	closedRetry int64 // seconds, >= 1
	keyError    ErrorHandler
	denied      DeniedHandler
	fields      fieldWriter
	replies     replies

	// multi decides through AllowBound when the limiter has several
	// policies; nil otherwise.
	multi ratelimit.MultiPolicy

	// shadow decides through AllowShadow when the limiter is a
	// ratelimit.ShadowLimiter; nil otherwise. shadowHeader is
	// WithShadowHeader.
	shadow       ratelimit.ShadowLimiter
	shadowHeader bool

	// adjuster is the limiter, when a WithRefund or WithSettle option
	// adjusts requests after their handler; nil otherwise. sourced is the
	// limiter too, when it is also a ratelimit.SourceLimiter, which says
	// whether its backend answered (only then are units adjusted).
	adjuster   ratelimit.Adjuster
	sourced    ratelimit.SourceLimiter
	refund     func(*http.Request, int) bool
	settle     bool
	adjustWait time.Duration
	clock      ratelimit.Clock // nil: time.Now

	// keyed gives each request's policy, when the limiter (of one policy)
	// chooses it per key (ratelimit.PolicyFuncOf) and WithPolicyWindow did
	// not fix w; nil otherwise.
	keyed *keyedFields
}

// NewMiddleware returns a Middleware that asks l about every request, under
// the key that key gives it.
//
// The policy is read from l once, here: when l reports one
// (ratelimit.PolicyOf: every limiter of package ratelimit, and Guard and
// DenyCache, which forward their backend's), RateLimit-Limit and q are its
// Limit on every response, and w its Window, rounded up to whole seconds; so
// the fields through Guard and DenyCache equal those of the bare limiter,
// also while its backend is down. Otherwise the limit is each Result's, and
// w is learned from a FillTime() or Window() time.Duration method, or left
// out; a limit that is unknown (0) is never sent. WithPolicyWindow sets w
// in any case.
//
// When l has several policies (a ratelimit.MultiPolicy whose Policies are
// two or more: a Composite, or a Guard or DenyCache around one), every
// request is decided through AllowBound, RateLimit-Policy lists every
// policy under its name, in order, and RateLimit, RateLimit-Limit and the
// problem document of a denial name the policy that bound the decision (see
// the package documentation). Such an l must report a limit > 0 for every
// policy, and a name that is printable ASCII; WithPolicyName and
// WithPolicyWindow, which describe one policy, are errors with it. A
// MultiPolicy with one policy is a single-policy limiter whose policy is
// named as it says (Guard and DenyCache call the one policy of a
// single-policy backend "default"), unless WithPolicyName renames it.
//
// It returns an error wrapping ratelimit.ErrInvalidConfig for a nil l
// (including an interface holding a nil pointer), a nil key, a nil Option,
// an option given a value it cannot use, an option that does not apply to
// l (WithRefund or WithSettle with an l that is not a ratelimit.Adjuster,
// WithShadowHeader with an l that is not a ratelimit.ShadowLimiter,
// WithPolicyName or WithPolicyWindow with an l of several policies), or an
// l of several policies one of which cannot be sent.
//
// When l is a ratelimit.ShadowLimiter (a ratelimit.Shadow), every request
// is decided through AllowShadow, so that a request let through against a
// denial is known: it took nothing, so it is never refunded or settled,
// and under WithShadowHeader its response says it would have been denied.
func NewMiddleware(l ratelimit.Limiter, key KeyFunc, opts ...Option) (*Middleware, error) {
	if isNil(l) {
		return nil, fmt.Errorf("%w: httplimit: nil limiter", ratelimit.ErrInvalidConfig)
	}
	if key == nil {
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
	multi, policies, single, err := multiPolicies(l)
	if err != nil {
		return nil, err
	}
	m := &Middleware{
		limiter:     l,
		key:         key,
		cost:        s.cost,
		skip:        s.skip,
		onError:     s.onError,
		failClosed:  s.failClosed,
		closedRetry: max(ceilSeconds(s.closedRetry), 1),
		keyError:    s.keyError,
		denied:      s.denied,
		multi:       multi,
		refund:      s.refund,
		settle:      s.settle,
		adjustWait:  s.adjustWait,
		clock:       s.clock,
	}
	if err := m.setAdjuster(l); err != nil {
		return nil, err
	}
	if err := m.setShadow(l, s.shadowHeader); err != nil {
		return nil, err
	}
	if multi != nil {
		if err := m.setPolicies(policies, &s); err != nil {
			return nil, err
		}
		return m, nil
	}

	policy, hasPolicy := ratelimit.PolicyOf(l)
	if single != nil && !s.policyNameSet {
		if err := checkPolicyName(single.Name); err != nil {
			return nil, fmt.Errorf("%w (the limiter's policy)", err)
		}
		s.policyName = single.Name
	}
	if single != nil && single.Limit > 0 {
		policy, hasPolicy = single.Policy, true
		policy.Window = max(policy.Window, 0)
	}
	w, hasW := policyWindow(l, policy, hasPolicy, &s)
	beforeQ, afterQ, beforeR := policyParts(s.policyName, w, hasW)
	m.fields = fieldWriter{style: s.style, beforeQ: beforeQ, afterQ: afterQ, beforeR: beforeR}
	m.replies = newReplies(s.policyName)
	if pf := ratelimit.PolicyFuncOf(l); pf != nil {
		// Each key's own limit, as the Result says it, with the key's own
		// window unless WithPolicyWindow set one: then the fields are those
		// of the Result's limit.
		if !s.windowSet {
			m.keyed = &keyedFields{policies: pf, name: s.policyName}
		}
		return m, nil
	}
	if hasPolicy {
		m.fields.fixLimit(policy.Limit)
	}
	return m, nil
}

// setAdjuster keeps l as the Adjuster that WithRefund or WithSettle needs,
// or returns an error when they are set and l is not one.
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
	m.adjuster = a
	m.sourced, _ = l.(ratelimit.SourceLimiter)
	return nil
}

// setShadow keeps l as the ShadowLimiter it decides through when it is
// one, or returns an error when header (WithShadowHeader) is set and l is
// not one.
func (m *Middleware) setShadow(l ratelimit.Limiter, header bool) error {
	if sl, ok := l.(ratelimit.ShadowLimiter); ok && !isNil(sl) {
		m.shadow, m.shadowHeader = sl, header
		return nil
	}
	if header {
		return fmt.Errorf("%w: httplimit: WithShadowHeader needs a limiter that can say which requests it let through against a denial, a ratelimit.ShadowLimiter such as a ratelimit.Shadow given as it is; %T is not one", ratelimit.ErrInvalidConfig, l)
	}
	return nil
}

// setPolicies sets up the fields and answers of a limiter with the several
// policies policies, which WithPolicyName and WithPolicyWindow cannot
// describe.
func (m *Middleware) setPolicies(policies []ratelimit.NamedPolicy, s *settings) error {
	switch {
	case s.policyNameSet:
		return fmt.Errorf("%w: httplimit: WithPolicyName names a limiter's one policy; this limiter (%T) has %d, named by itself", ratelimit.ErrInvalidConfig, m.limiter, len(policies))
	case s.windowSet:
		return fmt.Errorf("%w: httplimit: WithPolicyWindow sets a limiter's one policy window; this limiter (%T) has %d policies, and reports the window of each", ratelimit.ErrInvalidConfig, m.limiter, len(policies))
	}
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = p.Name
	}
	m.fields = fieldWriter{style: s.style}
	m.fields.setPolicies(policies)
	m.replies = newReplies(policies[0].Name)
	m.replies.setPolicies(names)
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
