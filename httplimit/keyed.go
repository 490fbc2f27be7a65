package httplimit

import (
	"context"
	"strconv"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit"
)

// keyedFields formats the limit-only field values of a limiter that
// chooses its policy per key (ratelimit.WithPolicyFunc), when
// WithPolicyWindow did not fix w: RateLimit-Limit and the q and w of
// RateLimit-Policy are the key's own.
type keyedFields struct {
	policies ratelimit.PolicyFunc
	name     string // the policy's name in the fields
	// last holds the values of the latest policy formatted, so that the
	// requests of one plan share them: one entry, whatever the number of
	// policies.
	last atomic.Pointer[keyedValues]
}

// keyedValues are the limit-only values of one policy.
type keyedValues struct {
	policy ratelimit.Policy
	values limitValues
}

// limitValuesFor returns the limit-only values of a response to a request
// on key whose Result says limit: those of the key's policy; those of limit
// when WithPolicyWindow fixed w; and those of limit without w when the
// key's policy cannot be read or no longer has that limit (it changed
// since the decision), so that q and w never come from two policies.
func (m *Middleware) limitValuesFor(ctx context.Context, key string, limit int) limitValues {
	k := m.keyed
	if k == nil {
		return m.fields.limitValues(limit)
	}
	p, err := k.policies(ctx, key)
	if err != nil || p.Limit <= 0 || p.Limit != limit {
		p = ratelimit.Policy{Limit: max(limit, 0)} // the limit alone: no w
	}
	if last := k.last.Load(); last != nil && last.policy == p {
		return last.values
	}
	v := &keyedValues{policy: p, values: limitValues{limit: p.Limit, q: strconv.Itoa(p.Limit)}}
	if m.fields.style.ietf() {
		v.values.policy = policyItem(k.name, p.Limit, p.Window)
	}
	k.last.Store(v)
	return v.values
}
