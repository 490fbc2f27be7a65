package ratelimit

import (
	"context"
	"math"
	"time"
)

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
