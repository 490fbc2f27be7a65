package httplimit

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/adapt"
	"github.com/ratelimit-go/ratelimit/internal/keyclass"
)

// limitedHandler is what Middleware.Handler returns: m's limiting in front
// of next. It is immutable.
type limitedHandler struct {
	m    *Middleware
	next http.Handler
}

// ServeHTTP decides r and passes it to next or answers it:
//
//   - skipped (WithSkip): passed on, no fields;
//   - KeyFunc or CostFunc error, or a negative cost: the key-error answer
//     (401 for a missing credential whose error names a challenge, 400
//     for one that names none and for the client's other mistakes,
//     500 for the server's);
//   - a key the limiter refuses as too long (ratelimit.ErrInvalidKey): the
//     key-error answer (400), never passed on;
//   - allowed: fields set, passed on, and adjusted after next returns as
//     WithRefund and WithSettle say, unless the Decision's Source says its
//     backend did not answer (a Guard's FailOpen, say); under WithLeases,
//     the lease that holds its units is extended while next runs and
//     released once it has returned or panicked;
//   - denied: fields and Retry-After set, 429 (or the WithDeniedHandler);
//   - cost above the limit: RateLimit-Limit and RateLimit-Policy set, 413;
//   - an error of a ratelimit.Shadow that does not enforce (its Decision's
//     Source is FromShadow): the WithOnError hook, then passed on without
//     fields, or 503 with Retry-After under WithFailClosed;
//   - a failure of the limiter's backend: the WithOnError hook, then passed
//     on without fields, or 503 with Retry-After under WithFailClosed;
//   - any other limiter error (a PolicyFunc that failed, say): the
//     WithOnError hook, then 503 with Retry-After, or, under
//     WithPolicyErrorsPass without WithFailClosed, passed on without
//     fields;
//   - let through by a shadowing limiter against a denial: fields set as
//     allowed, RateLimit-Shadow too under WithShadowHeader, passed on and
//     never adjusted.
//
// Every case but the skipped one is told to the WithObserver, once, before
// the answer is written or next runs. The WithOnError hook, or without
// one the log (see WithLogger), gets the limiter errors.
func (h *limitedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if m.skip != nil && m.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	key, err := m.key(r)
	if err != nil {
		m.answerKeyError(w, r, err, &m.replies.badKey)
		return
	}
	cost := 1
	if m.cost != nil {
		if cost, err = m.cost(r); err == nil && cost < 0 {
			err = fmt.Errorf("httplimit: CostFunc returned %d: %w", cost, ratelimit.ErrInvalidCost)
		}
		if err != nil {
			m.answerKeyError(w, r, err, &m.replies.badCost)
			return
		}
	}
	h.serve(w, r, key, cost)
}

// serve is ServeHTTP's decision, through the limiter's Decide (or
// a Decision of its Allow for a limiter of another package), or, under
// WithLeases, through the limiter's Acquire. The fields, and the
// problem document of a denial, are those of the policy that bound it,
// with every policy that applied in RateLimit-Policy; an index that names
// no policy is a limiter error. A request a ratelimit.Shadow let through
// against a denial took nothing, so it is passed on without being tracked
// for an adjustment, and carries RateLimit-Shadow under WithShadowHeader.
// A request refused here (429, 413, 503) tells the Middlewares around this
// one, which then give back what it took from them.
//
// cost is the request's cost, 1 or the CostFunc's; a request of cost 0
// takes 1 all the same (see WithCost), which it gives back after its
// handler under WithRefund or WithSettle.
func (h *limitedHandler) serve(w http.ResponseWriter, r *http.Request, key string, cost int) {
	m := h.m
	n := max(cost, 1) // the units the request takes
	var d ratelimit.Decision
	var err error
	var lease ratelimit.Lease
	switch {
	case m.leases:
		lease, d, err = adapt.Acquire(r.Context(), m.limiter, key, n)
		if lease.Held() && (err != nil || !d.Allowed || d.WouldDeny) {
			// Not a lease this request may hold: only an allowed
			// request's units are held, and no Acquirer of package
			// ratelimit grants any other.
			h.release(r, lease)
			lease = ratelimit.Lease{}
		}
	case m.decider != nil:
		d, err = m.decider.Decide(r.Context(), key, n)
	default:
		d, err = adapt.Decide(r.Context(), m.limiter, key, n)
	}
	if errors.Is(err, ratelimit.ErrInvalidKey) {
		// The request's key, not the limiter, is at fault: nothing was
		// taken, and the request must not pass unlimited.
		m.answerKeyError(w, r, err, &m.replies.longKey)
		return
	}
	if err != nil && !errors.Is(err, ratelimit.ErrCostExceedsLimit) {
		m.observe(r, d, err)
		h.failed(w, r, err, d.Source == ratelimit.FromShadow)
		return
	}
	policies, bound := d.Policies, d.PolicyIndex
	if d.Limit > 0 && (len(policies) == 0 || len(policies) == 1 && bound == 0 && policies[0].Limit <= 0) {
		// A Decider that names no policy with a limit: its Result's Limit,
		// as a limiter of another package is told, under
		// the name of the policy it names, if any, and without w.
		var name string
		if len(policies) == 1 {
			name = policies[0].Name
		}
		policies = []ratelimit.NamedPolicy{{Name: name, Policy: ratelimit.Policy{Limit: d.Limit}}}
	}
	policies, planned := m.planned(policies, key)
	if planned {
		// The observer and the handler (DecisionOf) see the plan's name,
		// as the client does.
		d.Policies, d.Policy = policies, policies[0]
	}
	f, ferr := m.formatFor(policies, planned)
	if ferr != nil {
		h.release(r, lease)
		m.observe(r, d, ferr)
		h.failed(w, r, ferr, false)
		return
	}
	p := f.part(bound)
	if p == nil {
		h.release(r, lease)
		if err != nil {
			err = fmt.Errorf("%w: httplimit: the limiter's Decision named policy %d of %d, and: %w", ratelimit.ErrInvalidConfig, bound, len(f.parts), err)
		} else {
			err = fmt.Errorf("%w: httplimit: the limiter's Decision named policy %d of %d", ratelimit.ErrInvalidConfig, bound, len(f.parts))
		}
		m.observe(r, d, err)
		h.failed(w, r, err, false)
		return
	}
	pk := m.partition.param(key)
	m.observe(r, d, err)
	switch {
	case err != nil: // ErrCostExceedsLimit
		// The limiter says nothing about the key's state on this path, so
		// only the fields that do not depend on it are set.
		m.fields.writeLimitOnly(w.Header(), p)
		refused(w, r)
		f.tooLargeBy(bound).write(w, r)
	case d.WouldDeny:
		m.fields.write(w.Header(), f, &d, false, pk)
		if m.shadowHeader {
			writeShadow(w.Header(), p.BeforeR, d.Enforced, pk)
		}
		h.next.ServeHTTP(w, m.withDecision(r, d))
	case d.Allowed:
		m.fields.write(w.Header(), f, &d, false, pk)
		if lease.Held() {
			h.serveLeased(w, r, d, key, n, cost, lease)
			return
		}
		if m.adjuster != nil && d.Source == ratelimit.FromBackend {
			// The time just after the decision: a fixed window gives units
			// back only to a window open by then (ratelimit.TakenAt).
			h.serveTracked(w, m.withDecision(r, d), key, n, cost, m.now(), m.settleBound(d))
			return
		}
		h.next.ServeHTTP(w, m.withDecision(r, d))
	default:
		m.fields.write(w.Header(), f, &d, true, pk)
		refused(w, r)
		m.answerDenied(w, r, d.Result, f.deniedBy(bound))
	}
}

// answerDenied answers a denied request: by the WithDeniedHandler, or with
// the 429 reply.
func (m *Middleware) answerDenied(w http.ResponseWriter, r *http.Request, res ratelimit.Result, reply *reply) {
	if m.denied != nil {
		m.denied(w, r, res)
		return
	}
	reply.write(w, r)
}

// failed handles a limiter error, after the WithOnError hook. A failure
// of the backend (ratelimit.ErrBackend, or an error of a limiter of
// another package) passes the request on without fields, or answers 503
// with Retry-After under WithFailClosed. Any other error (the limit of
// this request is unknown: a PolicyFunc that failed, a policy or keys the
// limiter refuses, a key whose state is not the limiter's) answers 503
// too, so that the limit is not lifted, unless WithPolicyErrorsPass lets
// such requests through (WithFailClosed answers 503 to every limiter
// error). Nothing was taken, so nothing is adjusted.
//
// shadowed says the error is that of a ratelimit.Shadow that does not
// enforce (its Decision's Source is FromShadow): it denies no one, unless
// WithFailClosed asks for every limiter error to.
func (h *limitedHandler) failed(w http.ResponseWriter, r *http.Request, err error, shadowed bool) {
	m := h.m
	if m.onError != nil {
		m.onError(r, err)
	}
	backend := backendFailure(err)
	if m.failClosed || !shadowed && !backend && !m.passUnknown {
		setRetryAfter(w.Header(), m.closedRetry)
		refused(w, r)
		if backend {
			m.replies.unavailable.write(w, r)
		} else {
			m.replies.unknown.write(w, r)
		}
		return
	}
	h.next.ServeHTTP(w, r)
}

// backendFailure reports whether err, a limiter's error, is a failure of
// its backend: of class ratelimit.ErrBackend, or of no class of package
// ratelimit (a limiter of another package). The caller's class wins over
// the backend's (a PolicyFunc's error that wraps ErrBackend is the
// caller's).
func backendFailure(err error) bool {
	return !errors.Is(err, ratelimit.ErrCaller) && !errors.Is(err, ratelimit.ErrCorruptState)
}

// answerKeyError answers a request whose key or cost could not be found,
// or whose key the limiter refused as too long: by the
// WithKeyErrorHandler; or by the error's class (see WithKeyErrorHandler):
// 401 with the challenge the error names for a missing credential; bad, a
// 400, for a missing credential whose error names no challenge and the
// client's other mistakes; or else 500.
func (m *Middleware) answerKeyError(w http.ResponseWriter, r *http.Request, err error, bad *reply) {
	m.observe(r, ratelimit.Decision{}, err)
	if m.keyError != nil {
		m.keyError(w, r, err)
		return
	}
	switch keyclass.Of(err, ErrInvalidRequest) {
	case keyclass.Unauthenticated:
		// A 401 must name a challenge (RFC 9110, section 15.5.2): without
		// one, the request is answered as the client's other mistakes.
		c := keyclass.Challenge(err)
		if c == "" {
			bad.write(w, r)
			return
		}
		w.Header()["Www-Authenticate"] = []string{c}
		m.replies.unauthenticated.write(w, r)
	case keyclass.Invalid:
		if c := keyclass.Challenge(err); c != "" {
			w.Header()["Www-Authenticate"] = []string{c}
		}
		bad.write(w, r)
	default:
		m.replies.keyError.write(w, r)
	}
}
