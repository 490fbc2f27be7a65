package ratelimit

import (
	"context"
	"math"
	"time"
)

// SlidingCounter is an in-process sliding-window counter per key: about
// limit units of work in any span of the window's length W, in O(1) memory
// per key, weighting the previous fixed window by the share of it still
// inside the sliding window.
//
// A key's windows have length W and are anchored at its first counted
// request, as FixedWindow's are: the window open at now is [s, s+W), the
// previous one [s−W, s). The key keeps s, cur (the units counted in the
// window open now) and prev (the units counted in the previous window; 0
// if it counted none). When now reaches s+W, cur becomes prev and a new
// window opens at s+W with cur = 0; from s+2W on the key holds nothing,
// and its next counted request anchors a new window at its now. With
// e = now − s (0 <= e < W, in ns),
//
//	estimate = cur + ⌈prev × (W − e) / W⌉
//
// computed exactly in integers, and Allow(n) is allowed iff estimate + n <=
// limit; Remaining is max(0, limit − estimate) after the call. A denial
// takes nothing and writes nothing, and its RetryAfter is the least wait
// after which the same n would be allowed were no other call made: within
// the window open now, or in the next one with prev = cur. ResetAfter is
// the time until the estimate is 0: s+2W−now when cur > 0, s+W−now when
// only prev > 0, else 0.
//
// Against the true sliding count (what a SlidingLog counts): at an allowed
// call the units taken in (now−W, now], n included, are at most limit +
// ⌊prev × e / W⌋, which is below limit + prev and so at most 2×limit − 1:
// it allows more than a sliding log when the previous window's units came
// late in it. It denies a call that a sliding log would allow only when
// the previous window's units still in the span are fewer than
// ⌈prev × (W − e) / W⌉, which happens when they came early in it.
//
// Refund and Settle give units back only to the window that took them
// (see TakenAt): the window open now, or the previous one. Memory is held
// for a key until its estimate is 0 again, and forgotten within a few
// windows of that as the limiter is used, with no background goroutine.
//
// A SlidingCounter is safe for concurrent use. The zero value is not
// usable; create one with NewSlidingCounter.
type SlidingCounter struct {
	base clockBase
	counterRate
	maxNow     int64 // time stands still past this, so window ends cannot overflow
	keys       *keyTable[counterState]
	obs        observer
	policyFunc *policyFunc // nil unless built WithPolicyFunc
	segs       windowSegs  // the segs of its keys' windows in its table, built WithPolicyFunc
	debt       debtCap     // how far a Settle may count past the limit (WithMaxDebt)
}

// NewSlidingCounter returns an in-process sliding-window counter of limit
// per window per key. It accepts WithClock, WithPolicyFunc, WithMaxDebt,
// WithMaxSettle, WithMaxKeyLength, WithKeysShown, WithHooks and WithName.
// It returns an error wrapping ErrInvalidConfig for a limit <= 0, a window
// <= 0 or beyond about 73 years, or a nil or invalid option.
//
// Built WithPolicyFunc, each call is decided at its key's policy in force
// (its limit L and window W): a key counts apart in each W its policy
// gives it (see WithPolicyFunc), as a RedisSlidingCounter's does, and
// keeps s, prev and cur across a change of L.
func NewSlidingCounter(limit int, window time.Duration, opts ...Option) (*SlidingCounter, error) {
	const kind = "NewSlidingCounter"
	cfg, err := applyOptions(kind, opts)
	if err != nil {
		return nil, err
	}
	policy := Policy{Limit: limit, Window: window}
	if _, _, err := checkLocalWindow(kind, policy); err != nil {
		return nil, err
	}
	t, err := newPolicyFunc(cfg, "SlidingCounter", policy, checkLocalWindow)
	if err != nil {
		return nil, err
	}
	c := &SlidingCounter{
		base:        newClockBase(cfg.clock),
		counterRate: counterRate{limit: int64(limit), window: int64(window)},
		maxNow:      math.MaxInt64 - 2*int64(window),
		keys:        newKeyTable[counterState](2 * int64(window)),
		obs:         newObserver(cfg, kind, policy, rule{gradual: true}),
		policyFunc:  t,
		debt:        cfg.maxDebt,
	}
	if t != nil {
		// Any window up to maxSpan may open, and a key may outlast the
		// table's generations of the constructor's window.
		c.maxNow = math.MaxInt64 - 2*maxSpan
		c.keys.outliving(counterExpiry)
	}
	return c, nil
}

// Allow counts n against key's sliding window if that keeps its estimate
// within the limit. See Limiter for the contract. ctx goes to the
// PolicyFunc, if any (WithPolicyFunc); the decision never blocks.
func (c *SlidingCounter) Allow(ctx context.Context, key string, n int) (Result, error) {
	res, _, _, err := c.decide(ctx, key, n, false)
	return res, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (c *SlidingCounter) Decide(ctx context.Context, key string, n int) (Decision, error) {
	res, r, next, err := c.decide(ctx, key, n, true)
	if err == errCounterNotBuilt {
		return Decision{}, err
	}
	return withNext(c.obs.decision(res, c.policyAt(r), nil), next), err
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It fails only on a nil or zero-value *SlidingCounter, or when
// the key's policy cannot be read.
func (c *SlidingCounter) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if c == nil || c.keys == nil {
		return nil, errCounterNotBuilt
	}
	if c.policyFunc == nil {
		return c.obs.own, nil
	}
	p, _, _, err := c.policyFunc.resolve(ctx, key)
	return policyList(p, c.obs.own), err
}

// errCounterNotBuilt is the error of a call on a nil or zero-value
// *SlidingCounter: one value, so that Allow stays small enough to inline.
var errCounterNotBuilt = notBuilt("SlidingCounter")

// decide is Allow, which also returns the rate of the call and, when
// wantNext or the limiter has hooks, the wait until its next unit with
// units counted (see counterRate.nextUnit); 0 otherwise. It refuses a nil
// or zero-value c itself, so that Allow stays small enough to inline.
func (c *SlidingCounter) decide(ctx context.Context, key string, n int, wantNext bool) (Result, counterRate, time.Duration, error) {
	if c == nil || c.keys == nil {
		return Result{}, counterRate{}, 0, errCounterNotBuilt
	}
	r := c.counterRate
	err := c.obs.keys.check("SlidingCounter", key)
	if err == nil && c.policyFunc != nil {
		r, err = c.policyFuncRate(ctx, key)
	}
	if err == nil {
		err = checkCost(n, int(r.limit))
	}
	if err != nil {
		if c.obs.hooks != nil {
			c.obs.reportPolicy(c.policyAt(r), key, n, Result{Limit: int(r.limit)}, err, 0)
		}
		return Result{Limit: int(r.limit)}, r, 0, err
	}
	reading := c.base.elapsed()
	tk := c.tableKey(key, r.window)
	sh, now := c.keys.lock(tk, reading, c.maxNow)
	st, at := sh.lookup(tk)
	cur, next, left, allowed := r.take(st, now, n)
	if allowed && n > 0 {
		sh.write(tk, at, next, next.expiry)
	}
	sh.mu.Unlock()
	lag := lagBehind(now, reading)
	var res Result
	if allowed {
		// n took its units off what was left: no second estimate.
		cur, left = next, left-int64(n)
		res = r.resultLeft(true, cur, left, now, lag)
	} else {
		res = r.denial(cur, left, now, int64(n), lag)
	}
	var wait time.Duration
	if (wantNext || c.obs.hooks != nil) && left < r.limit {
		wait = r.nextUnit(cur, left, now, lag)
	}
	if c.obs.hooks != nil {
		c.obs.reportNext(c.policyAt(r), key, n, res, wait, nil, time.Duration(c.base.elapsed()-reading))
	}
	return res, r, wait, nil
}

// tableKey returns the key of key's state in the table for a call of the
// window window (ns): key, or, built WithPolicyFunc, the window and ":"
// then key, so that a key counts apart in each window its policy gives
// it, as on Redis.
func (c *SlidingCounter) tableKey(key string, window int64) string {
	if c.policyFunc == nil {
		return key
	}
	return c.segs.of(window) + key
}

// policyFuncRate returns the counterRate of a call for key, for a
// SlidingCounter built WithPolicyFunc: the limiter's own on an error.
func (c *SlidingCounter) policyFuncRate(ctx context.Context, key string) (counterRate, error) {
	_, limit, window, err := c.policyFunc.resolve(ctx, key)
	return counterRate{limit: limit, window: window}, err
}

// policyAt returns the policy of a call decided at the rate r, for the
// hooks: the limiter's own, or, built WithPolicyFunc, r's limit and window.
func (c *SlidingCounter) policyAt(r counterRate) Policy {
	if c.policyFunc == nil || r == c.counterRate {
		return c.obs.policy
	}
	return Policy{Limit: int(r.limit), Window: time.Duration(r.window)}
}

// Refund gives n units back to the window of key that took them (see
// TakenAt): the window open now, or the previous one; without TakenAt, the
// window open now. It is Settle(ctx, key, n, 0, opts...).
func (c *SlidingCounter) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return c.adjust(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle replaces taken, the units an allowed call counted for key, by
// cost. A smaller cost takes the difference off the window that took the
// units, if it is the window open now or the previous one at TakenAt's time
// (the window open now when TakenAt is not given), never below 0. A larger
// cost counts the rest at once in the window open now (or one it opens),
// past the limit if need be, as far as WithMaxDebt allows. See Adjuster for
// the contract; ctx is passed to the PolicyFunc, if any.
func (c *SlidingCounter) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return c.adjust(ctx, AdjustSettle, key, taken, cost, opts)
}

// adjust applies a Refund or Settle (op) of taken and cost to key, and
// reports it to the adjust hooks, if any.
func (c *SlidingCounter) adjust(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if c == nil || c.obs.adjust == nil {
		return c.settle(ctx, key, taken, cost, opts)
	}
	reading := c.base.elapsed()
	res, err := c.settle(ctx, key, taken, cost, opts)
	c.obs.reportAdjust(op, key, taken, cost, opts, res, err, time.Duration(c.base.elapsed()-reading))
	return res, err
}

// settle is Settle without the hooks.
func (c *SlidingCounter) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if c == nil || c.keys == nil {
		return Result{}, errCounterNotBuilt
	}
	r, err := c.counterRate, c.obs.keys.check("SlidingCounter", key)
	if err == nil && c.policyFunc != nil {
		r, err = c.policyFuncRate(ctx, key)
	}
	if err != nil {
		return Result{Limit: int(r.limit)}, err
	}
	a, err := settleArgs("SlidingCounter", taken, cost, c.policyFunc.takenBound(int(r.limit)), int(r.limit), c.obs.maxSettle, opts)
	if err != nil {
		return Result{Limit: int(r.limit)}, err
	}
	reading := c.base.elapsed()
	tk := c.tableKey(key, r.window)
	sh, now := c.keys.lock(tk, reading, c.maxNow)
	res := c.settleAt(r, sh, tk, int64(cost-taken), a, now, lagBehind(now, reading))
	sh.mu.Unlock()
	return res, nil
}

// settleAt counts d more units for key, the table's (see tableKey), (takes -d off for a negative d) in
// sh, locked, at the rate r, at its time now read from a clock lag behind
// it, and returns the key's Result.
func (c *SlidingCounter) settleAt(r counterRate, sh *tableShard[counterState], key string, d int64, a adjustment, now, lag int64) Result {
	st, at := sh.lookup(key)
	st = r.at(st, now)
	switch {
	case d > 0:
		if st.empty() {
			st.start = now
		}
		st.expiry = st.start + 2*r.window
		// A debt stops growing at the debtCap's count; a count above it
		// already stays.
		if most := c.debt.count(r.limit); st.cur < most {
			st.cur += min(d, most-st.cur)
		}
		sh.write(key, at, st, st.expiry)
	case d < 0 && !st.empty():
		taken := now
		if a.hasTaken {
			taken = c.reading(a.takenAt)
		}
		switch {
		case taken >= st.start:
			st.cur = max(st.cur+d, 0)
		case taken >= st.start-r.window:
			st.prev = max(st.prev+d, 0)
		default:
			return r.result(true, st, now, lag)
		}
		if st.empty() {
			c.keys.remove(sh, key, at)
			st = counterState{}
		} else {
			sh.write(key, at, st, st.expiry)
		}
	}
	return r.result(true, st, now, lag)
}

// reading converts t to the limiter's time base, as a clock reading of t
// would be.
func (c *SlidingCounter) reading(t time.Time) int64 { return int64(t.Sub(c.base.start)) }

// Reset forgets key: it is back to its full limit. Built WithPolicyFunc,
// it forgets the key's counts in the window of its policy now (a key
// counts apart in each window, see WithPolicyFunc), which ctx goes to the
// PolicyFunc to read. It fails on a nil or zero-value *SlidingCounter,
// with an error wrapping ErrInvalidConfig, on a key longer than
// WithMaxKeyLength allows (ErrInvalidKey), and when the key's policy
// cannot be read.
func (c *SlidingCounter) Reset(ctx context.Context, key string) error {
	if c == nil || c.keys == nil {
		return errCounterNotBuilt
	}
	reading := c.base.elapsed()
	tk := key
	err := c.obs.keys.check("SlidingCounter", key)
	if err == nil && c.policyFunc != nil {
		var r counterRate
		if r, err = c.policyFuncRate(ctx, key); err == nil {
			tk = c.tableKey(key, r.window)
		}
	}
	if err == nil {
		c.keys.drop(tk, reading, c.maxNow)
	}
	if c.obs.adjust != nil {
		c.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, err, time.Duration(c.base.elapsed()-reading))
	}
	return err
}

// Policy returns the limit and the window's length W; the zero Policy for
// a nil or zero-value *SlidingCounter.
func (c *SlidingCounter) Policy() Policy {
	if c == nil {
		return Policy{}
	}
	return Policy{Limit: int(c.limit), Window: time.Duration(c.window)}
}
