package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/errlog"
)

// Observer is told of each request a Middleware decides, with the request
// itself, so that metrics and logs can carry its route (r.Pattern under a
// Go 1.22 http.ServeMux) or a tenant its context holds. It is called once
// per request that is not skipped (WithSkip), on the request's goroutine,
// after the decision and before the answer is written or the wrapped
// handler runs:
//
//   - allowed: d.Allowed, err nil (d.WouldDeny too for a request a
//     ratelimit.Shadow let through against a denial);
//   - denied (429): d with Allowed false, err nil;
//   - cost above the limit (413): d, err wrapping
//     ratelimit.ErrCostExceedsLimit;
//   - a limiter error, let through or answered 503: d as the limiter
//     returned it (often zero), the error;
//   - a key the limiter refuses as too long (400): a zero d, err
//     wrapping ratelimit.ErrInvalidKey;
//   - a KeyFunc or CostFunc error (401, 400 or 500): a zero d, the
//     KeyFunc's or CostFunc's error (ErrMissingCredential,
//     ErrMalformedCredential, ErrInvalidRequest, ...).
//
// It must be safe for concurrent use, and quick: the request waits for it.
type Observer func(r *http.Request, d ratelimit.Decision, err error)

// WithObserver sets an Observer told of every request the Middleware
// decides (see Observer). Without it nothing is called and nothing
// allocated. A nil o is an error.
func WithObserver(o Observer) Option {
	return func(s *settings) error {
		if o == nil {
			return fmt.Errorf("%w: httplimit: WithObserver: nil Observer", ratelimit.ErrInvalidConfig)
		}
		s.observer = o
		return nil
	}
}

// WithLogger sets the logger of the limiter errors that no WithOnError
// hook takes, in place of slog.Default() (read when a line is written).
// A nil l is an error.
//
// Without WithOnError, every error that hook would get (a limiter error,
// before the request is let through or answered 503; a failed adjustment
// or lease) is logged at slog.LevelWarn as "httplimit: rate limiter
// error", with the attributes error, method (the HTTP method) and, when a
// ServeMux pattern matched the request before the Middleware ran, route
// (r.Pattern), never the URL path, which the client chooses, nor the
// request's key or credential. One line is written per 10 seconds at most
// for each Middleware, measured on its clock (WithClock): the errors in
// between are counted, and the next line written, at the next error,
// gives their number as suppressed. WithOnError replaces this log.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("%w: httplimit: WithLogger: nil logger", ratelimit.ErrInvalidConfig)
		}
		s.logger = l
		return nil
	}
}

// observe tells the Observer, if any, of r's decision.
func (m *Middleware) observe(r *http.Request, d ratelimit.Decision, err error) {
	if m.observer != nil {
		m.observer(r, d, err)
	}
}

// logError is the WithOnError hook of a Middleware without one: err
// logged by the Middleware's errlog.Logger, with the request's method when
// it is one of RFC 9110's ("other" for any other a client made up, as
// the path is never logged) and the pattern of the route it matched.
func (m *Middleware) logError(r *http.Request, err error) {
	method := slog.String("method", knownMethod(r.Method))
	if r.Pattern == "" {
		m.log.Log(r.Context(), err, method)
		return
	}
	m.log.Log(r.Context(), err, method, slog.String("route", r.Pattern))
}

// knownMethod returns method when it is one of RFC 9110's or PATCH, and
// "other" otherwise.
func knownMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return method
	}
	return "other"
}

// newLog returns the errlog.Logger of m, on m's clock.
func newLog(m *Middleware, l *slog.Logger) *errlog.Logger {
	return errlog.New(l, "httplimit: rate limiter error", m.now)
}
