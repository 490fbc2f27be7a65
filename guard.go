package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// FailurePolicy says how a Guard answers while its backend is failing.
type FailurePolicy int

const (
	// FailOpen allows requests while the backend fails: the limit is
	// lifted, the service stays up. The Result says Allowed, with the
	// backend's Limit (from its Policy, the key's with a PolicyFunc, or
	// else its latest answer) and zeros for the rest. Choose it when an outage of the limiter must not become
	// an outage of the service, as for most APIs.
	FailOpen FailurePolicy = iota
	// FailClosed denies requests while the backend fails, with a
	// RetryAfter (and ResetAfter) of FailClosedRetryAfter, or the rest of
	// the breaker's cool-down while it is open, and the backend's Limit.
	// Choose it when the limit protects something that must not be overrun
	// (a paid upstream, a login endpoint under attack).
	FailClosed
	// FailOver asks the Guard's Fallback limiter instead, typically an
	// in-process TokenBucket sized for one replica's share of the limit.
	// Choose it for a middle way: still limited, roughly. A cost within the
	// backend's limit that the fallback can never take (it exceeds the
	// fallback's limit) is denied, with the RetryAfter FailClosed would
	// give, rather than answered with ErrCostExceedsLimit.
	FailOver
)

// GuardConfig configures a Guard. The zero value means: no timeout of its
// own, fail open, no circuit breaker.
type GuardConfig struct {
	// Timeout bounds each backend call through its context; 0 leaves
	// only the caller's deadline. A go-redis client honours it only with
	// ContextTimeoutEnabled set.
	Timeout time.Duration
	// OnFailure is the policy for calls the backend fails or the open
	// breaker keeps from it.
	OnFailure FailurePolicy
	// Fallback answers under FailOver, and must be nil otherwise.
	Fallback Limiter
	// FailClosedRetryAfter is the RetryAfter of a fail-closed denial
	// while the breaker is closed; 0 means 1 s. While the breaker is open,
	// a fail-closed denial's RetryAfter is the rest of the cool-down.
	FailClosedRetryAfter time.Duration
	// BreakerFailures is how many consecutive backend failures open the
	// circuit breaker; 0 means no breaker.
	BreakerFailures int
	// BreakerCoolDown is how long the breaker stays open before it lets
	// one probe call through; it must be > 0 when BreakerFailures is.
	BreakerCoolDown time.Duration
	// Hooks receives each decision and breaker change; nil means NopHooks.
	Hooks Hooks
	// Name names the Guard in what it reports to Hooks (Decision's
	// Limiter); "" means "Guard".
	Name string
	// Clock times calls and the breaker's cool-down; nil means the system
	// clock.
	Clock Clock
}

// Guard wraps a Limiter whose backend can fail, typically a Redis limiter,
// so that its failures cannot take the service down with it. Each call gets
// the configured timeout; a backend error is answered by the failure policy
// with a nil error and reported to Hooks; and a circuit breaker stops
// calling a backend that keeps failing, answering from the policy at once
// until a probe after the cool-down succeeds.
//
// Some errors say nothing about the backend's health, and pass through to
// the caller as they are, without a policy answer and without counting
// toward the breaker: ErrInvalidCost and ErrCostExceedsLimit (the caller's
// cost), ErrCorruptState (one key's data in Redis is not the limiter's own:
// that call returns the error with Allowed false, and every other key is
// decided as before), ErrPolicy and ErrInvalidConfig (a key's policy could
// not be read or is refused, see WithPolicyFunc, or the backend is not
// built), and the error of a call whose caller gave up (its own ctx is
// done). A nil ctx is an error too, and the backend is not called.
//
// Use it around every limiter that talks to a network. It reports its
// backend's Policy as its own, and its policy answers carry the backend's
// Limit, so that what clients are told does not change while the backend is
// down.
//
// A Guard is safe for concurrent use. Create one with NewGuard.
type Guard struct {
	backend   decorated
	cfg       GuardConfig
	hooks     Hooks // nil when nothing listens
	clock     Clock
	breaker   breaker
	lastLimit atomic.Int64 // the Limit of the latest backend answer
}

// NewGuard returns a Guard around backend. It returns an error wrapping
// ErrInvalidConfig for a nil backend, a negative timeout or retry-after, an
// unknown policy, FailOver without a Fallback or a Fallback without FailOver,
// a negative BreakerFailures, or a breaker without a positive cool-down.
func NewGuard(backend Limiter, cfg GuardConfig) (*Guard, error) {
	const kind = "NewGuard"
	switch {
	case isNil(backend):
		return nil, fmt.Errorf("%w: %s: nil backend", ErrInvalidConfig, kind)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: %s: Timeout %v must be >= 0", ErrInvalidConfig, kind, cfg.Timeout)
	case cfg.FailClosedRetryAfter < 0:
		return nil, fmt.Errorf("%w: %s: FailClosedRetryAfter %v must be >= 0", ErrInvalidConfig, kind, cfg.FailClosedRetryAfter)
	case cfg.OnFailure < FailOpen || cfg.OnFailure > FailOver:
		return nil, fmt.Errorf("%w: %s: unknown failure policy %d", ErrInvalidConfig, kind, cfg.OnFailure)
	case cfg.OnFailure == FailOver && isNil(cfg.Fallback):
		return nil, fmt.Errorf("%w: %s: FailOver needs a Fallback limiter", ErrInvalidConfig, kind)
	case cfg.OnFailure != FailOver && !isNil(cfg.Fallback):
		return nil, fmt.Errorf("%w: %s: a Fallback is used only with OnFailure: FailOver", ErrInvalidConfig, kind)
	case cfg.BreakerFailures < 0:
		return nil, fmt.Errorf("%w: %s: BreakerFailures %d must be >= 0", ErrInvalidConfig, kind, cfg.BreakerFailures)
	case cfg.BreakerFailures > 0 && cfg.BreakerCoolDown <= 0:
		return nil, fmt.Errorf("%w: %s: a breaker needs a BreakerCoolDown > 0, got %v", ErrInvalidConfig, kind, cfg.BreakerCoolDown)
	}
	if cfg.FailClosedRetryAfter == 0 {
		cfg.FailClosedRetryAfter = time.Second
	}
	cfg.Name = cmp.Or(cfg.Name, "Guard")
	g := &Guard{backend: decorate(backend), cfg: cfg, hooks: activeHooks(cfg.Hooks), clock: cfg.Clock}
	if isNil(g.clock) {
		g.clock = systemClock{}
	}
	g.breaker = breaker{threshold: cfg.BreakerFailures, coolDown: cfg.BreakerCoolDown}
	return g, nil
}

// Allow asks the backend, or answers by the failure policy when the backend
// fails or the breaker is open. See Guard for the details.
func (g *Guard) Allow(ctx context.Context, key string, n int) (Result, error) {
	res, _, err := g.AllowBound(ctx, key, n)
	return res, err
}

// AllowBound decides as Allow does, and also returns the index in Policies
// of the policy that bound the decision: the backend's when it answered and
// is a MultiPolicy, that of the policy whose limit an answer by the failure
// policy reports otherwise, and 0 for a backend of one policy.
func (g *Guard) AllowBound(ctx context.Context, key string, n int) (Result, int, error) {
	res, bound, _, err := g.AllowSource(ctx, key, n)
	return res, bound, err
}

// AllowSource decides as AllowBound does, and also says who answered:
// FromBackend (or the backend's own answer, when it is a SourceLimiter), or
// the failure policy's source (FromFailOpen, FromFailClosed, FromFallback)
// when the backend failed or the breaker kept the call from it. Units were
// taken from the backend only when the backend answered.
func (g *Guard) AllowSource(ctx context.Context, key string, n int) (Result, int, Source, error) {
	if g == nil || !g.backend.built() {
		return Result{}, 0, FromBackend, notBuilt("Guard")
	}
	if ctx == nil {
		return Result{Limit: g.backend.policy.Limit}, 0, FromBackend, fmt.Errorf("ratelimit: Guard: %w", errNilContext)
	}
	// The clock is read only for a breaker or a listener.
	var start time.Time
	if g.cfg.BreakerFailures > 0 || g.hooks != nil {
		start = g.clock.Now()
	}
	admitted, wait, change := true, time.Duration(0), transition{}
	if g.cfg.BreakerFailures > 0 {
		admitted, wait, change = g.breaker.admit(start)
		g.report(change)
	}
	if !admitted {
		return g.failed(ctx, key, n, wait, errBreakerOpen, start)
	}

	callCtx := ctx
	if g.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
	}
	res, bound, answered, err := g.backend.allowSource(callCtx, key, n)
	outcome := backendOK
	switch {
	case err == nil:
		g.lastLimit.Store(int64(res.Limit))
	case errors.Is(err, ErrInvalidCost) || errors.Is(err, ErrCostExceedsLimit):
		// The caller's mistake, not the backend's: no failure.
	case errors.Is(err, ErrCorruptState), errors.Is(err, ErrPolicy), errors.Is(err, ErrInvalidConfig):
		// One key's data or policy, or the limiter's configuration, not
		// the backend's health: no verdict, so the breaker neither counts
		// it nor closes on it, and the error goes to the caller.
		outcome = noVerdict
	case ctx.Err() != nil:
		// The caller gave up; that says nothing about the backend.
		outcome = noVerdict
	default:
		outcome = backendFailed
	}
	if g.cfg.BreakerFailures > 0 {
		g.report(g.breaker.record(outcome, g.clock.Now()))
	}
	if outcome != backendFailed {
		// The key's policy, which may call a PolicyFunc, is read only for
		// a listener.
		if g.hooks != nil {
			g.decided(g.backend.policyFor(ctx, key), key, n, res, err, nil, start, FromBackend)
		}
		return res, bound, answered, err
	}
	return g.failed(ctx, key, n, g.cfg.FailClosedRetryAfter, err, start)
}

// failed answers by the failure policy a call the backend failed
// (backendErr) or the open breaker kept from it, and reports it. The key's
// policy is read once, for both the answer's limit and the report.
func (g *Guard) failed(ctx context.Context, key string, n int, retryAfter time.Duration, backendErr error, start time.Time) (Result, int, Source, error) {
	policy := g.backend.policyFor(ctx, key)
	res, source, err := g.byPolicy(ctx, key, n, policy, retryAfter)
	g.decided(policy, key, n, res, err, backendErr, start, source)
	return res, g.policyIndex(res.Limit), source, err
}

// policyIndex returns the index in Policies of the first policy of limit,
// or 0.
func (g *Guard) policyIndex(limit int) int {
	for i, p := range g.backend.policies {
		if p.Limit == limit {
			return i
		}
	}
	return 0
}

// Policies returns the backend's policies (see PoliciesOf).
func (g *Guard) Policies() []NamedPolicy {
	if g == nil {
		return nil
	}
	return g.backend.copyPolicies()
}

// Refund forwards to the backend, which must be an Adjuster, within the
// Guard's Timeout. Adjustments bypass the breaker and the failure policy:
// their errors are returned.
func (g *Guard) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return g.Settle(ctx, key, n, 0, opts...)
}

// Settle forwards to the backend, which must be an Adjuster, within the
// Guard's Timeout. Its errors are returned, as the breaker and the failure
// policy concern Allow only.
func (g *Guard) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	a, err := g.adjuster()
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := g.adjustContext(ctx)
	defer cancel()
	return a.Settle(ctx, key, taken, cost, opts...)
}

// Reset forwards to the backend, which must be an Adjuster, within the
// Guard's Timeout.
func (g *Guard) Reset(ctx context.Context, key string) error {
	a, err := g.adjuster()
	if err != nil {
		return err
	}
	ctx, cancel := g.adjustContext(ctx)
	defer cancel()
	return a.Reset(ctx, key)
}

// adjuster returns the backend as an Adjuster, or an error saying it is
// not one.
func (g *Guard) adjuster() (Adjuster, error) {
	if g == nil || !g.backend.built() {
		return nil, notBuilt("Guard")
	}
	return g.backend.adjuster("Guard")
}

// adjustContext bounds ctx by the Guard's Timeout, if any; a nil ctx is
// left for the backend to refuse.
func (g *Guard) adjustContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil || g.cfg.Timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, g.cfg.Timeout)
}

// errBreakerOpen is the BackendErr Hooks see for calls the open breaker
// kept from the backend.
var errBreakerOpen = errors.New("ratelimit: circuit breaker open")

// byPolicy answers a call the backend could not: allowed, denied with
// retryAfter, or asked of the fallback. policy is the backend's for key.
//
// A cost the backend could never take is refused as the backend would
// refuse it, whatever the policy: with ErrInvalidCost for n < 0, and with
// ErrCostExceedsLimit above the backend's limit when that is known.
func (g *Guard) byPolicy(ctx context.Context, key string, n int, policy Policy, retryAfter time.Duration) (Result, Source, error) {
	limit := g.limit(policy)
	source := policySource[g.cfg.OnFailure]
	if n < 0 || (limit > 0 && n > limit) {
		return Result{Limit: limit}, source, checkCost(n, limit)
	}
	retryAfter = max(retryAfter, time.Nanosecond)
	if n == 0 && g.cfg.OnFailure != FailOver {
		return Result{Allowed: true, Limit: limit}, source, nil // a peek is always allowed
	}
	switch g.cfg.OnFailure {
	case FailOver:
		res, err := g.cfg.Fallback.Allow(ctx, key, n)
		if errors.Is(err, ErrCostExceedsLimit) {
			// The backend could take n, once it is back.
			return Result{Limit: limit, RetryAfter: retryAfter, ResetAfter: retryAfter}, source, nil
		}
		if limit > 0 {
			res.Limit = limit
		}
		return res, source, err
	case FailClosed:
		return Result{Limit: limit, RetryAfter: retryAfter, ResetAfter: retryAfter}, source, nil
	default:
		return Result{Allowed: true, Limit: limit}, source, nil
	}
}

// policySource is the Source of each policy's answers.
var policySource = [...]Source{FailOpen: FromFailOpen, FailClosed: FromFailClosed, FailOver: FromFallback}

// limit returns the backend's limit under policy, its policy for a key
// (the key's, for a backend that chooses its policy per key), or else that
// of its latest answer; 0 while neither is known.
func (g *Guard) limit(policy Policy) int {
	if policy.Limit > 0 {
		return policy.Limit
	}
	return int(g.lastLimit.Load())
}

// Policy returns the backend's Policy, or the zero Policy if the backend
// reports none.
func (g *Guard) Policy() Policy { return g.backend.policy }

// KeyPolicies returns the backend's (see KeyPolicyReporter).
func (g *Guard) KeyPolicies() PolicyFunc {
	if g == nil {
		return nil
	}
	return g.backend.keyPolicies
}

// decided reports a decision under policy, the backend's for key, to the
// hooks, if any.
func (g *Guard) decided(policy Policy, key string, n int, res Result, err, backendErr error, start time.Time, source Source) {
	if g.hooks == nil {
		return
	}
	g.hooks.Decided(Decision{
		Limiter: g.cfg.Name, Policy: policy,
		Key: key, Cost: n, Result: res, Err: err, BackendErr: backendErr,
		Latency: g.clock.Now().Sub(start), Source: source,
	})
}

// report tells the hooks of a breaker change, if there was one.
func (g *Guard) report(t transition) {
	if g.hooks != nil && t.from != t.to {
		g.hooks.BreakerChanged(t.from, t.to)
	}
}

// BreakerState returns the circuit breaker's state now.
func (g *Guard) BreakerState() BreakerState { return g.breaker.current() }
