package ratelimit

import (
	"context"
	"fmt"
	"math/bits"
	"time"
)

// WithPolicyFunc makes a limiter decide each call by the policy f returns
// for its key, for plans and per-customer overrides that change
// while the program runs. The constructor's parameters are the limiter's
// Policy, used for keys f gives the zero Policy. It is a SharedOption and
// applies to the fourteen limiters of this package (a Fleet's Fallback,
// whose policy is its share of the backend's, refuses it by name), and a
// nil f is an error.
//
// A Policy{Limit: L, Window: W} means, for each algorithm:
//   - TokenBucket, RedisTokenBucket: capacity L, one token every W/L (in the
//     clock's unit, rounded to nearest), as NewGCRA(L, W) reads them.
//   - GCRA, RedisGCRA: L per period W.
//   - SlidingLog, RedisSlidingLog: L in any span of W (whole milliseconds
//     on Redis), L at most MaxSlidingLogLimit. A key keeps its entries,
//     and each call reads them by its own policy: an entry counts while
//     now < its time + the W in force, until an allowed call drops it
//     (having left) or the key expires, at its newest entry's time + the
//     W of the call that wrote it.
//   - FixedWindow, RedisFixedWindow: L per window of W (whole milliseconds
//     on Redis).
//   - SlidingCounter, RedisSlidingCounter: L per window of W, the previous
//     window weighted (whole milliseconds on Redis). A key's counts are of
//     windows of one length, so a key counts apart in each W its policy
//     gives it (a Redis key, or in process an entry, of its own): a
//     change of W starts from nothing, and a key that comes back to a W
//     finds its counts there until they expire (2W after its window
//     opened). Reset forgets the key in the W of its policy now.
//   - CalendarWindow, RedisCalendarWindow: L per window of the calendar's
//     period that W names by its nominal length (1m, 1h, 24h, 168h or
//     720h; any other W is refused), in the zone Policy.Zone names (""
//     for the limiter's own) and the limiter's weeks. A count means
//     nothing in another window, so a key counts apart in each period and
//     zone its policy gives it: a change of either starts from nothing,
//     and a key that comes back finds its count while that window lasts.
//     Reset forgets the key in the period and zone of its policy now.
//   - Concurrency, RedisConcurrency: L units in flight, in leases of a TTL
//     of W (see NewConcurrency); a key whose policy changes keeps its
//     leases, and the new limit and TTL apply to its next Acquire and
//     Extend.
//
// A policy the constructor would refuse fails the call with an error
// wrapping ErrInvalidConfig that names the key, and changes nothing; so does
// an error of f, which the call's error wraps together with ErrPolicy. A
// Guard returns both to the caller, as errors of one key, without
// answering by its failure policy or counting them in its breaker. f must
// not panic: a panic reaches the caller of Allow.
//
// A Refund or Settle accepts a taken up to 2^52 rather than the key's
// limit, since the units may have been taken under an earlier, larger
// policy; giving back more than the key holds fills it.
//
// A key whose policy changes keeps what it has used, and the new policy
// holds from the key's next call, which writes the key's state converted,
// whatever it decides (a peek or a denial too), so that the key refills
// at the new rate from then on:
//   - Token bucket and GCRA: the units a key has used (what it needs to be
//     full again) are kept as a number of units, converted to the new
//     interval and rounded up, so no unit is ever created by the
//     conversion. Raised from 10 to 100 per minute, a key that had used all
//     10 has 90 at once; lowered from 100 to 10, a key that had used 50 is
//     in debt by 40 and is denied until time pays it off (as after Settle;
//     such a debt may exceed WithMaxDebt's bound, which then only stops a
//     Settle from adding to it).
//     A key that is full is unaffected. On Redis the conversion is exact
//     while the product of the old and new intervals stays below 2^53 µs²
//     (intervals up to about 94 s each); beyond, it may be short by 1 µs.
//   - Fixed window: a key's count is kept; a new limit applies to it at
//     once (a key over a lowered limit is denied until its window ends), and
//     a new window length applies from the key's next window, the open one
//     ending when it was to end. A Refund's TakenAt is compared with the
//     open window's start as the new length places it, since the length a
//     window opened with is not kept: after a window is lengthened, a
//     Refund of units a previous window took may land in the open one.
//
// A limiter with a PolicyFunc keeps the interval (token bucket, GCRA) with
// each key's state: in process 8 more bytes per key; on Redis a token
// bucket's HASH holds tat and interval instead of tat alone, and a GCRA's
// STRING is "tat:interval" (a fixed window's state is unchanged), under the
// default prefix's "keyed:" variant, followed by the constructor's policy
// (see KeyPrefix), so that it never reads the keys of a limiter without a
// PolicyFunc, which it would refuse as another state (ErrCorruptState),
// nor those of another limiter of its kind and another policy of its own
// (a per-second and a per-minute bucket by plan, a daily and a monthly
// quota). Memory does not grow with the number of distinct policies:
// nothing is kept per policy (a sliding counter's or calendar window's key
// keeps a count in each window its policy gave it, until that count
// expires).
//
// A Composite takes parts built WithPolicyFunc, so that a plan sets
// requests and tokens per minute in one decision: each such part resolves
// its key's policy (f with the part's key, after Part.Key) on every call,
// before any part is touched, and decides by it as the limiter alone would,
// converting its key's state the same way. An error of any part's f, or a
// policy its limiter refuses, fails the whole call with the error above
// (naming the part and its key) and changes no part.
func WithPolicyFunc(f PolicyFunc) SharedOption {
	return SharedOption{func(cfg *config) error {
		if f == nil {
			return fmt.Errorf("%w: WithPolicyFunc: nil function", ErrInvalidConfig)
		}
		cfg.policyFunc = f
		return nil
	}}
}

// policyFunc resolves the policy of a call of a limiter built WithPolicyFunc. It
// is immutable and safe for concurrent use.
type policyFunc struct {
	f    PolicyFunc
	name string   // the limiter's name in errors
	keys keyRules // how errors show keys
	def  Policy   // the constructor's
	// check converts a policy to the limiter's limit and param (its
	// interval, or its window, in its clock's unit), refusing one its
	// constructor would refuse, with an error starting with kind.
	check              func(kind string, p Policy) (limit, param int64, err error)
	defLimit, defParam int64
	checked            checkedPolicies // policies check accepted
	// zones names the zones of a calendar window's policies (Zone);
	// nil for every other limiter, which refuses a policy with one.
	zones *zoneNames
}

// newPolicyFunc returns the policyFunc of cfg's PolicyFunc for a limiter
// called name whose constructor's policy is def, checked by check; nil
// without one.
func newPolicyFunc(cfg config, name string, def Policy, check func(string, Policy) (int64, int64, error)) (*policyFunc, error) {
	if cfg.policyFunc == nil {
		return nil, nil
	}
	t := &policyFunc{f: cfg.policyFunc, name: name, keys: cfg.keys, def: def, check: check}
	var err error
	if t.defLimit, t.defParam, err = check("policy", def); err != nil {
		return nil, err
	}
	return t, nil
}

// resolve returns the policy of a call for key, and its limit and param.
// A key longer than the limiter takes (see WithMaxKeyLength) is refused
// before the PolicyFunc is called, whoever asks: a call, or Policies.
func (t *policyFunc) resolve(ctx context.Context, key string) (Policy, int64, int64, error) {
	if t.keys.tooLong(key) {
		return t.def, t.defLimit, t.defParam, t.keys.refusal(t.name, key)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	p, err := t.f(ctx, key)
	if err == nil && (p == Policy{} || p == t.def) {
		return t.def, t.defLimit, t.defParam, nil
	}
	return t.resolveOther(key, p, err)
}

// resolveOther is resolve for a policy other than the limiter's own, or an
// error of the PolicyFunc.
func (t *policyFunc) resolveOther(key string, p Policy, err error) (_ Policy, limit, param int64, _ error) {
	if err != nil {
		return t.def, t.defLimit, t.defParam, fmt.Errorf("%w: %s: key %s: %w", ErrPolicy, t.name, t.keys.quote(key), err)
	}
	if p.Zone != "" {
		if err := t.checkZone(p.Zone); err != nil {
			return t.def, t.defLimit, t.defParam, fmt.Errorf("ratelimit: %s: key %s: %w", t.name, t.keys.quote(key), err)
		}
	}
	if limit, param, ok := t.checked.get(p); ok {
		return p, limit, param, nil
	}
	if limit, param, err = t.check("policy", p); err != nil {
		return t.def, t.defLimit, t.defParam, fmt.Errorf("ratelimit: %s: key %s: %w", t.name, t.keys.quote(key), err)
	}
	t.checked.put(p, limit, param)
	return p, limit, param, nil
}

// checkZone returns an error wrapping ErrInvalidConfig for a policy's
// Zone that the limiter cannot cut windows in: any, for a limiter other
// than a calendar window, and for one a zone that cannot be read or named
// (see zoneNames.zone).
func (t *policyFunc) checkZone(zone string) error {
	if t.zones == nil {
		return fmt.Errorf("%w: policy: a Zone (%q) applies to calendar windows only", ErrInvalidConfig, zone)
	}
	if _, err := t.zones.zone(zone); err != nil {
		return fmt.Errorf("%w: policy: %w", ErrInvalidConfig, err)
	}
	return nil
}

// zoneOf returns the zone of p, a policy resolve gave, for a calendar
// window (the limiter's own for a p without Zone); nil for any other
// limiter.
func (t *policyFunc) zoneOf(p Policy) *calendarZone {
	if t.zones == nil {
		return nil
	}
	if z, err := t.zones.zone(p.Zone); err == nil {
		return z
	}
	return t.zones.own
}

// takenBound is the most units a Refund or Settle may say a call took on
// a limiter of limit: limit, or, with a PolicyFunc (t not nil), 2^52, since
// the units may have been taken under an earlier, larger policy.
func (t *policyFunc) takenBound(limit int) int {
	if t == nil {
		return limit
	}
	return maxSettleCost
}

// The checks of a policy, one per algorithm and backend: each returns the
// limit and the param its limiter's engine reads.

// checkLocalRate checks a token bucket's or GCRA's policy in process: its
// param is the interval in ns.
func checkLocalRate(kind string, p Policy) (int64, int64, error) {
	interval, err := periodInterval(kind, p.Limit, p.Window, time.Nanosecond)
	if err != nil {
		return 0, 0, err
	}
	if err := checkFillTime(kind, p.Limit, interval); err != nil {
		return 0, 0, err
	}
	return int64(p.Limit), interval, nil
}

// checkLocalWindow checks a fixed window's policy in process, as
// NewFixedWindow does: its param is the window in ns.
func checkLocalWindow(kind string, p Policy) (int64, int64, error) {
	if err := checkWindow(kind, p.Limit, p.Window); err != nil {
		return 0, 0, err
	}
	if int64(p.Window) > maxSpan {
		return 0, 0, fmt.Errorf("%w: %s: window %v overflows the clock", ErrInvalidConfig, kind, p.Window)
	}
	return int64(p.Limit), int64(p.Window), nil
}

// checkRedisRate checks a token bucket's or GCRA's policy on Redis, as
// NewRedisGCRA does: its param is the interval in µs.
func checkRedisRate(kind string, p Policy) (int64, int64, error) {
	if err := checkLimit(kind, "limit", p.Limit, maxRedisLimit); err != nil {
		return 0, 0, err
	}
	interval, err := periodInterval(kind, p.Limit, p.Window, time.Microsecond)
	if err != nil {
		return 0, 0, err
	}
	if err := checkRedisSpan(kind, int64(p.Limit), interval); err != nil {
		return 0, 0, err
	}
	return int64(p.Limit), interval, nil
}

// checkRedisWindow checks a fixed window's policy on Redis, as
// NewRedisFixedWindow does: its param is the window in ms.
func checkRedisWindow(kind string, p Policy) (int64, int64, error) {
	if err := checkLimit(kind, "limit", p.Limit, maxRedisLimit); err != nil {
		return 0, 0, err
	}
	if err := checkWindow(kind, p.Limit, p.Window); err != nil {
		return 0, 0, err
	}
	if p.Window%time.Millisecond != 0 {
		return 0, 0, fmt.Errorf("%w: %s: window %v is not a whole number of milliseconds, the unit of Redis expiry", ErrInvalidConfig, kind, p.Window)
	}
	if err := checkRedisSpan(kind, p.Window.Milliseconds(), 1000); err != nil {
		return 0, 0, err
	}
	return int64(p.Limit), p.Window.Milliseconds(), nil
}

// convertUsed returns used (> 0) time units owed at one unit every from,
// as the time owed for the same number of units at one every to, rounded
// up, at most maxSpan.
func convertUsed(used, from, to int64) int64 {
	hi, lo := bits.Mul64(uint64(used), uint64(to))
	if hi >= uint64(from) {
		return maxSpan
	}
	q, r := bits.Div64(hi, lo, uint64(from))
	if r != 0 {
		q++
	}
	if q > maxSpan {
		return maxSpan
	}
	return int64(q)
}
