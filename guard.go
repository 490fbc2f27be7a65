package ratelimit

import (
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
	// lifted, the service stays up. The Result says Allowed, with the Limit
	// of the backend's latest answer and zeros for the rest. Choose it when an outage of the
	// limiter must not become an outage of the service (seed 002's advice
	// for most APIs).
	FailOpen FailurePolicy = iota
	// FailClosed denies requests while the backend fails, with a
	// RetryAfter of FailClosedRetryAfter, or the rest of the breaker's
	// cool-down while it is open. Choose it when
	// the limit protects something that must not be overrun (a paid
	// upstream, a login endpoint under attack).
	FailClosed
	// FailOver asks the Guard's Fallback limiter instead, typically an
	// in-process TokenBucket sized for one replica's share of the limit.
	// Choose it for a middle way: still limited, roughly.
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
	// Clock times calls and the breaker's cool-down; nil means the system
	// clock.
	Clock Clock
}

// Guard wraps a Limiter whose backend can fail, typically a Redis limiter,
// so that its failures cannot take the service down with it. Each call gets
// the configured timeout; a backend error (not ErrInvalidCost or
// ErrCostExceedsLimit, which pass through) is answered by the failure
// policy with a nil error and reported to Hooks; and a circuit breaker stops
// calling a backend that keeps failing, answering from the policy at once
// until a probe after the cool-down succeeds.
//
// Use it around every limiter that talks to a network. A call whose caller
// gave up (its own ctx is done) returns the ctx's error rather than a policy
// answer, and does not count against the backend.
//
// A Guard is safe for concurrent use. Create one with NewGuard.
type Guard struct {
	backend   Limiter
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
	g := &Guard{backend: backend, cfg: cfg, hooks: activeHooks(cfg.Hooks), clock: cfg.Clock}
	if isNil(g.clock) {
		g.clock = systemClock{}
	}
	g.breaker = breaker{threshold: cfg.BreakerFailures, coolDown: cfg.BreakerCoolDown}
	return g, nil
}

// Allow asks the backend, or answers by the failure policy when the backend
// fails or the breaker is open. See Guard for the details.
func (g *Guard) Allow(ctx context.Context, key string, n int) (Result, error) {
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
		res, source, err := g.byPolicy(ctx, key, n, wait)
		g.decided(key, n, res, err, errBreakerOpen, start, source)
		return res, err
	}

	callCtx := ctx
	if g.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
	}
	res, err := g.backend.Allow(callCtx, key, n)
	outcome := backendOK
	switch {
	case err == nil:
		g.lastLimit.Store(int64(res.Limit))
	case errors.Is(err, ErrInvalidCost) || errors.Is(err, ErrCostExceedsLimit):
		// The caller's mistake, not the backend's: no failure.
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
		g.decided(key, n, res, err, nil, start, FromBackend)
		return res, err
	}
	backendErr := err
	res, source, err := g.byPolicy(ctx, key, n, g.cfg.FailClosedRetryAfter)
	g.decided(key, n, res, err, backendErr, start, source)
	return res, err
}

// errBreakerOpen is the BackendErr Hooks see for calls the open breaker
// kept from the backend.
var errBreakerOpen = errors.New("ratelimit: circuit breaker open")

// byPolicy answers a call the backend could not: allowed, denied with
// retryAfter, or asked of the fallback.
func (g *Guard) byPolicy(ctx context.Context, key string, n int, retryAfter time.Duration) (Result, Source, error) {
	limit := int(g.lastLimit.Load())
	switch g.cfg.OnFailure {
	case FailOver:
		res, err := g.cfg.Fallback.Allow(ctx, key, n)
		return res, FromFallback, err
	case FailClosed:
		return Result{Limit: limit, RetryAfter: max(retryAfter, time.Nanosecond)}, FromFailClosed, nil
	default:
		return Result{Allowed: true, Limit: limit}, FromFailOpen, nil
	}
}

// decided reports a decision to the hooks, if any.
func (g *Guard) decided(key string, n int, res Result, err, backendErr error, start time.Time, source Source) {
	if g.hooks == nil {
		return
	}
	g.hooks.Decided(Decision{
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
