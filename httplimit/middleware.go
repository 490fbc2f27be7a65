package httplimit

import (
	"fmt"
	"net/http"

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
// It returns an error wrapping ratelimit.ErrInvalidConfig for a nil l
// (including an interface holding a nil pointer), a nil key, a nil Option or
// an option given a value it cannot use.
func NewMiddleware(l ratelimit.Limiter, key KeyFunc, opts ...Option) (*Middleware, error) {
	if isNil(l) {
		return nil, fmt.Errorf("%w: httplimit: nil limiter", ratelimit.ErrInvalidConfig)
	}
	if key == nil {
		return nil, fmt.Errorf("%w: httplimit: nil KeyFunc", ratelimit.ErrInvalidConfig)
	}
	s := settings{policyName: defaultPolicyName, closedRetry: defaultClosedRetry}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: httplimit: option %d is nil", ratelimit.ErrInvalidConfig, i)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	policy, hasPolicy := ratelimit.PolicyOf(l)
	w, hasW := policyWindow(l, policy, hasPolicy, &s)
	beforeQ, afterQ, beforeR := policyParts(s.policyName, w, hasW)
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
		fields:      fieldWriter{style: s.style, beforeQ: beforeQ, afterQ: afterQ, beforeR: beforeR},
		replies:     newReplies(s.policyName),
	}
	if hasPolicy {
		m.fields.fixLimit(policy.Limit)
	}
	return m, nil
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
