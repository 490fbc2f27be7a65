package ratelimit

import (
	"context"
	"time"
)

// rateOf returns the windowRate of a call for key, with its policy: the
// limiter's own unless it was built WithPolicyFunc.
func (w *FixedWindow) rateOf(ctx context.Context, key string) (windowRate, Policy, error) {
	if w.tiers == nil {
		return w.windowRate, w.obs.policy, nil
	}
	p, limit, window, err := w.tiers.resolve(ctx, key)
	return windowRate{limit: limit, window: window}, p, err
}

// keyedRate is rateOf without the policy, for Allow's short way.
func (w *FixedWindow) keyedRate(ctx context.Context, key string) (windowRate, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	limit, window, err := w.tiers.limits(ctx, key)
	return windowRate{limit: limit, window: window}, err
}

// policyAt returns the policy of a call decided at the rate r,
// for the hooks: the limiter's own, or, built WithPolicyFunc, r's limit
// and window.
func (w *FixedWindow) policyAt(r windowRate) Policy {
	if w.tiers == nil || r == w.windowRate {
		return w.obs.policy
	}
	return Policy{Limit: int(r.limit), Window: time.Duration(r.window)}
}

// KeyPolicies returns the function that gives the policy of a call by key
// when w was built WithPolicyFunc, and nil otherwise (see
// KeyPolicyReporter).
func (w *FixedWindow) KeyPolicies() PolicyFunc {
	if w == nil {
		return nil
	}
	return w.tiers.policyFunc()
}
