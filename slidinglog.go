package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"
)

// MaxSlidingLogLimit is the largest limit of a SlidingLog or a
// RedisSlidingLog, whether given to its constructor or by a PolicyFunc.
//
// A sliding log keeps one entry per allowed call within the window, up to
// limit entries per key: 16 bytes each in process (a ring of up to 16,384
// entries, 256 KB), and a HASH field each on Redis (about 77 bytes: 770
// KB for 10,000). A denial of n reads the oldest entries until they hold
// the units that must leave for n to fit, O(n) entries of one unit each,
// which a Redis server reads while it holds every other client: about
// 2.6 µs per entry (0.2 ms for n = 1, 26 ms for n = 10,000, measured on
// Redis 7). 10,000 keeps both within reason; beyond it, a counter of
// constant memory or a GCRA is the better choice.
const MaxSlidingLogLimit = 10000

// SlidingLog is an in-process sliding log per key: at most limit units of
// work in any span of the window's length.
//
// Allow(n) is allowed iff n plus the units allowed in the last window, the
// span (now − window, now], is at most limit: a unit taken at t counts
// while now < t + window, and leaves at t + window exactly. Denials take
// nothing. Remaining is limit minus the units in the window; a denial's
// RetryAfter is exact: the time until enough of the oldest units have left
// for n to fit, were no other call made; ResetAfter is the time until every
// unit has left (the newest entry's time plus the window), 0 with none.
//
// Each key keeps one entry (time and units) per allowed call of n > 0, so
// memory is O(entries in the window), at most limit entries per key (see
// MaxSlidingLogLimit); an allowed call on a busy key costs O(1) amortized
// (it drops the entries that have left and appends its own), a denial
// O(entries). A key whose entries have all left is forgotten, within two
// windows as the limiter is used, with no background goroutine. The ring of
// a forgotten key's entries goes to the next new key of its shard (of 64)
// within a window, so that keys that come and go, like busy keys whose
// logs have grown, allocate nothing; a new key may thus hold a ring longer
// than its own entries need, at most that of the limit.
//
// A clock that steps back never creates a unit: time stands still per
// shard of keys until the clock catches up, entries keep their order, and
// every wait includes the catching up.
//
// A SlidingLog is safe for concurrent use. The zero value is not usable;
// create one with NewSlidingLog.
type SlidingLog struct {
	base clockBase
	logRate
	maxNow     int64 // time stands still past this, so entries' ends cannot overflow
	logs       *keyTable[entryLog]
	obs        observer
	policyFunc *policyFunc // nil unless built WithPolicyFunc
	debt       debtCap     // how far a Settle may count past the limit (WithMaxDebt)
}

// logRate is the arithmetic of a sliding log's decisions for one policy.
type logRate struct {
	limit  int64
	window int64 // ns
}

// NewSlidingLog returns an in-process sliding log of limit per window per
// key. It accepts WithClock, WithPolicyFunc, WithMaxDebt, WithMaxSettle,
// WithMaxKeyLength, WithKeysShown, WithHooks and WithName. It returns an
// error wrapping ErrInvalidConfig for a limit <= 0 or above
// MaxSlidingLogLimit, a window <= 0 or beyond about 73 years, or a nil or
// invalid option.
func NewSlidingLog(limit int, window time.Duration, opts ...Option) (*SlidingLog, error) {
	const kind = "NewSlidingLog"
	cfg, err := applyOptions(kind, opts)
	if err != nil {
		return nil, err
	}
	policy := Policy{Limit: limit, Window: window}
	if _, _, err := checkLocalLog(kind, policy); err != nil {
		return nil, err
	}
	t, err := newPolicyFunc(cfg, "SlidingLog", policy, checkLocalLog)
	if err != nil {
		return nil, err
	}
	l := &SlidingLog{
		base:       newClockBase(cfg.clock),
		logRate:    logRate{limit: int64(limit), window: int64(window)},
		maxNow:     math.MaxInt64 - 2*int64(window),
		logs:       newKeyTable[entryLog](int64(window)).recycling(recycleLog),
		obs:        newObserver(cfg, kind, policy, rule{gradual: true}),
		policyFunc: t,
		debt:       cfg.maxDebt,
	}
	if t != nil {
		// Any window up to maxSpan may apply, and a key's entries may
		// outlast the table's generations of the constructor's window.
		l.maxNow = math.MaxInt64 - 2*maxSpan
		l.logs.outliving(logEnd)
	}
	return l, nil
}

// checkLocalLog checks a sliding log's policy in process, as NewSlidingLog
// does: its param is the window in ns.
func checkLocalLog(kind string, p Policy) (int64, int64, error) {
	if err := checkLogLimit(kind, p.Limit); err != nil {
		return 0, 0, err
	}
	return checkLocalWindow(kind, p)
}

// checkLogLimit refuses a sliding log's limit above MaxSlidingLogLimit.
func checkLogLimit(kind string, limit int) error {
	if limit > MaxSlidingLogLimit {
		return fmt.Errorf("%w: %s: limit %d is above MaxSlidingLogLimit (%d): a sliding log keeps an entry per unit of its limit", ErrInvalidConfig, kind, limit, MaxSlidingLogLimit)
	}
	return nil
}

// Allow takes n for key if n plus the units taken in the last window is at
// most the limit. See Limiter for the contract. ctx goes to the
// PolicyFunc, if any (WithPolicyFunc); the decision never blocks.
func (l *SlidingLog) Allow(ctx context.Context, key string, n int) (Result, error) {
	res, _, _, err := l.decide(ctx, key, n, false)
	return res, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (l *SlidingLog) Decide(ctx context.Context, key string, n int) (Decision, error) {
	res, r, next, err := l.decide(ctx, key, n, true)
	if err == errLogNotBuilt {
		return Decision{}, err
	}
	return withNext(l.obs.decision(res, l.policyAt(r), nil), next), err
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It fails only on a nil or zero-value *SlidingLog, or when the
// key's policy cannot be read.
func (l *SlidingLog) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if l == nil || l.logs == nil {
		return nil, errLogNotBuilt
	}
	if l.policyFunc == nil {
		return l.obs.own, nil
	}
	p, _, _, err := l.policyFunc.resolve(ctx, key)
	return policyList(p, l.obs.own), err
}

// errLogNotBuilt is the error of a call on a nil or zero-value
// *SlidingLog.
var errLogNotBuilt = notBuilt("SlidingLog")

// decide is Allow, which also returns the rate of the call and, when
// wantNext or the limiter has hooks, the wait until its next unit with
// units in the log (see logRate.nextUnit); 0 otherwise.
func (l *SlidingLog) decide(ctx context.Context, key string, n int, wantNext bool) (Result, logRate, time.Duration, error) {
	if l == nil || l.logs == nil {
		return Result{}, logRate{}, 0, errLogNotBuilt
	}
	r := l.logRate
	err := l.obs.keys.check("SlidingLog", key)
	if err == nil && l.policyFunc != nil {
		r, err = l.policyFuncRate(ctx, key)
	}
	if err == nil {
		err = checkCost(n, int(r.limit))
	}
	if err != nil {
		if l.obs.hooks != nil {
			l.obs.reportPolicy(l.policyAt(r), key, n, Result{Limit: int(r.limit)}, err, 0)
		}
		return Result{Limit: int(r.limit)}, r, 0, err
	}
	reading := l.base.elapsed()
	sh, now := l.logs.lock(key, reading, l.maxNow)
	lg, at := sh.lookup(key)
	lg.sweep(now, r.window)
	// Allowed iff n fits in what is left, nothing in debt, where only a
	// peek is.
	allowed := int64(n) <= max(r.limit-lg.sum, 0)
	var res Result
	lag := lagBehind(now, reading)
	if allowed {
		if n > 0 {
			if at == absent {
				lg = sh.spare() // a dropped key's ring, if the shard has one
			}
			lg.add(now, int64(n), r.limit)
			lg.end = now + r.window
			sh.write(key, at, lg, lg.end)
		}
		res = r.result(true, &lg, now, lag)
	} else {
		res = r.denial(&lg, int64(n), now, lag)
	}
	var next time.Duration
	if (wantNext || l.obs.hooks != nil) && lg.sum > 0 {
		next = r.nextUnit(&lg, now, lag) // under the lock: it reads the log
	}
	sh.mu.Unlock()
	if l.obs.hooks != nil {
		l.obs.reportNext(l.policyAt(r), key, n, res, next, nil, time.Duration(l.base.elapsed()-reading))
	}
	return res, r, next, nil
}

// policyFuncRate returns the logRate of a call for key, for a SlidingLog
// built WithPolicyFunc: the limiter's own on an error.
func (l *SlidingLog) policyFuncRate(ctx context.Context, key string) (logRate, error) {
	_, limit, window, err := l.policyFunc.resolve(ctx, key)
	return logRate{limit: limit, window: window}, err
}

// policyAt returns the policy of a call decided at the rate r: the
// limiter's own, or, built WithPolicyFunc, r's limit and window.
func (l *SlidingLog) policyAt(r logRate) Policy {
	if l.policyFunc == nil || r == l.logRate {
		return l.obs.policy
	}
	return Policy{Limit: int(r.limit), Window: time.Duration(r.window)}
}

// result describes a key whose log, swept at the shard's time now, is lg,
// read from a clock lag behind now. In debt, nothing remains.
func (r logRate) result(allowed bool, lg *entryLog, now, lag int64) Result {
	res := Result{Allowed: allowed, Limit: int(r.limit), Remaining: int(max(r.limit-lg.sum, 0))}
	if lg.n > 0 {
		res.ResetAfter = time.Duration(lg.newest() + r.window - now + lag)
	}
	return res
}

// nextUnit returns the wait until one unit more than the log lg, swept at
// now (read from a clock lag behind it) and holding units, has left can
// be taken: until its oldest entry leaves, or, in debt, the oldest entries
// that hold the units beyond the limit and one more. Units taken before
// then leave after those, so no schedule of calls takes more sooner.
func (r logRate) nextUnit(lg *entryLog, now, lag int64) time.Duration {
	return time.Duration(lg.leaves(max(lg.sum-r.limit, 0)+1, r.window) - now + lag)
}

// denial is the Result of a denial of n on the log lg: n fits once the
// oldest units it needs gone have left.
func (r logRate) denial(lg *entryLog, n, now, lag int64) Result {
	res := r.result(false, lg, now, lag)
	res.RetryAfter = time.Duration(lg.leaves(lg.sum+n-r.limit, r.window) - now + lag)
	return res
}

// Reset drops key's log: it is back to its full limit. ctx is not used.
// It fails only on a nil or zero-value *SlidingLog, with an error wrapping
// ErrInvalidConfig, and on a key longer than WithMaxKeyLength allows
// (ErrInvalidKey).
func (l *SlidingLog) Reset(_ context.Context, key string) error {
	if l == nil || l.logs == nil {
		return errLogNotBuilt
	}
	reading := l.base.elapsed()
	err := l.obs.keys.check("SlidingLog", key)
	if err == nil {
		l.logs.drop(key, reading, l.maxNow)
	}
	if l.obs.adjust != nil {
		l.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, err, time.Duration(l.base.elapsed()-reading))
	}
	return err
}

// Policy returns the limit and the window's length; the zero Policy for a
// nil or zero-value *SlidingLog.
func (l *SlidingLog) Policy() Policy {
	if l == nil {
		return Policy{}
	}
	return Policy{Limit: int(l.limit), Window: time.Duration(l.window)}
}

// stopLogRecycling makes each limiter that is more than one of a
// Composite's limiters, and hands the states of forgotten keys to new keys
// (a SlidingLog's rings), stop doing so: the clock reading of its second
// part may turn a shard after its first has read a key's state there, and
// the state, written back, must not be shared with a new key.
func stopLogRecycling(limiters []Limiter) {
	for i, l := range limiters {
		r, ok := l.(recycler)
		if !ok {
			continue
		}
		for _, other := range limiters[:i] {
			if other == l {
				r.stopRecycling()
				break
			}
		}
	}
}

// recycler is an in-process limiter that hands the states of forgotten
// keys to new keys.
type recycler interface{ stopRecycling() }

// stopRecycling makes l hand no more rings of forgotten keys to new keys.
func (l *SlidingLog) stopRecycling() { l.logs.stopRecycling() }

// logEnd is the expiry of a log: when its newest entry leaves.
func logEnd(lg entryLog) int64 { return lg.end }

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
