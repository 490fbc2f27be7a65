package httplimit

import (
	"context"
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
	h.serve(w, r, key, cost)
}

// decide decides cost for key through the limiter, by the richest call it
// offers: AllowShadow for a ratelimit.ShadowLimiter, AllowSource for a
// ratelimit.SourceLimiter kept for adjustments, AllowBound for a limiter of
// several policies, Allow otherwise. What a call does not say is filled in
// as a plain answer says it: Bound 0, Source FromBackend, WouldDeny false,
// and Backend the Result itself.
func (m *Middleware) decide(ctx context.Context, key string, cost int) (ratelimit.ShadowResult, error) {
	var sr ratelimit.ShadowResult
	var err error
	sr.Source = ratelimit.FromBackend
	switch {
	case m.shadow != nil:
		return m.shadow.AllowShadow(ctx, key, cost)
	case m.sourced != nil:
		sr.Result, sr.Bound, sr.Source, err = m.sourced.AllowSource(ctx, key, cost)
	case m.multi != nil:
		sr.Result, sr.Bound, err = m.multi.AllowBound(ctx, key, cost)
	default:
		sr.Result, err = m.limiter.Allow(ctx, key, cost)
	}
	sr.Backend = sr.Result
	return sr, err
}

// serve is ServeHTTP's decision, through decide. For a limiter of several
// policies the fields, and the problem document of a denial, are those of
// the policy that bound it, and an index that names no policy is a limiter
// error. A request a ratelimit.ShadowLimiter let through against a denial
// took nothing, so it is passed on without being tracked for an
// adjustment, and carries RateLimit-Shadow under WithShadowHeader.
func (h *limitedHandler) serve(w http.ResponseWriter, r *http.Request, key string, cost int) {
	m := h.m
	sr, err := m.decide(r.Context(), key, cost)
	var p *partValues
	beforeR, denied, tooLarge := m.fields.beforeR, &m.replies.denied, &m.replies.tooLarge
	if m.multi != nil {
		if p = m.fields.part(sr.Bound); p == nil {
			call := "AllowBound"
			if m.shadow != nil {
				call = "AllowShadow"
			}
			if err != nil {
				h.failed(w, r, fmt.Errorf("httplimit: the limiter's %s answered policy %d of %d, and: %w", call, sr.Bound, len(m.fields.parts), err))
			} else {
				h.failed(w, r, fmt.Errorf("httplimit: the limiter's %s answered policy %d of %d", call, sr.Bound, len(m.fields.parts)))
			}
			return
		}
		beforeR, denied, tooLarge = p.beforeR, m.replies.deniedFor(sr.Bound), m.replies.tooLargeFor(sr.Bound)
	}
	if err != nil && !errors.Is(err, ratelimit.ErrCostExceedsLimit) {
		h.failed(w, r, err)
		return
	}
	// Only the answers that show the policy's values read them: a
	// limiter error does not call a PolicyFunc.
	var lv *limitValues
	if p != nil {
		lv = &p.limitValues
	} else {
		v := m.limitValuesFor(r.Context(), key, sr.Limit)
		lv = &v
	}
	switch {
	case err != nil: // ErrCostExceedsLimit
		// The limiter says nothing about the key's state on this path, so
		// only the fields that do not depend on it are set.
		m.fields.writeLimitOnly(w.Header(), lv)
		tooLarge.write(w, r)
	case sr.WouldDeny:
		m.fields.write(w.Header(), lv, beforeR, sr.Result, false)
		if m.shadowHeader {
			writeShadow(w.Header(), beforeR, sr.Backend)
		}
		h.next.ServeHTTP(w, r)
	case sr.Allowed:
		m.fields.write(w.Header(), lv, beforeR, sr.Result, false)
		if m.adjuster != nil && sr.Source == ratelimit.FromBackend {
			// The time just after the decision: a fixed window gives units
			// back only to a window open by then (ratelimit.TakenAt).
			h.serveTracked(w, r, key, cost, m.now())
			return
		}
		h.next.ServeHTTP(w, r)
	default:
		m.fields.write(w.Header(), lv, beforeR, sr.Result, true)
		m.answerDenied(w, r, sr.Result, denied)
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
