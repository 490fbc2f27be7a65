package ratelimit

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
