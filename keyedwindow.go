package ratelimit

import (
	"context"
	"time"
)

// keyedRate returns the windowRate of a call for key, for a FixedWindow
// built WithPolicyFunc: the limiter's own on an error.
func (w *FixedWindow) keyedRate(ctx context.Context, key string) (windowRate, error) {
	_, limit, window, err := w.tiers.resolve(ctx, key)
	return windowRate{limit: limit, window: window}, err
}

// policyAt returns the policy of a call decided at the rate r, for the
// hooks: the limiter's own, or, built WithPolicyFunc, r's limit and window,
// which are those of the policy resolve returned for the call (its own on
// an error too). Allow rebuilds it here rather than carry it, so that a
// limiter without a PolicyFunc carries nothing more.
func (w *FixedWindow) policyAt(r windowRate) Policy {
	if w.tiers == nil || r == w.windowRate {
		return w.obs.policy
	}
	return Policy{Limit: int(r.limit), Window: time.Duration(r.window)}
}
