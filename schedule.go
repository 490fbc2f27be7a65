package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"
)

// schedule is the in-process engine behind TokenBucket and GCRA. For each key
// it keeps one integer: the theoretical arrival time (tat), the instant in
// nanoseconds at which the key's bucket is full again. With T nanoseconds per
// token and a capacity of C tokens, the bucket holds C - (tat-now)/T tokens at
// now; taking n moves tat to max(tat, now) + n·T, and that is allowed iff the
// new tat is at most tau = C·T ahead of now. That is a token bucket and GCRA
// at once, in integers only, so no decision ever drifts.
//
// A Settle that takes more than the key holds leaves it in debt, with tat more
// than tau ahead of now, but at most its debtCap's span ahead: only peeks are
// allowed until time has paid the debt off. A refund moves tat back, never
// before now.
//
// A key whose tat has passed is full, the same as an absent key, so its tat is
// also its expiry in the keyTable, and a key a refund fills is removed. Time
// stands still for the keys of a shard while the clock reads earlier than the
// shard's latest call, so a clock going backwards creates no tokens.
//
// A schedule is safe for concurrent use.
type schedule struct {
	base clockBase
	rate
	maxNow int64 // time stands still past this, so tat arithmetic cannot overflow
	tats   *keyTable[int64]
	obs    observer // set by the limiter's constructor
	debt   debtCap  // how far a Settle may take a key into debt (WithMaxDebt)
	// policyFunc decides instead when the limiter was built WithPolicyFunc;
	// nil otherwise.
	policyFunc *policyFuncSchedule
}

// newEngine returns the engine of a limiter built by kind (its name in
// configuration errors) and called name in Allow's errors, with capacity
// tokens one every interval ns, under cfg: a schedule, which hands its
// calls to its PolicyFunc engine when built WithPolicyFunc.
func newEngine(cfg config, kind, name string, capacity int, interval int64) (*schedule, error) {
	s, err := newSchedule(kind, capacity, interval, cfg.clock)
	if err != nil {
		return nil, err
	}
	s.obs = newObserver(cfg, kind, s.policy(), rule{unit: interval})
	s.debt = cfg.maxDebt
	t, err := newPolicyFunc(cfg, name, s.policy(), checkLocalRate)
	if err != nil {
		return nil, err
	}
	if t != nil {
		s.policyFunc = newPolicyFuncSchedule(s, t)
	}
	return s, nil
}

// built reports whether s is an engine a constructor made: not nil, nor
// a zero value.
func (s *schedule) built() bool { return s != nil && s.tats != nil }

// settleAny replaces taken by cost for key on the engine that decides (see
// Adjuster). name names the limiter in errors.
func (s *schedule) settleAny(ctx context.Context, name, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if err := s.obs.keys.check(name, key); err != nil {
		return Result{Limit: int(s.capacity)}, err
	}
	if s.policyFunc != nil {
		return s.policyFunc.settle(ctx, key, taken, cost, opts)
	}
	return s.settle(name, key, taken, cost, opts)
}

// resetAny forgets key on the engine that decides: it is full again.
func (s *schedule) resetAny(key string) {
	if s.policyFunc != nil {
		s.policyFunc.reset(key)
		return
	}
	s.reset(key)
}

// decide decides n for key on the engine that decides, and returns its
// Decision. Like allow, it refuses a nil or zero-value engine itself, so
// that Decide stays small enough to inline.
func (s *schedule) decide(ctx context.Context, key string, n int) (Decision, error) {
	if !s.built() {
		return Decision{}, errEngineNotBuilt
	}
	if s.policyFunc == nil {
		res, err := s.allow(ctx, key, n)
		return oneDecision(res, s.obs.own, s.obs.rules), err
	}
	if err := s.obs.keys.check(s.obs.name, key); err != nil {
		return oneDecision(s.refuseKey(key, n, err), s.obs.own, s.obs.rules), err
	}
	res, p, interval, err := s.policyFunc.decide(ctx, key, n)
	return s.obs.decision(res, p, s.rulesOf(interval)), err
}

// rulesOf returns the rules of a decision at interval (ns per unit): the
// limiter's own when it is its own interval.
func (s *schedule) rulesOf(interval int64) []rule {
	if interval == s.interval {
		return s.obs.rules
	}
	return []rule{{unit: interval}}
}

// policies returns the policies of key's calls (see Decider). s is built.
func (s *schedule) policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if s.policyFunc == nil {
		return s.obs.own, nil
	}
	p, _, _, err := s.policyFunc.policyFunc.resolve(ctx, key)
	return policyList(p, s.obs.own), err
}

// rate is the arithmetic of a schedule's decisions for one policy: a bucket
// of capacity tokens refilling one every interval nanoseconds.
type rate struct {
	interval int64 // T: nanoseconds per token, >= 1
	capacity int64 // C: tokens, >= 1
	tau      int64 // C·T: nanoseconds from empty to full
}

// newSchedule returns the engine of a bucket of capacity tokens (> 0, which
// its callers have checked) refilling one token every interval nanoseconds,
// rejecting an interval or a fill time the clock cannot hold. kind names the
// limiter in errors.
func newSchedule(kind string, capacity int, interval int64, clock Clock) (*schedule, error) {
	if interval < 1 {
		return nil, fmt.Errorf("%w: %s: one token every %d ns is shorter than the clock's 1 ns unit", ErrInvalidConfig, kind, interval)
	}
	if err := checkFillTime(kind, capacity, interval); err != nil {
		return nil, err
	}
	tau := int64(capacity) * interval
	return &schedule{
		base:   newClockBase(clock),
		rate:   rate{interval: interval, capacity: int64(capacity), tau: tau},
		maxNow: math.MaxInt64 - 2*tau,
		tats:   newKeyTable[int64](tau).outliving(tatExpiry),
	}, nil
}

// errEngineNotBuilt is the error of Allow on a nil or zero-value
// *TokenBucket or *GCRA.
var errEngineNotBuilt = fmt.Errorf("%w: a nil or zero-value *TokenBucket or *GCRA; create one with NewTokenBucket or NewGCRA", ErrInvalidConfig)

// allow decides n for key, or hands the call to the PolicyFunc engine. See
// Limiter for the contract. A TokenBucket's or GCRA's Allow calls it
// directly, whatever the receiver, so that Allow stays small enough to
// inline: a nil or zero-value engine is refused here.
// A limiter with hooks reports the decision; one without pays the check of
// a nil field.
func (s *schedule) allow(ctx context.Context, key string, n int) (Result, error) {
	switch {
	case s == nil || s.tats == nil:
		return Result{}, errEngineNotBuilt
	case s.obs.keys.tooLong(key):
		err := s.obs.keys.refusal(s.obs.name, key)
		return s.refuseKey(key, n, err), err
	case s.policyFunc != nil:
		return s.policyFunc.allow(ctx, key, n)
	}
	if err := checkCost(n, int(s.capacity)); err != nil {
		if s.obs.hooks != nil {
			s.obs.reportPolicy(s.obs.policy, key, n, Result{Limit: int(s.capacity)}, err, 0)
		}
		return Result{Limit: int(s.capacity)}, err
	}
	reading := s.base.elapsed()
	sh, now := s.tats.lock(key, reading, s.maxNow)
	tat, w := sh.lookup(key)
	tat, next, allowed := s.take(tat, now, n)
	if allowed && n > 0 {
		sh.write(key, w, next, next)
	}
	sh.mu.Unlock()
	// A clock behind the shard's time must first catch up: that lag is part
	// of every wait.
	lag := lagBehind(now, reading)
	if s.obs.hooks != nil {
		return s.observed(key, n, allowed, tat, next, now, lag, reading), nil
	}
	if !allowed {
		return s.denial(tat, next, now, lag), nil
	}
	return s.result(true, next, now, lag), nil
}

// refuseKey returns the Result of a call on a key the limiter's rules
// refuse with err, and reports it to the hooks, if any.
func (s *schedule) refuseKey(key string, n int, err error) Result {
	res := Result{Limit: int(s.capacity)}
	if s.obs.hooks != nil {
		s.obs.reportPolicy(s.obs.policy, key, n, res, err, 0)
	}
	return res
}

// observed returns the Result of a decision of allow's, and reports it to
// the hooks with the time since reading.
func (s *schedule) observed(key string, n int, allowed bool, cur, next, now, lag, reading int64) Result {
	res := s.result(true, next, now, lag)
	if !allowed {
		res = s.denial(cur, next, now, lag)
	}
	s.obs.reportPolicy(s.obs.policy, key, n, res, nil, time.Duration(s.base.elapsed()-reading))
	return res
}

// take decides n at the shard's time now for a key whose stored tat is tat
// (0 when absent), without writing: it returns the key's tat in force, the
// tat after taking n, and whether n is allowed. A peek is always allowed,
// even in debt.
func (s rate) take(tat, now int64, n int) (cur, next int64, allowed bool) {
	cur = max(tat, now) // a tat that has passed is full
	next = cur + int64(n)*s.interval
	// Allowed iff next-now <= tau, but a peek (next == cur) always is, even
	// in debt: for n > 0, next > cur, so the max changes nothing.
	return cur, next, next-now <= max(s.tau, cur-now)
}

// denial is the Result of a take that denied n, returning cur and next, at
// the shard's time now read from a clock lag behind it: the key stays at
// cur, and n fits once next is at most tau ahead.
func (s rate) denial(cur, next, now, lag int64) Result {
	res := s.result(false, cur, now, lag)
	res.RetryAfter = time.Duration(lag + next - s.tau - now)
	return res
}

// result describes a key whose tat is tat (>= now) at the shard's time now,
// read from a clock lag behind it. In debt, nothing remains.
func (s rate) result(allowed bool, tat, now, lag int64) Result {
	ahead := tat - now
	if ahead > 0 {
		ahead += lag
	}
	return Result{
		Allowed:    allowed,
		Limit:      int(s.capacity),
		Remaining:  int(max(s.tau-(tat-now), 0) / s.interval),
		ResetAfter: time.Duration(ahead),
	}
}

// settle replaces taken by cost for key (see Adjuster). kind names the
// limiter in errors.
func (s *schedule) settle(kind, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if _, err := settleArgs(kind, taken, cost, int(s.capacity), int(s.capacity), s.obs.maxSettle, opts); err != nil {
		return Result{Limit: int(s.capacity)}, err
	}
	reading := s.base.elapsed()
	sh, now := s.tats.lock(key, reading, s.maxNow)
	res := s.settleLocked(sh, key, int64(cost-taken), now, lagBehind(now, reading))
	sh.mu.Unlock()
	return res, nil
}

// settleLocked takes d more units from key (gives -d back for a negative
// d) in sh, locked, at its time now read from a clock lag behind it, and
// returns the key's Result. A tat that passes now is full: the key goes.
func (s *schedule) settleLocked(sh *tableShard[int64], key string, d, now, lag int64) Result {
	tat, w := sh.lookup(key)
	tat = max(tat, now)
	switch {
	case d > 0:
		tat = s.owe(tat, now, d, s.debt.span(s.tau))
		sh.write(key, w, tat, tat)
	case d < 0:
		// -d <= capacity, so -d·T <= tau cannot overflow.
		if tat = max(tat+d*s.interval, now); tat == now {
			s.tats.remove(sh, key, w)
		} else {
			sh.write(key, w, tat, tat)
		}
	}
	return s.result(true, tat, now, lag)
}

// owe returns tat (>= now) moved d > 0 tokens later, in debt if need be,
// but never more than span (<= maxSpan; see debtCap.span) ahead of now, nor
// so far that take's arithmetic could overflow; a tat further ahead already
// stays where it is.
func (s rate) owe(tat, now, d, span int64) int64 {
	// now <= maxNow leaves room for 2·tau above it.
	most := now + min(span, math.MaxInt64-s.tau-now)
	if d > (most-tat)/s.interval {
		return max(most, tat)
	}
	return tat + d*s.interval
}

// reset forgets key: it is full again.
func (s *schedule) reset(key string) {
	s.tats.drop(key, s.base.elapsed(), s.maxNow)
}

// tatExpiry is the expiry of a tat: the tat itself, when the key is full.
func tatExpiry(tat int64) int64 { return tat }

// policy is the capacity and the time from empty to full.
func (s *schedule) policy() Policy {
	return Policy{Limit: int(s.capacity), Window: time.Duration(s.tau)}
}

// adjust applies a Refund or Settle (op) of taken and cost to key, and
// reports it to the adjust hooks, if any. s is built; name names the
// limiter in errors.
func (s *schedule) adjust(ctx context.Context, op AdjustOp, name, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if s.obs.adjust == nil {
		return s.settleAny(ctx, name, key, taken, cost, opts)
	}
	reading := s.base.elapsed()
	res, err := s.settleAny(ctx, name, key, taken, cost, opts)
	s.obs.reportAdjust(op, key, taken, cost, opts, res, err, time.Duration(s.base.elapsed()-reading))
	return res, err
}

// resetReported forgets key on the engine that decides, and reports it to
// the adjust hooks, if any; it refuses a key the limiter's rules refuse,
// whose error names the limiter name. s is built.
func (s *schedule) resetReported(name, key string) error {
	err := s.obs.keys.check(name, key)
	if s.obs.adjust == nil {
		if err == nil {
			s.resetAny(key)
		}
		return err
	}
	reading := s.base.elapsed()
	if err == nil {
		s.resetAny(key)
	}
	s.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, err, time.Duration(s.base.elapsed()-reading))
	return err
}

// policyFuncSchedule is the engine of a TokenBucket or GCRA built
// WithPolicyFunc: a schedule whose rate is chosen per call, and which keeps
// with each key's tat the interval it was written with, so that a key whose
// policy changes keeps the tokens it has used (see WithPolicyFunc). It is
// safe for concurrent use.
type policyFuncSchedule struct {
	base       clockBase
	def        rate // the limiter's own
	policyFunc *policyFunc
	tats       *keyTable[policyFuncTat]
	obs        observer
	debt       debtCap // s's: in multiples of each key's own limit
}

// policyFuncTat is a key's state: its tat and the interval (ns per token) it
// was written with.
type policyFuncTat struct {
	tat      int64
	interval int64
}

// policyFuncMaxNow is where time stands still for a policyFuncSchedule: past it,
// tat arithmetic with any tau (<= maxSpan) could overflow.
const policyFuncMaxNow = math.MaxInt64 - 2*maxSpan

// newPolicyFuncSchedule returns the PolicyFunc engine of s's limiter, deciding by t;
// the table's generations last s's fill time.
func newPolicyFuncSchedule(s *schedule, t *policyFunc) *policyFuncSchedule {
	return &policyFuncSchedule{
		base:       s.base,
		policyFunc: t,
		def:        s.rate,
		tats:       newKeyTable[policyFuncTat](s.tau).outliving(policyFuncExpiry),
		obs:        s.obs,
		debt:       s.debt,
	}
}

// policyFuncExpiry is the expiry of a key's state: its tat, when it is full.
func policyFuncExpiry(st policyFuncTat) int64 { return st.tat }

// rateOf returns the rate of a call for key.
func (k *policyFuncSchedule) rateOf(ctx context.Context, key string) (rate, error) {
	_, limit, interval, err := k.policyFunc.resolve(ctx, key)
	return rate{interval: interval, capacity: limit, tau: limit * interval}, err
}

// carry returns the tat of a key stored as st, at the shard's time now, for
// a call at rate r: st's tat, with the time it owes converted to r's
// interval when it was written at another.
func (r rate) carry(st policyFuncTat, now int64) int64 {
	if st.tat <= now || st.interval == r.interval {
		return max(st.tat, now)
	}
	return r.convert(st, now)
}

// convert is carry for a key written at another interval than r's.
func (r rate) convert(st policyFuncTat, now int64) int64 {
	return now + convertUsed(st.tat-now, st.interval, r.interval)
}

// converts reports whether a key stored as st is read, at the shard's time
// now, by carry's conversion: it is not full, and was written at another
// interval than r's.
func (r rate) converts(st policyFuncTat, now int64) bool {
	return st.tat > now && st.interval != r.interval
}

// allow decides n for key at the rate its policy gives. See Limiter.
func (k *policyFuncSchedule) allow(ctx context.Context, key string, n int) (Result, error) {
	res, _, _, err := k.decide(ctx, key, n)
	return res, err
}

// decide is allow, which also returns the policy of the call and its
// interval (ns per unit).
func (k *policyFuncSchedule) decide(ctx context.Context, key string, n int) (Result, Policy, int64, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	// The limiter's own policy the short way, inline: calling resolve
	// instead measured 2-3 ns more a call on the hot key.
	var r rate
	p, err := k.policyFunc.f(ctx, key)
	if err == nil && (p == Policy{} || p == k.policyFunc.def) {
		r, p = k.def, k.policyFunc.def
	} else {
		var limit, interval int64
		p, limit, interval, err = k.policyFunc.resolveOther(key, p, err)
		r = rate{interval: interval, capacity: limit, tau: limit * interval}
	}
	if err == nil {
		err = checkCost(n, int(r.capacity))
	}
	if err != nil {
		res := Result{Limit: int(r.capacity)}
		if k.obs.hooks != nil {
			k.obs.reportPolicy(p, key, n, res, err, 0)
		}
		return res, p, r.interval, err
	}
	reading := k.base.elapsed()
	sh, now := k.tats.lock(key, reading, policyFuncMaxNow)
	st, w := sh.lookup(key)
	cur, next, allowed := r.take(r.carry(st, now), now, n)
	switch {
	case allowed && n > 0:
		sh.write(key, w, policyFuncTat{tat: next, interval: r.interval}, next)
	case r.converts(st, now):
		// A peek or a denial takes nothing, but the new policy holds
		// from this call on: the key keeps what it owes at the new
		// interval, and refills at the new rate.
		sh.write(key, w, policyFuncTat{tat: cur, interval: r.interval}, cur)
	}
	sh.mu.Unlock()
	lag := lagBehind(now, reading)
	if k.obs.hooks != nil {
		res := r.result(true, next, now, lag)
		if !allowed {
			res = r.denial(cur, next, now, lag)
		}
		k.obs.reportPolicy(p, key, n, res, nil, time.Duration(k.base.elapsed()-reading))
		return res, p, r.interval, nil
	}
	if !allowed {
		return r.denial(cur, next, now, lag), p, r.interval, nil
	}
	return r.result(true, next, now, lag), p, r.interval, nil
}

// settle replaces taken by cost for key at the rate its policy gives (see
// Adjuster).
func (k *policyFuncSchedule) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	r, err := k.rateOf(ctx, key)
	if err != nil {
		return Result{Limit: int(r.capacity)}, err
	}
	if _, err := settleArgs(k.policyFunc.name, taken, cost, k.policyFunc.takenBound(int(r.capacity)), int(r.capacity), k.obs.maxSettle, opts); err != nil {
		return Result{Limit: int(r.capacity)}, err
	}
	reading := k.base.elapsed()
	sh, now := k.tats.lock(key, reading, policyFuncMaxNow)
	res := k.settleLocked(r, sh, key, int64(cost-taken), now, lagBehind(now, reading))
	sh.mu.Unlock()
	return res, nil
}

// settleLocked takes d more units from key (gives -d back for a negative
// d) at the rate r in sh, locked, at its time now read from a clock lag
// behind it, and returns the key's Result: the key's state converted to r
// first, as every call of the key does.
func (k *policyFuncSchedule) settleLocked(r rate, sh *tableShard[policyFuncTat], key string, d, now, lag int64) Result {
	st, w := sh.lookup(key)
	tat := r.carry(st, now)
	switch {
	case d > 0:
		tat = r.owe(tat, now, d, k.debt.span(r.tau))
		sh.write(key, w, policyFuncTat{tat: tat, interval: r.interval}, tat)
	case d < 0:
		// Giving back at least what the key owes fills it; less moves
		// tat back by -d·T <= tat-now+T, which cannot overflow.
		if -d > (tat-now)/r.interval {
			tat = now
		} else {
			tat = max(tat+d*r.interval, now)
		}
		if tat == now {
			k.tats.remove(sh, key, w)
		} else {
			sh.write(key, w, policyFuncTat{tat: tat, interval: r.interval}, tat)
		}
	case r.converts(st, now):
		// Nothing settled, but the new policy holds from this call on.
		sh.write(key, w, policyFuncTat{tat: tat, interval: r.interval}, tat)
	}
	return r.result(true, tat, now, lag)
}

// reset forgets key: it is full again.
func (k *policyFuncSchedule) reset(key string) {
	k.tats.drop(key, k.base.elapsed(), policyFuncMaxNow)
}
