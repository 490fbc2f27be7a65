package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/nilcheck"
)

// Limiter decides whether n units of work for key may happen now.
//
// Implementations are safe for concurrent use and never block on a rate: a
// request that cannot proceed is denied at once with a Result that says how
// long to wait. A denial is not an error. n == 0 is a peek: it is always
// allowed, consumes nothing and creates no state. n < 0 returns an error
// wrapping ErrInvalidCost, and n greater than the limit returns an error
// wrapping ErrCostExceedsLimit with a Result whose Allowed is false; neither
// changes any state.
type Limiter interface {
	Allow(ctx context.Context, key string, n int) (Result, error)
}

// Result is the outcome of one Allow call, in the units of the limiter's
// kind: tokens of a token bucket or GCRA, calls counted in a fixed, sliding
// or calendar window or in a sliding log, units held by a concurrency
// limiter's leases. For a Composite it is the Result of the part that bound
// the call (see Decision). A wait that does not apply is 0.
type Result struct {
	// Allowed reports whether the n units were taken: from a bucket,
	// counted in a window, added to a log, or held by a lease. A denial
	// takes nothing.
	Allowed bool
	// Limit is the most one call may take: the capacity of a token
	// bucket, the burst of a GCRA, the limit of a fixed, sliding or
	// calendar window or of a sliding log, the units a concurrency
	// limiter lets be in flight at once.
	Limit int
	// Remaining is what is left now, after this decision: the whole
	// tokens in the bucket, the units the window or log can still count
	// (0 in debt), the units free to be held.
	Remaining int
	// RetryAfter is, for a denial, the least wait after which this same
	// call can be allowed were no other call made: until enough tokens
	// come back, until the window ends (for a sliding counter, until its
	// estimate leaves room), until enough of a log's oldest units leave,
	// until enough leases expire, were none released or extended (a
	// release may free units sooner). It is 0 when the call was allowed.
	RetryAfter time.Duration
	// ResetAfter is the wait until the key is back to its full limit,
	// were no other call made: the bucket full again, the window open now
	// ended (for a sliding counter, its estimate back to 0), the log's
	// newest unit gone, every lease now held expired, were none released.
	// It is 0 for a key already at its full limit, but for a calendar
	// window, which tells the time until its window ends.
	ResetAfter time.Duration
}

// Every error the limiters and decorators of this package make belongs to
// one of three classes, which errors.Is tells apart (an error of a Limiter
// of another package that a decorator passes on keeps its own). An error of
// class ErrCaller may also wrap an error of another class that is not the
// backend's (a PolicyFunc's own error, say): the caller's class then wins,
// as the Guard, httplimit and grpclimit read it:
//
//   - ErrCaller: the caller's mistake, such as a bad cost, a cost above the
//     limit, a key too long or that the store cannot serve, a bad or
//     unreadable policy, or a limiter that was never built. It concerns this call, not the
//     backend.
//   - ErrCorruptState: one key's data in the backend is not the limiter's
//     own. Every other key is decided as before.
//   - ErrBackend: a failure of the backend: the network, a timeout, a
//     server error, or a reply that cannot be read. Only these say
//     anything about the backend's health: a Guard counts them, answers
//     them by its failure policy and opens its breaker on them, and passes
//     the errors of the other two classes to its caller untouched.
var (
	// ErrCaller is the class of the caller's mistakes: every error wrapping
	// ErrInvalidConfig, ErrInvalidCost, ErrCostExceedsLimit, ErrPolicy,
	// ErrKeysApart, ErrInvalidKey or ErrLeaseExpired wraps it, as does a
	// nil context.
	ErrCaller = errors.New("ratelimit: the caller's mistake")
	// ErrBackend is the class of backend failures: every error a Redis
	// limiter returns because Redis could not be reached, did not answer
	// in time (the call's context ended first), answered with an error, or
	// sent a reply that cannot be read, wraps it beside the cause.
	ErrBackend = errors.New("ratelimit: backend failure")

	// ErrInvalidConfig is wrapped by every constructor error: a capacity or
	// limit <= 0, a rate that is <= 0, NaN, infinite or too fast for the
	// clock's unit, a period or window <= 0, arithmetic that would overflow,
	// a nil client, or an option that does not apply to the limiter and that
	// the types let through (see Option). Every
	// call on a nil or zero-value limiter, Composite, Guard, DenyCache or
	// Shadow, which no constructor returns, wraps it too. It is of class
	// ErrCaller.
	ErrInvalidConfig error = &classed{"ratelimit: invalid configuration", ErrCaller}
	// ErrInvalidCost is wrapped by the error Allow returns for n < 0. It is
	// of class ErrCaller.
	ErrInvalidCost error = &classed{"ratelimit: invalid cost", ErrCaller}
	// ErrCostExceedsLimit is wrapped by the error Allow returns for an n
	// greater than the limiter's Limit: such a request can never succeed.
	// It is of class ErrCaller.
	ErrCostExceedsLimit error = &classed{"ratelimit: cost exceeds limit", ErrCaller}
	// ErrCorruptState is wrapped by the error a Redis limiter's Allow returns
	// when the value stored under the key is not the limiter's own state:
	// another Redis type, a HASH with other fields, a value the limiter never
	// writes, or a key without the TTL it always sets. Such a key is left
	// exactly as it was (fields, values, TTL), and the error names it (see
	// WithKeysShown). It
	// is a class of its own: it concerns that key's data only, not the
	// backend's health, so a Guard returns it to the caller rather than
	// answering by its failure policy, and its circuit breaker does not
	// count it.
	ErrCorruptState = errors.New("ratelimit: key holds state that is not the limiter's own")
	// ErrPolicy is wrapped by the error of a call whose PolicyFunc (see
	// WithPolicyFunc) failed, beside the function's own error. It is of
	// class ErrCaller: it concerns one key's policy, not the backend's
	// health, so a Guard returns it to the caller rather than answering by
	// its failure policy, and its circuit breaker does not count it.
	ErrPolicy error = &classed{"ratelimit: the key's policy could not be read", ErrCaller}
	// ErrKeysApart is wrapped by the error of a call whose keys one store
	// cannot serve together: a Composite whose parts' Redis keys fall in
	// different hash slots of a Redis Cluster (or shards of a Ring), or
	// are one Redis key for two parts (see NewComposite). It is of class
	// ErrCaller: the keys must change, not the backend.
	ErrKeysApart error = &classed{"ratelimit: keys the store cannot serve together", ErrCaller}
	// errNilContext is returned by the calls that need a context and were
	// given a nil one.
	errNilContext error = &classed{"ratelimit: nil context", ErrCaller}
)

// classed is a sentinel error of one of the classes: errors.Is finds its
// class in it, as well as itself.
type classed struct {
	msg   string
	class error
}

// Error returns the sentinel's message.
func (e *classed) Error() string { return e.msg }

// Is reports whether target is e's class.
func (e *classed) Is(target error) bool { return target == e.class }

// inClass is an error put in a class without changing its message.
type inClass struct {
	err   error
	class error
}

// Error returns the error's message.
func (e *inClass) Error() string { return e.err.Error() }

// Unwrap returns the error.
func (e *inClass) Unwrap() error { return e.err }

// Is reports whether target is e's class.
func (e *inClass) Is(target error) bool { return target == e.class }

// callerErr returns err, the caller's mistake, in class ErrCaller.
func callerErr(err error) error { return &inClass{err, ErrCaller} }

// backendErr returns err, a failure of the backend, wrapped with
// ErrBackend unless it is of a class already. A script that called a
// command the server does not know says to build the limiter
// WithCallerClock, since TIME is the only one a server may refuse.
func backendErr(err error) error {
	if err == nil || errors.Is(err, ErrBackend) || errors.Is(err, ErrCaller) || errors.Is(err, ErrCorruptState) {
		return err
	}
	if strings.Contains(err.Error(), unknownScriptCommand) {
		return fmt.Errorf("%w: %w (if the server refuses TIME in scripts, build the limiter WithCallerClock)", ErrBackend, err)
	}
	return fmt.Errorf("%w: %w", ErrBackend, err)
}

// unknownScriptCommand is the start of the error a Redis server answers a
// script that calls a command it does not know: the batch script's only
// command a server may rename away is TIME (some managed offerings do).
const unknownScriptCommand = "Unknown Redis command called from script"

// checkCost returns an error for a cost n that a limiter of limit can never
// take: one wrapping ErrInvalidCost for n < 0, ErrCostExceedsLimit for
// n > limit. Every limiter answers such calls with Result{Limit: limit} and
// no change of state.
func checkCost(n, limit int) error {
	if n < 0 {
		return fmt.Errorf("%w: n = %d must be >= 0", ErrInvalidCost, n)
	}
	if n > limit {
		return fmt.Errorf("%w: n = %d, limit = %d", ErrCostExceedsLimit, n, limit)
	}
	return nil
}

// notBuilt is the error of a call on a nil or zero-value *typ, which its
// constructor NewTyp never returns.
func notBuilt(typ string) error {
	return fmt.Errorf("%w: a nil or zero-value *%s; create one with New%s", ErrInvalidConfig, typ, typ)
}

// isNil reports whether v is nil or an interface holding a nil pointer, such
// as (*redis.Client)(nil).
func isNil(v any) bool { return nilcheck.IsNil(v) }
