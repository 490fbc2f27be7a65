package httplimit

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Option configures a Middleware at construction. An option given a value it
// cannot use makes NewMiddleware fail with an error wrapping
// ratelimit.ErrInvalidConfig; a nil Option does too.
type Option func(*settings) error

// CostFunc says how many units of the limit a request takes. It must be safe
// for concurrent use. A request whose handler runs is never free of the
// limit: a cost of 0 takes 1 unit all the same, so that it is denied while
// its key has none left (in debt included), and under WithRefund or
// WithSettle the middleware gives that unit back once the handler has
// returned (settling the request at 0, or at the cost the handler reports),
// so that the request holds it only while it runs; without either, the
// request keeps it. Use WithSkip for requests that must not be limited at
// all. A negative cost or an error is answered as a KeyFunc error is (see
// WithKeyErrorHandler): 400 for a negative cost or an error wrapping
// ErrInvalidRequest or ratelimit.ErrInvalidCost, 401 for one wrapping
// ErrMissingCredential that names a challenge (400 when it names none),
// 500 for any other.
type CostFunc func(*http.Request) (int, error)

// ErrorHandler answers a request whose key or cost could not be found, or
// whose key the limiter refused as too long; err is the KeyFunc's or
// CostFunc's error (for a negative cost, one wrapping
// ratelimit.ErrInvalidCost), or the limiter's, wrapping
// ratelimit.ErrInvalidKey. It must be safe for concurrent use.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error)

// DeniedHandler answers a request the limiter denied. It is called with the
// rate-limit fields and Retry-After already set on w.Header(), and res is the
// limiter's decision. It must be safe for concurrent use.
type DeniedHandler func(w http.ResponseWriter, r *http.Request, res ratelimit.Result)

// settings collects what the options set.
type settings struct {
	policyName    string
	policyNameSet bool
	style         HeaderStyle
	window        time.Duration // the w parameter; 0 leaves it out
	windowSet     bool
	cost          CostFunc
	skip          func(*http.Request) bool
	onError       func(*http.Request, error)
	failClosed    bool
	closedRetry   time.Duration
	keyError      ErrorHandler
	denied        DeniedHandler
	refund        func(*http.Request, int) bool
	settle        bool
	decisionCtx   bool
	adjustWait    time.Duration
	clock         ratelimit.Clock
	shadowHeader  bool
	passUnknown   bool
	leases        bool
	quotaUnit     string         // WithQuotaUnit; "" for none
	partition     *partitioner   // WithPartitionKey; nil for none
	maxSettle     int            // WithMaxSettle's limits; 0: ratelimit.DefaultMaxSettle
	observer      Observer       // WithObserver; nil for none
	logger        *slog.Logger   // WithLogger; nil for slog.Default()
	trusted       []netip.Prefix // WithTrustedProxies's, for PerIP
	trustedSet    bool
	planName      func(string) (string, bool) // WithPlanName's; nil for none
}

// defaultPolicyName names the policy in the IETF fields unless
// WithPolicyName says otherwise.
const defaultPolicyName = "default"

// defaultClosedRetry is the Retry-After of a fail-closed 503 unless
// WithFailClosed says otherwise.
const defaultClosedRetry = time.Second

// WithPolicyName sets the policy's name in the RateLimit-Policy and RateLimit
// fields and in problem documents. The default is the name the request's
// Decision gives the limiter's one policy: "default" for every limiter of
// package ratelimit of one policy (and a Guard, DenyCache or Shadow around
// one), a Part's Name for a one-part Composite, and "default" for a limiter
// of another package or one that names none. The name is sent as a
// structured-field string, so it must be non-empty printable ASCII (0x20 to
// 0x7E); any other name is an error.
//
// It names the one policy of a limiter that has one. A limiter with several
// policies (a ratelimit.Composite, or a decorator around one) names each of
// them itself (ratelimit.Part's Name), so NewMiddleware returns an error for
// WithPolicyName with such a limiter. Give stacked Middlewares' policies
// distinct names: the fields they merge list a name once.
func WithPolicyName(name string) Option {
	return func(s *settings) error {
		if err := checkPolicyName(name); err != nil {
			return err
		}
		s.policyName, s.policyNameSet = name, true
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
// to whole seconds, in place of the Window of the policy the request's
// Decision names; a d of 0 leaves w out. A negative d is an error. Use it
// for a limiter that reports no Window, such as a limiter of another
// package, which is given a policy of Window 0 (sent without
// w).
//
// Like WithPolicyName, it applies to a limiter with one policy: a limiter
// with several reports the window of each, and NewMiddleware returns an
// error for WithPolicyWindow with it.
func WithPolicyWindow(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("%w: httplimit: policy window %v must be >= 0", ratelimit.ErrInvalidConfig, d)
		}
		s.window, s.windowSet = d, true
		return nil
	}
}

// WithCost makes each request take f(r) units of the limit instead of 1
// (at least 1: see CostFunc for a cost of 0). A nil f is an error.
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
// than those wrapping ratelimit.ErrCostExceedsLimit or
// ratelimit.ErrInvalidKey (the request's own, answered 413 and 400), before
// the request is let through or answered 503 (see WithFailClosed and
// WithPolicyErrorsPass); with the error of every Refund or Settle that
// fails after a handler has returned (see WithRefund and WithSettle), and
// the report of a cost settled at WithMaxSettle's bound, which wrap
// ErrAdjustment: the request has been served by then; and with a lease's
// failed extension or release, which wraps ErrLease (see WithLeases).
// Without this hook, those errors are logged (see WithLogger); with it,
// they are not. f must be safe for concurrent use. A nil f is an error.
func WithOnError(f func(*http.Request, error)) Option {
	return func(s *settings) error {
		if f == nil {
			return fmt.Errorf("%w: httplimit: WithOnError: nil func", ratelimit.ErrInvalidConfig)
		}
		s.onError = f
		return nil
	}
}

// WithFailClosed makes a failure of the limiter's backend answer 503
// Service Unavailable with a Retry-After of retryAfter rounded up to whole
// seconds, instead of letting the request through without fields: an error
// of class ratelimit.ErrBackend (Redis down, a timeout, a server error, a
// reply it cannot read), or any error of a limiter of another package. A
// retryAfter of 0 means 1 s; a negative one is an error.
//
// The other limiter errors, which leave the request's limit unknown (a
// PolicyFunc that failed, say), are answered 503 without this option (see
// WithPolicyErrorsPass); this option sets their Retry-After too, and
// answers them 503 even with WithPolicyErrorsPass. Behind a
// ratelimit.Guard, which answers its backend's failures by its own failure
// policy with a nil error, backend failures reach the middleware only for
// a request whose context ended first: choose the failure policy in the
// Guard.
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
// CostFunc returns an error (or the CostFunc a negative cost), or the
// limiter refuses its key as longer than it takes (an error wrapping
// ratelimit.ErrInvalidKey, which changed nothing), in place of the default
// answers, which are problem documents (RFC 9457, type about:blank) by the
// error's class:
//
//   - 401 Unauthorized for a request without its credential: an error
//     wrapping ErrMissingCredential (KeyByBearer's request without a
//     Bearer credential, or a KeyFunc's or CostFunc's own) that names a
//     challenge, sent in a WWW-Authenticate field (KeyByBearer's:
//     "Bearer"); one that names none (KeyByContext's request without its
//     value) is answered 400, since a 401 must carry a challenge;
//   - 400 Bad Request for the client's other mistakes: an error wrapping
//     ErrMalformedCredential (KeyByBearer's malformed Authorization field,
//     with its challenge), ErrInvalidRequest (KeyByHeader's request
//     without its header, or a KeyFunc's or CostFunc's own),
//     ratelimit.ErrInvalidCost (a negative cost, or a CostFunc's error
//     that says the request's cost is not valid), or
//     ratelimit.ErrInvalidKey (a key longer than the limiter takes, see
//     ratelimit.WithMaxKeyLength);
//   - 500 Internal Server Error for any other error: the server's mistake
//     or failure (KeyByContext's value of another type, KeyByIP without
//     an IP address, a KeyByHeader name that is not a field name, a
//     KeyFunc or CostFunc that failed).
//
// The limiter is not asked, but for the key it refused, and the request
// has no rate-limit fields. A nil h is an error.
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

// DefaultAdjustTimeout bounds the Refund or Settle call the middleware makes
// after a handler returns (see WithRefund and WithSettle), unless
// WithAdjustTimeout says otherwise.
const DefaultAdjustTimeout = time.Second

// WithRefund gives back the units an allowed request took when refund
// reports true for it once its handler has returned: refund is called with
// the request and the status of its response, and a true answer makes the
// middleware call the limiter's Refund for the request's key and cost, so
// that the response does not count. The limiter must be a
// ratelimit.Adjuster (every limiter of package ratelimit, Composite, Guard,
// DenyCache and Shadow are), or NewMiddleware returns an error; a nil refund is an
// error too.
//
// The status is the first final status the handler gave WriteHeader, or 200
// when it wrote a body or flushed without one, or wrote nothing at all, as
// net/http answers; informational (1xx) statuses other than 101 are not
// final. To learn it, the middleware wraps the http.ResponseWriter the
// handler gets (one allocation per allowed request); the wrapper has an
// Unwrap method, so http.ResponseController reaches the server's writer
// through it, and it implements http.Flusher, io.ReaderFrom, and
// http.Hijacker when the server's writer does. A hijacked connection's
// status is 200 unless the handler called WriteHeader first. A handler that
// panics is not adjusted.
//
// For instance, not to count failures of the service itself:
//
//	httplimit.WithRefund(func(_ *http.Request, status int) bool { return status >= 500 })
//
// or, on a login endpoint keyed by account, to count failed attempts only:
//
//	httplimit.WithRefund(func(_ *http.Request, status int) bool { return status < 400 })
//
// A refund wins over a cost reported with SetCost: the response does not
// count at all. See WithSettle for when and how the call is made and where
// its errors go.
func WithRefund(refund func(r *http.Request, status int) bool) Option {
	return func(s *settings) error {
		if refund == nil {
			return fmt.Errorf("%w: httplimit: WithRefund: nil func", ratelimit.ErrInvalidConfig)
		}
		s.refund = refund
		return nil
	}
}

// WithSettle lets handlers report the true cost of an allowed request with
// SetCost, when it is only known once the work is done (rows scanned,
// tokens generated, bytes sent). After the handler returns, the middleware
// calls the limiter's Settle to replace the units the request took (its
// cost, 1 or the CostFunc's) by the cost reported last: a smaller cost gives
// the difference back, a larger one takes the rest, even into debt (as far
// as the limiter's ratelimit.WithMaxDebt allows: one limit by default), so
// that later requests are denied until it is paid; a cost above
// WithMaxSettle's bound (10 limits by default) is settled at the bound. A
// request whose handler reports no cost is settled at its CostFunc's cost:
// not adjusted, but for a cost of 0, which took 1 to run (see CostFunc)
// and gives it back. The limiter must be a ratelimit.Adjuster, or
// NewMiddleware returns an error.
//
// WithSettle puts the request's cost slot in its context, which costs two
// allocations per allowed request; without it, SetCost reports false and
// nothing is settled.
//
// The Refund (see WithRefund) or Settle call is made once the handler has
// returned, before ServeHTTP returns, so a slow limiter delays the end of
// the response by one call (a handler can flush its response first with
// http.ResponseController). It runs under the request's context without
// its cancellation (context.WithoutCancel: the client may have gone, and
// the units must be adjusted anyway), bounded by DefaultAdjustTimeout or
// WithAdjustTimeout, and with ratelimit.TakenAt the time read just after
// the request was decided (from the system clock, or WithClock's), so a
// fixed window adjusts only the window that counted it.
//
// Each request that ran is adjusted for itself, once. The call carries a
// token the Middleware makes for that request (ratelimit.WithToken): a
// random prefix drawn by NewMiddleware and the request's number, at most 30
// bytes, never anything the client sends, so that no header (an
// Idempotency-Key, say) can make two requests that each ran share one
// adjustment, and a client is charged the true cost of every request its
// handler served. A call that fails with ratelimit.ErrBackend (the server
// may have applied it and lost the reply) is made once more with the same
// token while the timeout allows: on Redis the token makes that second
// call change nothing when the first applied. A Redis limiter keeps each
// token for ratelimit.SettleTokenTTL, about 100 bytes each: 1,000
// adjustments a second hold about 30 MB. An error that remains goes to the
// WithOnError hook, wrapping ErrAdjustment and the limiter's error.
// Requests that were denied, that failed open on a limiter error, or that
// were skipped (WithSkip) took nothing and are never adjusted.
func WithSettle() Option {
	return func(s *settings) error {
		s.settle = true
		return nil
	}
}

// WithMaxSettle bounds what the middleware settles for one request (see
// WithSettle) to limits times the request's limit: the smallest Limit
// among the policies of its Decision that count units (for a
// ratelimit.Composite, its parts that are neither PerCall nor InFlight;
// for a limiter built WithPolicyFunc, the key's policy when the request
// was decided). A cost reported above the bound (a unit mix-up in a
// handler, bytes for kilobytes, or a bogus measure) is settled at the
// bound: the request is charged that much, so that no handler's report
// lets a request escape its limit, and no more, so that one report cannot
// charge a key more than limits of its limit; the WithOnError hook gets an
// error wrapping ErrAdjustment that gives the cost and the bound. Without
// the option the bound is ratelimit.DefaultMaxSettle (10 limits), which
// is also the limiters' own default bound on one Settle
// (ratelimit.WithMaxSettle): keep this one no larger than the limiter's,
// or the limiter refuses the Settle (its error then goes to the hook, and
// the request stays charged what it took). ratelimit.UnboundedSettle
// settles every cost as reported, up to what the limiter accepts. A
// request whose Decision has no policy that counts units, or no Limit
// (a limiter of another package that reports none), is not bounded. A
// limits below 1 other than ratelimit.UnboundedSettle is an error. It
// changes nothing without WithSettle.
func WithMaxSettle(limits int) Option {
	return func(s *settings) error {
		if limits < 1 && limits != ratelimit.UnboundedSettle {
			return fmt.Errorf("%w: httplimit: WithMaxSettle: %d limits; want >= 1, or ratelimit.UnboundedSettle", ratelimit.ErrInvalidConfig, limits)
		}
		s.maxSettle = limits
		return nil
	}
}

// WithAdjustTimeout bounds the Refund or Settle call made after a handler
// returns (see WithRefund and WithSettle) by d instead of
// DefaultAdjustTimeout. A d <= 0 is an error.
func WithAdjustTimeout(d time.Duration) Option {
	return func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("%w: httplimit: WithAdjustTimeout: %v must be > 0", ratelimit.ErrInvalidConfig, d)
		}
		s.adjustWait = d
		return nil
	}
}

// WithClock sets the clock the middleware reads, just after it decides a
// request, the time it passes to ratelimit.TakenAt when it adjusts the
// request afterwards (see WithRefund and WithSettle). That time must be on
// the clock the limiter measures a TakenAt on (see ratelimit.TakenAt): the
// default, the system clock, is right for in-process limiters on the
// system clock and for Redis limiters on the server's TIME; give here an
// in-process limiter's other clock (a ratelimittest.Clock in tests), a
// Redis limiter's caller's clock (ratelimit.WithCallerClock), or a
// RedisCalendarWindow's WithClock clock.
// A nil c is an error.
func WithClock(c ratelimit.Clock) Option {
	return func(s *settings) error {
		if isNil(c) {
			return fmt.Errorf("%w: httplimit: WithClock: nil clock", ratelimit.ErrInvalidConfig)
		}
		s.clock = c
		return nil
	}
}

// WithShadowHeader makes every response that a shadowing limiter let
// through against a denial carry one more field, RateLimit-Shadow, whose
// value is the RateLimit value the denial would have carried, in the
// draft's syntax whatever the header style:
//
//	RateLimit-Shadow: "default";r=0;t=1
//
// with t the seconds until the request could have succeeded (the
// Retry-After the denial would have had, at least 1) and r the units left;
// for a limiter of several policies, the item names the policy that would
// have denied, which RateLimit-Policy lists (under the styles that send
// it), and under WithPartitionKey it carries pk. It tells clients that
// they are over a limit that is not enforced yet. The other rate-limit
// fields are those of an allowed request (each policy's r and effective
// window, see the package doc). Responses the limiter allowed, and all
// responses while it enforces, do not carry it.
//
// A request is one the limiter let through against a denial when its
// Decision says WouldDeny: a ratelimit.Shadow's, also inside a Guard or
// DenyCache. Without this option, such requests are let through with the
// fields of an allowed request only.
func WithShadowHeader() Option {
	return func(s *settings) error {
		s.shadowHeader = true
		return nil
	}
}

// WithPolicyErrorsPass lets through, without fields, the requests whose
// limit the limiter could not determine: a PolicyFunc that failed
// (ratelimit.ErrPolicy), a key's policy or keys the limiter refuses, a key
// whose stored state is not the limiter's (ratelimit.ErrCorruptState): the
// limiter errors that are not failures of its backend. By default they are
// answered 503 Service Unavailable with Retry-After (WithFailClosed's, or
// 1 s), after the WithOnError hook: a broken plan lookup must not silently
// lift the plan's limit, which is not the situation of a backend that is
// down (which fails open by default, see WithFailClosed). With
// WithFailClosed given as well, every limiter error is answered 503, these
// included.
func WithPolicyErrorsPass() Option {
	return func(s *settings) error {
		s.passUnknown = true
		return nil
	}
}
