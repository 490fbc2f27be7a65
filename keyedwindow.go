package ratelimit

import (
	"context"
	"time"
)

// rateOf returns the windowRate of a call for key, with its policy: the
// limiter's own unless it was built WithPolicyFunc.
func (w *FixedWindow) rateOf(ctx context.Context, key string) (windowRate, Policy, error) {
	if w.tiers == nil {
		return w.windowRate, w.Policy(), nil
	}
	p, limit, window, err := w.tiers.resolve(ctx, key)
	return windowRate{limit: limit, window: window}, p, err
}

// allowKeyed is Allow for a FixedWindow built WithPolicyFunc: the count of
// a key's open window is checked against the limit its policy gives now,
// and a window it opens lasts the window its policy gives now.
func (w *FixedWindow) allowKeyed(ctx context.Context, key string, n int) (Result, error) {
	r, p, err := w.rateOf(ctx, key)
	if err == nil {
		err = checkCost(n, int(r.limit))
	}
	if err != nil {
		res := Result{Limit: int(r.limit)}
		if w.obs.hooks != nil {
			w.obs.reportPolicy(p, key, n, res, err, 0)
		}
		return res, err
	}
	reading := w.base.elapsed()
	sh, now := w.windows.lock(key, reading, w.maxNow)
	win, at := sh.lookup(key)
	win, next, allowed := r.take(win, now, n)
	if allowed && n > 0 {
		sh.write(key, at, next, next.end)
	}
	sh.mu.Unlock()
	lag := lagBehind(now, reading)
	res := r.result(true, next, now, lag)
	if !allowed {
		res = r.denial(win, now, lag)
	}
	if w.obs.hooks != nil {
		w.obs.reportPolicy(p, key, n, res, nil, time.Duration(w.base.elapsed()-reading))
	}
	return res, nil
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
