package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// partRate is one part's policy for one call in its engine's numbers: its
// limit, and its param (in process a schedule's interval or a window's
// length, in ns; on Redis µs per unit, or a window in ms; a calendar
// window's period), and a calendar window's zone (nil for any other).
type partRate struct {
	limit, param int64
	zone         *calendarZone
}

// keyedParts is what a Composite keeps when a part was built
// WithPolicyFunc: each part's PolicyFunc resolver (nil for a part of one
// policy), its own policy in its engine's numbers, and the ns of time one
// unit of its param makes for its rule (0 for a window). It is immutable.
type keyedParts struct {
	policyFuncs []*policyFunc
	owns        []partRate
	units       []int64
}

// newKeyedParts returns the keyedParts of n parts, part i's resolver being
// resolver(i), its own policy own(i) and its rule's unit unit(i); nil
// when no part has a resolver.
func newKeyedParts(n int, resolver func(i int) *policyFunc, own func(i int) partRate, unit func(i int) int64) *keyedParts {
	k := &keyedParts{policyFuncs: make([]*policyFunc, n), owns: make([]partRate, n), units: make([]int64, n)}
	keyed := false
	for i := range n {
		k.policyFuncs[i], k.owns[i], k.units[i] = resolver(i), own(i), unit(i)
		keyed = keyed || k.policyFuncs[i] != nil
	}
	if !keyed {
		return nil
	}
	return k
}

// resolve fills call's policies and rates with each part's policy for its
// key (call.keys, filled), and call.tight with the tightest of them. A
// part's PolicyFunc error or a policy its limiter refuses fails the call:
// resolve returns the part's index and an error, wrapping ErrPolicy or
// ErrInvalidConfig, that names the part and its key; call's policies are
// then each part's own for the parts not resolved. c.keyed is not nil.
func (c *Composite) resolve(ctx context.Context, call *partsCall) (int, error) {
	k := c.keyed
	for i, t := range k.policyFuncs {
		if t == nil {
			call.policies[i], call.rates[i] = c.policies[i], k.owns[i]
			continue
		}
		p, limit, param, err := t.resolve(ctx, call.keys[i])
		if err != nil {
			copy(call.policies[i:], c.policies[i:])
			return i, fmt.Errorf("ratelimit: Composite part %q: %w", c.parts[i].Name, err)
		}
		call.policies[i] = NamedPolicy{Name: c.policies[i].Name, Policy: p, PerCall: c.policies[i].PerCall, InFlight: c.policies[i].InFlight}
		call.rates[i] = partRate{limit: limit, param: param, zone: t.zoneOf(p)}
	}
	call.tight, _ = tightest(call.policies)
	return 0, nil
}

// decided returns the policies and rules of a Decision whose parts'
// policies were policies, at rates: own and ownRules, shared, when every
// part's is its own, and new slices otherwise, so that a Decision never
// holds a call's buffer.
func (k *keyedParts) decided(own []NamedPolicy, ownRules []rule, policies []NamedPolicy, rates []partRate) ([]NamedPolicy, []rule) {
	same := true
	for i := range own {
		same = same && policies[i] == own[i] && rates[i] == k.owns[i]
	}
	if same {
		return own, ownRules
	}
	rules := make([]rule, len(own))
	for i := range rules {
		rules[i] = rule{unit: k.units[i] * rates[i].param, inFlight: ownRules[i].inFlight, gradual: ownRules[i].gradual, calendar: ownRules[i].calendar}
	}
	return append([]NamedPolicy(nil), policies...), rules
}

// settleBound returns the part whose bound on a Settle's taken is the
// smallest among the parts that count units, and that bound: its limit,
// or 2^52 for a part built WithPolicyFunc, since its units may have been
// taken under an earlier, larger policy; part 0 and 2^52 when every part
// counts calls.
func (c *Composite) settleBound() (int, int) {
	b, limit := 0, maxSettleCost
	for i, p := range c.policies {
		l := p.Limit
		if c.keyed != nil && c.keyed.policyFuncs[i] != nil {
			l = maxSettleCost
		}
		if !p.PerCall && l < limit {
			b, limit = i, l
		}
	}
	if limit == maxSettleCost {
		b = c.tight // the same part as before per-key policies, for errors
	}
	return b, limit
}

// unit returns the ns one unit of part i's param makes in its rule: 1 µs
// for a token bucket or GCRA, 0 for a window, a sliding log or a
// RedisConcurrency.
func (rp *redisParts) unit(i int) int64 {
	if i == rp.inFlight || rp.parts[i].k.redisRule(1).unit == 0 {
		return 0
	}
	return int64(time.Microsecond)
}
