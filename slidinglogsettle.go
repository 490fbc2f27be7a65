package ratelimit

import (
	"context"
	"math"
	"time"
)

// Refund gives n units back to the entries of key's log that took them:
// the newest entries taken at or before TakenAt's time (any entry still in
// the window without TakenAt), newest first; units that have left the
// window are not given back. It is Settle(ctx, key, n, 0, opts...).
func (l *SlidingLog) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return l.adjust(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle replaces taken, the units an allowed call took for key, by cost.
// A smaller cost gives the difference back as Refund does. A larger cost
// takes the rest at once, as a new entry of the log, past the limit if
// need be (as far as WithMaxDebt allows: the units in the window at most
// the limit plus the debt); on a log of limit entries, the units go to
// the newest entry instead, whose time moves to now, so that a log never
// holds more than limit entries. See Adjuster for the contract; ctx is
// passed to the PolicyFunc, if any.
func (l *SlidingLog) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return l.adjust(ctx, AdjustSettle, key, taken, cost, opts)
}

// adjust applies a Refund or Settle (op) of taken and cost to key, and
// reports it to the adjust hooks, if any.
func (l *SlidingLog) adjust(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if l == nil || l.obs.adjust == nil {
		return l.settle(ctx, key, taken, cost, opts)
	}
	reading := l.base.elapsed()
	res, err := l.settle(ctx, key, taken, cost, opts)
	l.obs.reportAdjust(op, key, taken, cost, opts, res, err, time.Duration(l.base.elapsed()-reading))
	return res, err
}

// settle is Settle without the hooks.
func (l *SlidingLog) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if l == nil || l.logs == nil {
		return Result{}, errLogNotBuilt
	}
	r, err := l.logRate, l.obs.keys.check("SlidingLog", key)
	if err == nil && l.policyFunc != nil {
		r, err = l.policyFuncRate(ctx, key)
	}
	if err != nil {
		return Result{Limit: int(r.limit)}, err
	}
	a, err := settleArgs("SlidingLog", taken, cost, l.policyFunc.takenBound(int(r.limit)), int(r.limit), l.obs.maxSettle, opts)
	if err != nil {
		return Result{Limit: int(r.limit)}, err
	}
	reading := l.base.elapsed()
	sh, now := l.logs.lock(key, reading, l.maxNow)
	res := l.settleAt(r, sh, key, int64(cost-taken), a, now, lagBehind(now, reading))
	sh.mu.Unlock()
	return res, nil
}

// settleAt takes d more units for key (gives -d back for a negative d) in
// sh, locked, at the rate r, at its time now read from a clock lag behind
// it, and returns the key's Result.
func (l *SlidingLog) settleAt(r logRate, sh *tableShard[entryLog], key string, d int64, a adjustment, now, lag int64) Result {
	lg, at := sh.lookup(key)
	lg.sweep(now, r.window)
	switch {
	case d > 0:
		// A debt stops growing at the debtCap's count; units above it
		// already stay.
		if most := l.debt.count(r.limit); lg.sum < most {
			if at == absent {
				lg = sh.spare()
			}
			lg.add(now, min(d, most-lg.sum), r.limit)
			lg.end = now + r.window
			sh.write(key, at, lg, lg.end)
		}
	case d < 0 && lg.n > 0:
		bound := int64(math.MaxInt64)
		if a.hasTaken {
			bound = int64(a.takenAt.Sub(l.base.start))
		}
		lg.giveBack(-d, bound)
		if lg.n == 0 {
			l.logs.remove(sh, key, at)
		} else {
			sh.write(key, at, lg, lg.end)
		}
	}
	return r.result(true, &lg, now, lag)
}
