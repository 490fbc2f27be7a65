package ratelimit

import (
	"context"
	"fmt"
	"math/bits"
	"time"
)

// WithPolicyFunc makes a limiter decide each call by the Policy f returns
// for its key: plans and per-customer overrides that change while the
// program runs.
//
//	limiter, err := ratelimit.NewGCRA(10, time.Minute, // the free plan's
//		ratelimit.WithPolicyFunc(func(ctx context.Context, key string) (ratelimit.Policy, error) {
//			return plans[planOf(key)], nil // the zero Policy: the limiter's own
//		}))
//
// A key f gives the zero Policy has the limiter's own, which its Policy
// method reports. A Policy{Limit: L, Window: W} means L per W: for a token
// bucket, a burst of L refilling one every W/L (NewTokenBucket(Per(L, W),
// L)); for a calendar window, L per the period whose nominal length is W,
// in the zone Policy.Zone names. f runs on every call: it must be fast, safe for
// concurrent use, and must not panic.
//
// A key whose policy changes keeps what it has used: raised from 10 to 100
// a minute, a key that had used all 10 has 90 at once; lowered, it may be
// in debt. A sliding counter's or calendar window's key counts apart in
// each window length, period or zone its policy gives it.
//
// An error of f fails the call with an error wrapping it and ErrPolicy, and
// a policy the constructor would refuse with one wrapping ErrInvalidConfig;
// both name the key and change nothing, and a Guard returns them to the
// caller rather than answer by its failure policy. It applies to every
// limiter of this package and to a Composite's parts (a Fleet's Fallback
// refuses it by name); a nil f is an error.
//
// docs/rollout.md ("A policy per key, in detail") says what a policy means
// for each kind, how each converts a key's state, what a Refund or Settle
// accepts, what is stored on Redis, and how a Composite resolves its parts'
// policies.
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
