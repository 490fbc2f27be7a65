package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Option configures an Interceptor at construction. An option given a
// value it cannot use makes NewInterceptor fail with an error wrapping
// ratelimit.ErrInvalidConfig; a nil Option does too.
type Option func(*settings) error

// CostFunc says how many units of the limit a call takes. It must be safe
// for concurrent use. A call whose handler runs is never free of the
// limit: a cost of 0 takes 1 unit all the same, so that it is denied while
// its key has none left (in debt included); use WithSkip for calls that
// must not be limited at all. A negative cost, or an error wrapping
// ratelimit.ErrInvalidCost, is the caller's mistake, answered
// codes.InvalidArgument; any other error is answered as a KeyFunc's is:
// with its own gRPC status when it carries one, codes.Internal otherwise.
type CostFunc func(ctx context.Context, fullMethod string) (int, error)

// SkipFunc reports whether a call is let through without asking the
// limiter and without rate-limit metadata. It must be safe for concurrent
// use.
type SkipFunc func(ctx context.Context, fullMethod string) bool

// settings collects what the options set.
type settings struct {
	style            HeaderStyle
	cost             CostFunc
	skip             SkipFunc
	onError          func(ctx context.Context, fullMethod string, err error)
	failClosed       bool
	policyErrorsPass bool
	closedRetry      time.Duration
	leases           bool
	quotaUnit        string                      // WithQuotaUnit; "" for none
	partition        *partitioner                // WithPartitionKey; nil for none
	observer         Observer                    // WithObserver; nil for none
	logger           *slog.Logger                // WithLogger; nil for slog.Default()
	planName         func(string) (string, bool) // WithPlanName; nil for none
}

// defaultClosedRetry is the retry delay of a fail-closed answer unless
// WithFailClosed says otherwise.
const defaultClosedRetry = time.Second

// WithHeaderStyle chooses which rate-limit fields the response metadata
// carries: both the legacy and the IETF ones (BothHeaders, the default),
// LegacyHeaders only or IETFHeaders only. Any other value is an error.
func WithHeaderStyle(style HeaderStyle) Option {
	return func(s *settings) error {
		if style < BothHeaders || style > IETFHeaders {
			return fmt.Errorf("%w: grpclimit: unknown header style %d", ratelimit.ErrInvalidConfig, int(style))
		}
		s.style = style
		return nil
	}
}

// WithCost makes each call take f(ctx, fullMethod) units of the limit
// instead of 1 (at least 1: see CostFunc for a cost of 0). A nil f is an
// error.
func WithCost(f CostFunc) Option {
	return func(s *settings) error {
		if f == nil {
			return fmt.Errorf("%w: grpclimit: WithCost: nil CostFunc", ratelimit.ErrInvalidConfig)
		}
		s.cost = f
		return nil
	}
}

// WithSkip lets the calls for which f reports true through without asking
// the limiter: health checks, reflection (see SkipHealthAndReflection). A
// skipped call gets no rate-limit metadata. A nil f is an error.
func WithSkip(f SkipFunc) Option {
	return func(s *settings) error {
		if f == nil {
			return fmt.Errorf("%w: grpclimit: WithSkip: nil SkipFunc", ratelimit.ErrInvalidConfig)
		}
		s.skip = f
		return nil
	}
}

// SkipHealthAndReflection is a SkipFunc for WithSkip that skips the
// standard health service (grpc.health.v1.Health) and server reflection
// (grpc.reflection.v1 and v1alpha).
func SkipHealthAndReflection(_ context.Context, fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1.ServerReflection/") ||
		strings.HasPrefix(fullMethod, "/grpc.reflection.v1alpha.ServerReflection/")
}

// WithOnError sets a hook called with every error the limiter returns,
// other than those wrapping ratelimit.ErrCostExceedsLimit or
// ratelimit.ErrInvalidKey (the call's own, answered ResourceExhausted and
// InvalidArgument), before the call is let through (or answered
// codes.Unavailable: with WithFailClosed, and for a policy that could not
// be read, see WithPolicyErrorsPass), and with a lease's failed extension
// or release, which wraps ErrLease (see WithLeases). Without this hook,
// those errors are logged (see WithLogger); with it, they are not. f must
// be safe for concurrent use. A nil f is an error.
func WithOnError(f func(ctx context.Context, fullMethod string, err error)) Option {
	return func(s *settings) error {
		if f == nil {
			return fmt.Errorf("%w: grpclimit: WithOnError: nil func", ratelimit.ErrInvalidConfig)
		}
		s.onError = f
		return nil
	}
}

// WithFailClosed makes a limiter error answer codes.Unavailable, with a
// RetryInfo detail of retryAfter and retry-after metadata of retryAfter
// rounded up to whole seconds, instead of letting the call through. A
// retryAfter of 0 means 1 s; a negative one is an error. retryAfter is
// also the delay of the answer to a failing PolicyFunc (see
// WithPolicyErrorsPass).
func WithFailClosed(retryAfter time.Duration) Option {
	return func(s *settings) error {
		if retryAfter < 0 {
			return fmt.Errorf("%w: grpclimit: WithFailClosed: retry after %v must be >= 0", ratelimit.ErrInvalidConfig, retryAfter)
		}
		if retryAfter == 0 {
			retryAfter = defaultClosedRetry
		}
		s.failClosed, s.closedRetry = true, retryAfter
		return nil
	}
}

// WithPolicyErrorsPass lets through, without rate-limit metadata, the
// calls whose limit the limiter could not determine: the limiter errors
// that are not failures of its backend, such as ratelimit.ErrPolicy (a
// PolicyFunc, see ratelimit.WithPolicyFunc, that failed), a key's policy
// or keys the limiter refuses (ratelimit.ErrCaller), or a key whose stored
// state is not the limiter's (ratelimit.ErrCorruptState). By default such
// a call is answered codes.Unavailable with a RetryInfo and retry-after
// (WithFailClosed's delay, or 1 s), whether WithFailClosed is given or
// not: a broken plan lookup must not silently lift the plan's limit, which
// is not the situation of a backend that is down (whose errors,
// ratelimit.ErrBackend, fail open unless WithFailClosed). Under
// WithFailClosed every limiter error is answered codes.Unavailable, this
// option notwithstanding. The WithOnError hook sees the error either way.
func WithPolicyErrorsPass() Option {
	return func(s *settings) error {
		s.policyErrorsPass = true
		return nil
	}
}
