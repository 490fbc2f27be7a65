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
//   - allowed: fields set, passed on;
//   - denied: fields and Retry-After set, 429 (or the WithDeniedHandler);
//   - cost above the limit: RateLimit-Limit and RateLimit-Policy set, 413;
//   - any other limiter error: the WithOnError hook, then passed on without
//     fields, or 503 with Retry-After under WithFailClosed.
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

	res, err := m.limiter.Allow(r.Context(), key, cost)
	switch {
	case err == nil && res.Allowed:
		m.fields.write(w.Header(), res, false)
		h.next.ServeHTTP(w, r)
	case err == nil:
		m.fields.write(w.Header(), res, true)
		if m.denied != nil {
			m.denied(w, r, res)
			return
		}
		m.replies.denied.write(w, r)
	case errors.Is(err, ratelimit.ErrCostExceedsLimit):
		// The limiter says nothing about the key's state on this path, so
		// only the fields that do not depend on it are set.
		m.fields.writeLimitOnly(w.Header(), res.Limit)
		m.replies.tooLarge.write(w, r)
	default:
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
