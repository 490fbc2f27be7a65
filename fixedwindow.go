package ratelimit

import (
	"context"
	"math"
	"time"
)

// FixedWindow is an in-process fixed-window counter per key: at most limit
// units of work per window.
//
// A key's window opens at its first counted request and lasts the window's
// length; Allow(n) is allowed iff the count so far plus n is at most limit.
// Denials do not count, and a denial's RetryAfter is the time until the window
// ends. Around a window's end a key can get up to 2×limit through in a short
// time: limit at the end of one window, limit at the start of the next.
//
// Memory is held for keys with an open window, and for a key whose window
// has ended until it is forgotten, within two windows of its last count as
// the limiter is used, with no background goroutine.
//
// A FixedWindow is safe for concurrent use. The zero value is not usable;
// create one with NewFixedWindow.
type FixedWindow struct {
	base clockBase
	windowRate
	maxNow     int64 // time stands still past this, so window ends cannot overflow
	windows    *keyTable[openWindow]
	obs        observer
	policyFunc *policyFunc // nil unless built WithPolicyFunc
	debt       debtCap     // how far a Settle may count past the limit (WithMaxDebt)
}

// windowRate is the arithmetic of a fixed window's decisions for one
// policy.
type windowRate struct {
	limit  int64
	window int64 // ns
}

// openWindow is a key's window: when it ends (ns) and what it has counted.
type openWindow struct {
	end   int64
	count int64
}

// NewFixedWindow returns an in-process fixed window of limit per window per
// key. It accepts WithClock, WithPolicyFunc, WithMaxDebt, WithMaxSettle,
// WithMaxKeyLength, WithKeysShown, WithHooks and WithName. It returns an
// error wrapping ErrInvalidConfig for a limit <= 0, a window <= 0 or beyond
// about 73 years, or a nil or invalid option.
func NewFixedWindow(limit int, window time.Duration, opts ...Option) (*FixedWindow, error) {
	const kind = "NewFixedWindow"
	cfg, err := applyOptions(kind, opts)
	if err != nil {
		return nil, err
	}
	policy := Policy{Limit: limit, Window: window}
	if _, _, err := checkLocalWindow(kind, policy); err != nil {
		return nil, err
	}
	t, err := newPolicyFunc(cfg, "FixedWindow", policy, checkLocalWindow)
	if err != nil {
		return nil, err
	}
	w := &FixedWindow{
		base:       newClockBase(cfg.clock),
		windowRate: windowRate{limit: int64(limit), window: int64(window)},
		maxNow:     math.MaxInt64 - 2*int64(window),
		windows:    newKeyTable[openWindow](int64(window)),
		obs:        newObserver(cfg, kind, policy, rule{}),
		policyFunc: t,
		debt:       cfg.maxDebt,
	}
	if t != nil {
		// Any window up to maxSpan may open, and a key's window may outlast
		// the table's generations of the constructor's window.
		w.maxNow = math.MaxInt64 - 2*maxSpan
		w.windows.outliving(windowEnd)
	}
	return w, nil
}

// Allow counts n against key's window if that keeps it within the limit. See
// Limiter for the contract. ctx goes to the PolicyFunc, if any
// (WithPolicyFunc); the decision never blocks.
func (w *FixedWindow) Allow(ctx context.Context, key string, n int) (Result, error) {
	res, _, err := w.decide(ctx, key, n)
	return res, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (w *FixedWindow) Decide(ctx context.Context, key string, n int) (Decision, error) {
	res, r, err := w.decide(ctx, key, n)
	if err == errWindowNotBuilt {
		return Decision{}, err
	}
	return w.obs.decision(res, w.policyAt(r), nil), err
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It fails only on a nil or zero-value *FixedWindow, or when the
// key's policy cannot be read.
func (w *FixedWindow) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if w == nil || w.windows == nil {
		return nil, notBuilt("FixedWindow")
	}
	if w.policyFunc == nil {
		return w.obs.own, nil
	}
	p, _, _, err := w.policyFunc.resolve(ctx, key)
	return policyList(p, w.obs.own), err
}

// errWindowNotBuilt is the error of a call on a nil or zero-value
// *FixedWindow: one value, so that Allow stays small enough to inline.
var errWindowNotBuilt = notBuilt("FixedWindow")

// decide is Allow, which also returns the rate of the call. It refuses a
// nil or zero-value w itself, so that Allow stays small enough to inline.
func (w *FixedWindow) decide(ctx context.Context, key string, n int) (Result, windowRate, error) {
	if w == nil || w.windows == nil {
		return Result{}, windowRate{}, errWindowNotBuilt
	}
	// The limiter's own policy, or the key's (WithPolicyFunc): the count
	// of a key's open window is checked against the limit in force, and a
	// window it opens lasts the window in force.
	r := w.windowRate
	err := w.obs.keys.check("FixedWindow", key)
	if err == nil && w.policyFunc != nil {
		r, err = w.policyFuncRate(ctx, key)
	}
	if err == nil {
		err = checkCost(n, int(r.limit))
	}
	if err != nil {
		if w.obs.hooks != nil {
			w.obs.reportPolicy(w.policyAt(r), key, n, Result{Limit: int(r.limit)}, err, 0)
		}
		return Result{Limit: int(r.limit)}, r, err
	}
	reading := w.base.elapsed()
	sh, now := w.windows.lock(key, reading, w.maxNow)
	win, at := sh.lookup(key)
	win, next, allowed := r.take(win, now, n)
	if allowed && n > 0 {
		sh.write(key, at, next, next.end)
	}
	sh.mu.Unlock()
	// A clock behind the shard's time must first catch up.
	lag := lagBehind(now, reading)
	if w.obs.hooks != nil {
		return w.observed(key, n, r, allowed, win, next, now, lag, reading), r, nil
	}
	if !allowed {
		return r.denial(win, now, lag), r, nil
	}
	return r.result(true, next, now, lag), r, nil
}

// observed returns the Result of a decision of Allow's, and reports it to
// the hooks with the time since reading.
func (w *FixedWindow) observed(key string, n int, r windowRate, allowed bool, win, next openWindow, now, lag, reading int64) Result {
	res := r.result(true, next, now, lag)
	if !allowed {
		res = r.denial(win, now, lag)
	}
	w.obs.reportPolicy(w.policyAt(r), key, n, res, nil, time.Duration(w.base.elapsed()-reading))
	return res
}

// policyFuncRate returns the windowRate of a call for key, for a FixedWindow
// built WithPolicyFunc: the limiter's own on an error.
func (w *FixedWindow) policyFuncRate(ctx context.Context, key string) (windowRate, error) {
	_, limit, window, err := w.policyFunc.resolve(ctx, key)
	return windowRate{limit: limit, window: window}, err
}

// policyAt returns the policy of a call decided at the rate r, for the
// hooks: the limiter's own, or, built WithPolicyFunc, r's limit and window,
// which are those of the policy resolve returned for the call (its own on
// an error too). Allow rebuilds it here rather than carry it, so that a
// limiter without a PolicyFunc carries nothing more.
func (w *FixedWindow) policyAt(r windowRate) Policy {
	if w.policyFunc == nil || r == w.windowRate {
		return w.obs.policy
	}
	return Policy{Limit: int(r.limit), Window: time.Duration(r.window)}
}

// take decides n at the shard's time now for a key whose stored window is
// win (the zero openWindow when absent), without writing: it returns the
// window open now (the zero openWindow if none is), the window after
// counting n, and whether n is allowed. A peek is always allowed, even in
// debt.
func (w windowRate) take(win openWindow, now int64, n int) (cur, next openWindow, allowed bool) {
	if !win.open(now) {
		win = openWindow{}
	}
	// Allowed iff n fits in what is left, nothing in debt, where only a
	// peek is; limit-count cannot overflow as count+n could.
	allowed = int64(n) <= max(w.limit-win.count, 0)
	next = win
	if allowed && n > 0 {
		if win.count == 0 {
			next.end = now + w.window
		}
		next.count += int64(n)
	}
	return win, next, allowed
}

// denial is the Result of a take that denied n with the window cur open, at
// the shard's time now read from a clock lag behind it: the call can succeed
// once the window ends.
func (w windowRate) denial(cur openWindow, now, lag int64) Result {
	res := w.result(false, cur, now, lag)
	res.RetryAfter = res.ResetAfter
	return res
}

// result describes a key whose window open at the shard's time now is win
// (the zero openWindow if none is), read from a clock lag behind it. In
// debt, nothing remains.
func (w windowRate) result(allowed bool, win openWindow, now, lag int64) Result {
	res := Result{Allowed: allowed, Limit: int(w.limit), Remaining: int(max(w.limit-win.count, 0))}
	if win.count > 0 {
		res.ResetAfter = time.Duration(win.end - now + lag)
	}
	return res
}

// open reports whether the window is open at now: it has counted something
// and has not ended.
func (win openWindow) open(now int64) bool { return win.end > now && win.count > 0 }

// Refund gives n units back to key's window, if it is the window that took
// them (see TakenAt); a window whose count falls to 0 ends. It is
// Settle(ctx, key, n, 0, opts...).
func (w *FixedWindow) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return w.adjust(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle replaces taken, the units an allowed call counted for key, by
// cost. A smaller cost takes the difference off the window open now, if it
// was open at TakenAt's time (or TakenAt is not given); a window whose count
// falls to 0 ends. A larger cost counts the rest at once, past the limit if
// need be (as far as WithMaxDebt allows), in the window open now or in one
// it opens. See Adjuster for the
// contract; ctx is passed to the PolicyFunc, if any.
func (w *FixedWindow) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return w.adjust(ctx, AdjustSettle, key, taken, cost, opts)
}

// settle is Settle without the hooks.
func (w *FixedWindow) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if w == nil || w.windows == nil {
		return Result{}, notBuilt("FixedWindow")
	}
	r, err := w.windowRate, w.obs.keys.check("FixedWindow", key)
	if err == nil && w.policyFunc != nil {
		r, err = w.policyFuncRate(ctx, key)
	}
	if err != nil {
		return Result{Limit: int(r.limit)}, err
	}
	a, err := settleArgs("FixedWindow", taken, cost, w.policyFunc.takenBound(int(r.limit)), int(r.limit), w.obs.maxSettle, opts)
	if err != nil {
		return Result{Limit: int(r.limit)}, err
	}
	reading := w.base.elapsed()
	sh, now := w.windows.lock(key, reading, w.maxNow)
	res := w.settleAt(r, sh, key, int64(cost-taken), a, now, lagBehind(now, reading))
	sh.mu.Unlock()
	return res, nil
}

// settleAt counts d more units for key (takes -d off for a negative d) in
// sh, locked, at the rate r (the limiter's, or the key's policy's), at its
// time now read from a clock lag behind it, and returns the key's Result.
func (w *FixedWindow) settleAt(r windowRate, sh *tableShard[openWindow], key string, d int64, a adjustment, now, lag int64) Result {
	win, at := sh.lookup(key)
	if !win.open(now) {
		win = openWindow{}
	}
	switch {
	case d > 0:
		if win.count == 0 {
			win.end = now + r.window
		}
		// A debt stops growing at the debtCap's count, at most 2^52 (or
		// the limit, if higher); a count above it already stays.
		if most := w.debt.count(r.limit); win.count < most {
			win.count += min(d, most-win.count)
		}
		sh.write(key, at, win, win.end)
	case d < 0 && win.count > 0 && (!a.hasTaken || w.reading(a.takenAt) >= win.end-r.window):
		if win.count += d; win.count > 0 {
			sh.write(key, at, win, win.end)
		} else {
			win = openWindow{}
			w.windows.remove(sh, key, at)
		}
	}
	return r.result(true, win, now, lag)
}

// reading converts t to the limiter's time base, as a clock reading of t
// would be.
func (w *FixedWindow) reading(t time.Time) int64 { return int64(t.Sub(w.base.start)) }

// Reset ends key's window: it is back to its full limit. ctx is not used.
// It fails only on a nil or zero-value *FixedWindow, with an error wrapping
// ErrInvalidConfig, and on a key longer than WithMaxKeyLength allows
// (ErrInvalidKey).
func (w *FixedWindow) Reset(_ context.Context, key string) error {
	if w == nil || w.windows == nil {
		return notBuilt("FixedWindow")
	}
	if err := w.obs.keys.check("FixedWindow", key); err != nil {
		if w.obs.adjust != nil {
			w.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, err, 0)
		}
		return err
	}
	if w.obs.adjust == nil {
		w.windows.drop(key, w.base.elapsed(), w.maxNow)
		return nil
	}
	reading := w.base.elapsed()
	w.windows.drop(key, reading, w.maxNow)
	w.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, nil, time.Duration(w.base.elapsed()-reading))
	return nil
}

// Policy returns the limit and the window's length; the zero Policy for a
// nil or zero-value *FixedWindow.
func (w *FixedWindow) Policy() Policy {
	if w == nil {
		return Policy{}
	}
	return Policy{Limit: int(w.limit), Window: time.Duration(w.window)}
}

// windowEnd is the expiry of a window: its end.
func windowEnd(win openWindow) int64 { return win.end }

// adjust applies a Refund or Settle (op) of taken and cost to key, and
// reports it to the adjust hooks, if any.
func (w *FixedWindow) adjust(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if w == nil || w.obs.adjust == nil {
		return w.settle(ctx, key, taken, cost, opts)
	}
	reading := w.base.elapsed()
	res, err := w.settle(ctx, key, taken, cost, opts)
	w.obs.reportAdjust(op, key, taken, cost, opts, res, err, time.Duration(w.base.elapsed()-reading))
	return res, err
}

// seedUsed counts at least used units in key's window: in the window open
// now, or, when none is, in one it opens that lasts lasts ns (at most the
// key's window), so that what a backend's window had spent stays spent
// until that window ends, and no longer. It never lowers a count.
func (w *FixedWindow) seedUsed(ctx context.Context, key string, used, lasts int64) {
	if used <= 0 || lasts <= 0 {
		return
	}
	r := w.windowRate
	if w.policyFunc != nil {
		var err error
		if r, err = w.policyFuncRate(ctx, key); err != nil {
			return
		}
	}
	sh, now := w.windows.lock(key, w.base.elapsed(), w.maxNow)
	defer sh.mu.Unlock()
	win, at := sh.lookup(key)
	if !win.open(now) {
		win = openWindow{end: now + min(lasts, r.window)}
	}
	if used = min(used, r.limit); win.count < used {
		win.count = used
		sh.write(key, at, win, win.end)
	}
}
