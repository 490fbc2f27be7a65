package httplimit

import (
	"fmt"
	"net/http"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Option configures a Middleware at construction. An option given a value it
// cannot use makes NewMiddleware fail with an error wrapping
// ratelimit.ErrInvalidConfig; a nil Option does too.
type Option func(*settings) error

// CostFunc says how many units of the limit a request takes. It must be safe
// for concurrent use. A cost of 0 only reads the key's state; a negative cost
// or an error is handled as a KeyFunc error is.
type CostFunc func(*http.Request) (int, error)

// ErrorHandler answers a request whose key or cost could not be found; err is
// the KeyFunc's or CostFunc's error. It must be safe for concurrent use.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// DeniedHandler answers a request the limiter denied. It is called with the
// rate-limit fields and Retry-After already set on w.Header(), and res is the
// limiter's decision. It must be safe for concurrent use.
type DeniedHandler func(w http.ResponseWriter, r *http.Request, res ratelimit.Result)

// settings collects what the options set.
type settings struct {
	policyName  string
	style       HeaderStyle
	window      time.Duration // the w parameter; 0 leaves it out
	windowSet   bool
	cost        CostFunc
	skip        func(*http.Request) bool
	onError     func(*http.Request, error)
	failClosed  bool
	closedRetry time.Duration
	keyError    ErrorHandler
	denied      DeniedHandler
}

// defaultPolicyName names the policy in the IETF fields unless
// WithPolicyName says otherwise.
const defaultPolicyName = "default"

// defaultClosedRetry is the Retry-After of a fail-closed 503 unless
// WithFailClosed says otherwise.
const defaultClosedRetry = time.Second

// WithPolicyName sets the policy's name in the RateLimit-Policy and RateLimit
// fields and in problem documents; the default is "default". The name is sent
// as a structured-field string, so it must be non-empty printable ASCII
// (0x20 to 0x7E); any other name is an error.
func WithPolicyName(name string) Option {
	return func(s *settings) error {
		if err := checkPolicyName(name); err != nil {
			return err
		}
		s.policyName = name
		return nil
	}
}

// WithHeaderStyle chooses which rate-limit fields responses carry: both the
// legacy and the IETF ones (BothHeaders, the default), LegacyHeaders only or
// IETFHeaders only. Any other value is an error.
func WithHeaderStyle(style HeaderStyle) Option {
	return func(s *settings) error {
		if style < BothHeaders || style > IETFHeaders {
			return fmt.Errorf("%w: httplimit: unknown header style %d", ratelimit.ErrInvalidConfig, int(style))
		}
		s.style = style
		return nil
	}
}

// WithPolicyWindow sets the w parameter of RateLimit-Policy to d, rounded up
// to whole seconds, in place of what the limiter tells through a FillTime or
// Window method; a d of 0 leaves w out. A negative d is an error. Use it for a
// limiter that has neither method, such as a wrapper.
func WithPolicyWindow(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("%w: httplimit: policy window %v must be >= 0", ratelimit.ErrInvalidConfig, d)
		}
		s.window, s.windowSet = d, true
		return nil
	}
}

// WithCost makes each request take f(r) units of the limit instead of 1. A
// nil f is an error.
func WithCost(f CostFunc) Option {
	return func(s *settings) error {
		if f == nil {
			return fmt.Errorf("%w: httplimit: WithCost: nil CostFunc", ratelimit.ErrInvalidConfig)
		}
		s.cost = f
		return nil
	}
}

// WithSkip lets requests for which f returns true (health checks, internal
// callers) through without asking the limiter and without rate-limit fields.
// f must be safe for concurrent use. A nil f is an error.
func WithSkip(f func(*http.Request) bool) Option {
	return func(s *settings) error {
		if f == nil {
			return fmt.Errorf("%w: httplimit: WithSkip: nil func", ratelimit.ErrInvalidConfig)
		}
		s.skip = f
		return nil
	}
}

// WithOnError sets a hook called with every error the limiter returns, other
// than those wrapping ratelimit.ErrCostExceedsLimit, before the request is
// let through (or, with WithFailClosed, answered 503). There is no hook and
// no logging by default. f must be safe for concurrent use. A nil f is an
// error.
func WithOnError(f func(*http.Request, error)) Option {
	return func(s *settings) error {
		if f == nil {
			return fmt.Errorf("%w: httplimit: WithOnError: nil func", ratelimit.ErrInvalidConfig)
		}
		s.onError = f
		return nil
	}
}

// WithFailClosed makes a limiter error answer 503 Service Unavailable with a
// Retry-After of retryAfter rounded up to whole seconds, instead of letting
// the request through. A retryAfter of 0 means 1 s; a negative one is an
// error.
func WithFailClosed(retryAfter time.Duration) Option {
	return func(s *settings) error {
		if retryAfter < 0 {
			return fmt.Errorf("%w: httplimit: WithFailClosed: retry after %v must be >= 0", ratelimit.ErrInvalidConfig, retryAfter)
		}
		if retryAfter == 0 {
			retryAfter = defaultClosedRetry
		}
		s.failClosed, s.closedRetry = true, retryAfter
		return nil
	}
}

// WithKeyErrorHandler sets how a request is answered when its KeyFunc or
// CostFunc returns an error (or the CostFunc a negative cost) instead of the
// default 500 Internal Server Error. The limiter is not asked. A nil h is an
// error.
func WithKeyErrorHandler(h ErrorHandler) Option {
	return func(s *settings) error {
		if h == nil {
			return fmt.Errorf("%w: httplimit: WithKeyErrorHandler: nil handler", ratelimit.ErrInvalidConfig)
		}
		s.keyError = h
		return nil
	}
}

// WithDeniedHandler sets how a denied request is answered instead of the
// default 429 with a problem document. The wrapped handler is still not
// called. A nil h is an error.
func WithDeniedHandler(h DeniedHandler) Option {
	return func(s *settings) error {
		if h == nil {
			return fmt.Errorf("%w: httplimit: WithDeniedHandler: nil handler", ratelimit.ErrInvalidConfig)
		}
		s.denied = h
		return nil
	}
}
