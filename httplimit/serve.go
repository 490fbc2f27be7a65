package httplimit

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/ratelimit-go/ratelimit"
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
//   - KeyFunc or CostFunc error, or a negative cost: the key-error answer;
//   - allowed: fields set, passed on, and adjusted after next returns as
//     WithRefund and WithSettle say, unless a ratelimit.SourceLimiter says
//     its backend did not answer (a Guard's FailOpen, say);
//   - denied: fields and Retry-After set, 429 (or the WithDeniedHandler);
//   - cost above the limit: RateLimit-Limit and RateLimit-Policy set, 413;
//   - any other limiter error: the WithOnError hook, then passed on without
//     fields, or 503 with Retry-After under WithFailClosed;
//   - let through by a shadowing limiter against a denial: fields set as
//     allowed, RateLimit-Shadow too under WithShadowHeader, passed on and
//     never adjusted.
func (h *limitedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if m.skip != nil && m.skip(r) {
		h.next.ServeHTTP(w, r)
		return
	}
	key, err := m.key(r)
	if err != nil {
		m.answerKeyError(w, r, err)
		return
	}
	cost := 1
	if m.cost != nil {
		if cost, err = m.cost(r); err == nil && cost < 0 {
			err = fmt.Errorf("httplimit: CostFunc returned %d: %w", cost, ratelimit.ErrInvalidCost)
		}
		if err != nil {
			m.answerKeyError(w, r, err)
			return
		}
	}
	if m.shadow != nil {
		h.serveShadow(w, r, key, cost)
		return
	}
	if m.multi != nil {
		h.serveMulti(w, r, key, cost)
		return
	}

	var res ratelimit.Result
	source := ratelimit.FromBackend
	if m.sourced != nil {
		res, _, source, err = m.sourced.AllowSource(r.Context(), key, cost)
	} else {
		res, err = m.limiter.Allow(r.Context(), key, cost)
	}
	switch {
	case err == nil && res.Allowed:
		lv := m.limitValuesFor(r.Context(), key, res.Limit)
		m.fields.write(w.Header(), &lv, m.fields.beforeR, res, false)
		if m.adjuster != nil && source == ratelimit.FromBackend {
			// The time just after the decision: a fixed window gives units
			// back only to a window open by then (ratelimit.TakenAt).
			h.serveTracked(w, r, key, cost, m.now())
			return
		}
		h.next.ServeHTTP(w, r)
	case err == nil:
		lv := m.limitValuesFor(r.Context(), key, res.Limit)
		m.fields.write(w.Header(), &lv, m.fields.beforeR, res, true)
		m.answerDenied(w, r, res, &m.replies.denied)
	case errors.Is(err, ratelimit.ErrCostExceedsLimit):
		// The limiter says nothing about the key's state on this path, so
		// only the fields that do not depend on it are set.
		lv := m.limitValuesFor(r.Context(), key, res.Limit)
		m.fields.writeLimitOnly(w.Header(), &lv)
		m.replies.tooLarge.write(w, r)
	default:
		h.failed(w, r, err)
	}
}

// serveMulti is ServeHTTP's decision for a limiter of several policies,
// through AllowBound: the fields, and the problem document of a denial,
// are those of the policy that bound it. An index that names no policy is
// a limiter error.
func (h *limitedHandler) serveMulti(w http.ResponseWriter, r *http.Request, key string, cost int) {
	m := h.m
	var res ratelimit.Result
	var bound int
	var err error
	source := ratelimit.FromBackend
	if m.sourced != nil {
		res, bound, source, err = m.sourced.AllowSource(r.Context(), key, cost)
	} else {
		res, bound, err = m.multi.AllowBound(r.Context(), key, cost)
	}
	p := m.fields.part(bound)
	switch {
	case p == nil && err != nil:
		h.failed(w, r, fmt.Errorf("httplimit: the limiter's AllowBound answered policy %d of %d, and: %w", bound, len(m.fields.parts), err))
	case p == nil:
		h.failed(w, r, fmt.Errorf("httplimit: the limiter's AllowBound answered policy %d of %d", bound, len(m.fields.parts)))
	case err == nil && res.Allowed:
		m.fields.write(w.Header(), &p.limitValues, p.beforeR, res, false)
		if m.adjuster != nil && source == ratelimit.FromBackend {
			// The time just after the decision: a fixed window gives units
			// back only to a window open by then (ratelimit.TakenAt).
			h.serveTracked(w, r, key, cost, m.now())
			return
		}
		h.next.ServeHTTP(w, r)
	case err == nil:
		m.fields.write(w.Header(), &p.limitValues, p.beforeR, res, true)
		m.answerDenied(w, r, res, m.replies.deniedFor(bound))
	case errors.Is(err, ratelimit.ErrCostExceedsLimit):
		m.fields.writeLimitOnly(w.Header(), &p.limitValues)
		m.replies.tooLargeFor(bound).write(w, r)
	default:
		h.failed(w, r, err)
	}
}

// serveShadow is ServeHTTP's decision for a ratelimit.ShadowLimiter, of one
// policy or several, through AllowShadow: as ServeHTTP's or serveMulti's,
// except that a request let through against a denial took nothing, so it
// is passed on without being tracked for an adjustment, and carries
// RateLimit-Shadow under WithShadowHeader.
func (h *limitedHandler) serveShadow(w http.ResponseWriter, r *http.Request, key string, cost int) {
	m := h.m
	sr, err := m.shadow.AllowShadow(r.Context(), key, cost)
	var lv limitValues
	beforeR, denied, tooLarge := m.fields.beforeR, &m.replies.denied, &m.replies.tooLarge
	if m.multi != nil {
		p := m.fields.part(sr.Bound)
		if p == nil {
			if err != nil {
				h.failed(w, r, fmt.Errorf("httplimit: the limiter's AllowShadow answered policy %d of %d, and: %w", sr.Bound, len(m.fields.parts), err))
			} else {
				h.failed(w, r, fmt.Errorf("httplimit: the limiter's AllowShadow answered policy %d of %d", sr.Bound, len(m.fields.parts)))
			}
			return
		}
		lv, beforeR = p.limitValues, p.beforeR
		denied, tooLarge = m.replies.deniedFor(sr.Bound), m.replies.tooLargeFor(sr.Bound)
	} else {
		lv = m.limitValuesFor(r.Context(), key, sr.Limit)
	}
	switch {
	case err == nil && sr.WouldDeny:
		m.fields.write(w.Header(), &lv, beforeR, sr.Result, false)
		if m.shadowHeader {
			writeShadow(w.Header(), beforeR, sr.Backend)
		}
		h.next.ServeHTTP(w, r)
	case err == nil && sr.Allowed:
		m.fields.write(w.Header(), &lv, beforeR, sr.Result, false)
		if m.adjuster != nil && sr.Source == ratelimit.FromBackend {
			// The time just after the decision: a fixed window gives units
			// back only to a window open by then (ratelimit.TakenAt).
			h.serveTracked(w, r, key, cost, m.now())
			return
		}
		h.next.ServeHTTP(w, r)
	case err == nil:
		m.fields.write(w.Header(), &lv, beforeR, sr.Result, true)
		m.answerDenied(w, r, sr.Result, denied)
	case errors.Is(err, ratelimit.ErrCostExceedsLimit):
		m.fields.writeLimitOnly(w.Header(), &lv)
		tooLarge.write(w, r)
	default:
		h.failed(w, r, err)
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

// failed handles a limiter error: the WithOnError hook, then the request
// passed on without fields, or 503 under WithFailClosed. Nothing was taken,
// so nothing is adjusted.
func (h *limitedHandler) failed(w http.ResponseWriter, r *http.Request, err error) {
	m := h.m
	if m.onError != nil {
		m.onError(r, err)
	}
	if m.failClosed {
		setRetryAfter(w.Header(), m.closedRetry)
		m.replies.unavailable.write(w, r)
		return
	}
	h.next.ServeHTTP(w, r)
}

// answerKeyError answers a request whose key or cost could not be found: by
// the WithKeyErrorHandler, or 500.
func (m *Middleware) answerKeyError(w http.ResponseWriter, r *http.Request, err error) {
	if m.keyError != nil {
		m.keyError(w, r, err)
		return
	}
	m.replies.keyError.write(w, r)
}
