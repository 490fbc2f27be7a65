package ratelimit

import (
	"context"
	"math"
	"time"
)

// TokenBucket is an in-process token bucket per key.
//
// Each key's bucket starts full with burst tokens and refills continuously
// at the configured Rate, never above burst. Allow(n) takes n tokens if at
// least n are there; a denial takes nothing. Time is kept in integer
// nanoseconds, so decisions never drift.
//
// Memory is held for keys whose bucket is not full, and for a bucket that
// has refilled until it is forgotten, within two fill times of its last
// change as the limiter is used, with no background goroutine.
//
// A TokenBucket is safe for concurrent use. The zero value is not usable;
// create one with NewTokenBucket.
type TokenBucket schedule

// NewTokenBucket returns an in-process token bucket per key that refills at
// rate up to burst tokens, such as NewTokenBucket(PerSecond(10), 20).
//
// It accepts WithClock, WithPolicyFunc, WithMaxDebt, WithMaxSettle,
// WithMaxKeyLength, WithKeysShown, WithHooks and WithName. It returns an
// error wrapping ErrInvalidConfig for an invalid rate (see Rate), a rate
// faster than one token a nanosecond or so slow that one token overflows
// the clock, a burst <= 0, a burst whose fill time overflows, or a nil or
// invalid option. The time per token is rate's period over its units,
// rounded to the nearest nanosecond.
func NewTokenBucket(rate Rate, burst int, opts ...Option) (*TokenBucket, error) {
	const kind = "NewTokenBucket"
	cfg, err := applyOptions(kind, opts)
	if err != nil {
		return nil, err
	}
	interval, err := rate.interval(kind, time.Nanosecond)
	if err != nil {
		return nil, err
	}
	if err := checkLimit(kind, "burst", burst, math.MaxInt64); err != nil {
		return nil, err
	}
	s, err := newEngine(cfg, kind, "TokenBucket", burst, interval)
	if err != nil {
		return nil, err
	}
	return (*TokenBucket)(s), nil
}

// Allow takes n tokens from key's bucket if at least n are there. See Limiter
// for the contract. ctx goes to the PolicyFunc, if any (WithPolicyFunc);
// the decision never blocks.
func (b *TokenBucket) Allow(ctx context.Context, key string, n int) (Result, error) {
	return (*schedule)(b).allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (b *TokenBucket) Decide(ctx context.Context, key string, n int) (Decision, error) {
	s := (*schedule)(b)
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
// Decider). It fails only on a nil or zero-value *TokenBucket, or when the key's
// policy cannot be read.
func (b *TokenBucket) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if !(*schedule)(b).built() {
		return nil, notBuilt("TokenBucket")
	}
	return (*schedule)(b).policies(ctx, key)
}

// Refund gives n tokens back to key, never above the limit. It is
// Settle(ctx, key, n, 0, opts...).
func (b *TokenBucket) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	if !(*schedule)(b).built() {
		return Result{}, notBuilt("TokenBucket")
	}
	return (*schedule)(b).adjust(ctx, AdjustRefund, "TokenBucket", key, n, 0, opts)
}

// Settle replaces taken, the tokens an allowed call took from key, by cost:
// it gives back the difference or takes the rest, into debt if need be, as
// far as WithMaxDebt allows. See Adjuster for the contract; TakenAt does not apply and is ignored, and ctx
// goes to the PolicyFunc, if any (WithPolicyFunc).
func (b *TokenBucket) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	if !(*schedule)(b).built() {
		return Result{}, notBuilt("TokenBucket")
	}
	return (*schedule)(b).adjust(ctx, AdjustSettle, "TokenBucket", key, taken, cost, opts)
}

// Reset returns key to its full limit. ctx is not used. It fails only on a
// nil or zero-value *TokenBucket, with an error wrapping ErrInvalidConfig,
// and on a key longer than WithMaxKeyLength allows (ErrInvalidKey).
func (b *TokenBucket) Reset(_ context.Context, key string) error {
	if !(*schedule)(b).built() {
		return notBuilt("TokenBucket")
	}
	return (*schedule)(b).resetReported("TokenBucket", key)
}

// Policy returns the bucket's capacity and the time it takes to refill from empty to full; the zero Policy for a
// nil or zero-value *TokenBucket.
func (b *TokenBucket) Policy() Policy {
	if !(*schedule)(b).built() {
		return Policy{}
	}
	return (*schedule)(b).policy()
}
