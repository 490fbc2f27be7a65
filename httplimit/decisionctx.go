package httplimit

import (
	"context"
	"net/http"

	"github.com/ratelimit-go/ratelimit"
)

// WithDecisionContext makes the Middleware put the Decision of each request
// it passes on after deciding it (allowed, or let through by a
// ratelimit.Shadow against a denial) in the request's context, where the
// handler reads it with DecisionOf. Its Source says who answered: the
// backend (ratelimit.FromBackend), or a Guard's fallback or failure policy
// while the backend was down, so that a handler that adjusts by itself
// never settles a fallback's decision at the backend, whose units it never
// took. A request passed on without a decision (skipped by WithSkip, or
// after a limiter error) carries none.
//
// It costs two allocations per request passed on (the request's copy with
// its new context, and that context); without it, DecisionOf finds
// nothing.
func WithDecisionContext() Option {
	return func(s *settings) error {
		s.decisionCtx = true
		return nil
	}
}

// DecisionOf returns the Decision a Middleware built WithDecisionContext put
// in ctx, a request's context, and true; or the zero Decision and false
// when there is none. Between nested Middlewares, it is the innermost one's
// (the last to decide before the handler). The Decision's Policies must not
// be modified.
func DecisionOf(ctx context.Context) (ratelimit.Decision, bool) {
	if ctx == nil {
		return ratelimit.Decision{}, false
	}
	d, ok := ctx.Value(decisionKey{}).(*ratelimit.Decision)
	if !ok {
		return ratelimit.Decision{}, false
	}
	return *d, true
}

// decisionKey is the context key of a request's Decision.
type decisionKey struct{}

// decisionContext is a request's context with its Decision: Value finds the
// Decision, and every other call goes to the request's context.
type decisionContext struct {
	context.Context
	d ratelimit.Decision
}

// Value returns the Decision for decisionKey, and otherwise the request
// context's value for key.
func (c *decisionContext) Value(key any) any {
	if key == (decisionKey{}) {
		return &c.d
	}
	return c.Context.Value(key)
}

// withDecision returns r carrying d for DecisionOf when the Middleware was
// built WithDecisionContext, and r otherwise.
func (m *Middleware) withDecision(r *http.Request, d ratelimit.Decision) *http.Request {
	if !m.decisionCtx {
		return r
	}
	c := &decisionContext{Context: r.Context(), d: d}
	return r.WithContext(c)
}
