package ratelimit

import (
	"context"
	"time"
)

// GCRA is an in-process generic cell rate algorithm limiter: limit requests per
// period per key, with bursts of up to limit.
//
// It keeps one timestamp per key, the theoretical arrival time, and decides
// exactly as NewTokenBucket(Per(limit, period), limit): with an emission
// interval T = period/limit, a request for n at now moves the key's time to
// max(tat, now) + n·T and is allowed iff that is at most limit·T ahead of
// now.
//
// A GCRA is safe for concurrent use. The zero value is not usable; create one
// with NewGCRA.
type GCRA schedule

// NewGCRA returns an in-process GCRA allowing limit per period per key.
//
// The emission interval period/limit is rounded to the nearest nanosecond.
// It accepts WithClock, WithPolicyFunc, WithMaxDebt, WithMaxSettle,
// WithMaxKeyLength, WithKeysShown, WithHooks and WithName. It returns an
// error wrapping ErrInvalidConfig for a limit <= 0, a period <= 0, a
// period/limit under 1 ns, or a nil or invalid option.
func NewGCRA(limit int, period time.Duration, opts ...Option) (*GCRA, error) {
	const kind = "NewGCRA"
	cfg, err := applyOptions(kind, opts)
	if err != nil {
		return nil, err
	}
	interval, err := periodInterval(kind, limit, period, time.Nanosecond)
	if err != nil {
		return nil, err
	}
	s, err := newEngine(cfg, kind, "GCRA", limit, interval)
	if err != nil {
		return nil, err
	}
	return (*GCRA)(s), nil
}

// Allow decides n for key. See Limiter for the contract. ctx goes to the
// PolicyFunc, if any (WithPolicyFunc); the decision never blocks.
func (g *GCRA) Allow(ctx context.Context, key string, n int) (Result, error) {
	return (*schedule)(g).allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (g *GCRA) Decide(ctx context.Context, key string, n int) (Decision, error) {
	s := (*schedule)(g)
	if s.built() && s.policyFunc == nil {
		// The limiter's own policy, without one more frame to copy the
		// Decision through.
		res, err := s.allow(ctx, key, n)
		return oneDecision(res, s.obs.own, s.obs.rules), err
	}
	return s.decide(ctx, key, n)
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It fails only on a nil or zero-value *GCRA, or when the key's
// policy cannot be read.
func (g *GCRA) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if !(*schedule)(g).built() {
		return nil, notBuilt("GCRA")
	}
	return (*schedule)(g).policies(ctx, key)
}

// Refund gives n tokens back to key, never above the limit. It is
// Settle(ctx, key, n, 0, opts...).
func (g *GCRA) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	if !(*schedule)(g).built() {
		return Result{}, notBuilt("GCRA")
	}
	return (*schedule)(g).adjust(ctx, AdjustRefund, "GCRA", key, n, 0, opts)
}

// Settle replaces taken, the tokens an allowed call took from key, by cost:
// it gives back the difference or takes the rest, into debt if need be, as
// far as WithMaxDebt allows. See Adjuster for the contract; TakenAt does not apply and is ignored, and ctx
// goes to the PolicyFunc, if any (WithPolicyFunc).
func (g *GCRA) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	if !(*schedule)(g).built() {
		return Result{}, notBuilt("GCRA")
	}
	return (*schedule)(g).adjust(ctx, AdjustSettle, "GCRA", key, taken, cost, opts)
}

// Reset returns key to its full limit. ctx is not used. It fails only on a
// nil or zero-value *GCRA, with an error wrapping ErrInvalidConfig, and on a
// key longer than WithMaxKeyLength allows (ErrInvalidKey).
func (g *GCRA) Reset(_ context.Context, key string) error {
	if !(*schedule)(g).built() {
		return notBuilt("GCRA")
	}
	return (*schedule)(g).resetReported("GCRA", key)
}

// Policy returns the limit and the time a key takes to go from exhausted to its full limit (limit emission intervals); the zero Policy for a nil or
// zero-value *GCRA.
func (g *GCRA) Policy() Policy {
	if !(*schedule)(g).built() {
		return Policy{}
	}
	return (*schedule)(g).policy()
}
