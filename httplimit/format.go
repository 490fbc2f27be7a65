package httplimit

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// format is what a Middleware sends for one list of policies, as a
// Decision lists them: each policy's formatted values (its limit-only
// field values and the start of its RateLimit item, formatted whatever the
// style: a Middleware of legacy fields inside one of IETF fields sets them
// too), and its 429 and 413 answers, made when first needed. It is
// immutable but for those answers, and safe for concurrent use.
type format struct {
	policies []ratelimit.NamedPolicy // as the Decision listed them
	planned  bool                    // the policies name the key's plan (see formatFor)
	parts    []ratefields.Policy     // one per policy; one of limit 0 when none is known
	denied   []atomic.Pointer[reply]
	tooLarge []atomic.Pointer[reply]
}

// formats is how many formats a Middleware keeps, for limiters whose
// policies change with the key (plans).
const formats = 4

// formatFor returns the format of policies: a kept one when it has the
// same policies, planned alike (a plan's name and WithPolicyName's make
// other fields of the same policies), or else a new one, kept in place of
// the oldest. An error
// says that policies cannot be sent: several policies, one of which has
// no limit or a name that is not a structured-field string.
//
// planned says that policies name the key's plan (see WithPlanName): a
// name WithPolicyName does not replace.
func (m *Middleware) formatFor(policies []ratelimit.NamedPolicy, planned bool) (*format, error) {
	for i := range m.formats {
		if f := m.formats[i].Load(); f != nil && f.planned == planned && samePolicies(f.policies, policies) {
			return f, nil
		}
	}
	f, err := m.newFormat(policies, planned)
	if err != nil {
		return nil, err
	}
	m.formats[m.nextFormat.Add(1)%formats].Store(f)
	return f, nil
}

// samePolicies reports whether a and b list the same policies: at once
// when they are one slice, as a limiter's own policies are on every call.
func samePolicies(a, b []ratelimit.NamedPolicy) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0] || slices.Equal(a, b))
}

// newFormat formats policies. A limiter of one policy (or of none known)
// goes by the name WithPolicyName gave, or its own; WithPolicyWindow sets
// its w.
func (m *Middleware) newFormat(policies []ratelimit.NamedPolicy, planned bool) (*format, error) {
	f := &format{policies: policies, planned: planned}
	if len(policies) <= 1 {
		p := ratelimit.NamedPolicy{Name: m.policyName}
		if len(policies) == 1 {
			p = policies[0]
			if m.policyNameSet && !planned || p.Name == "" {
				p.Name = m.policyName
			}
		}
		if err := checkPolicyName(p.Name); err != nil {
			return nil, fmt.Errorf("%w (the limiter's policy)", err)
		}
		if m.windowSet {
			p.Window = m.window
		}
		f.parts = []ratefields.Policy{ratefields.NewPolicy(p, m.quotaUnit)}
	} else {
		for i, p := range policies {
			if err := checkPolicyName(p.Name); err != nil {
				return nil, fmt.Errorf("%w (the limiter's policy %d)", err, i)
			}
			if p.Limit <= 0 {
				return nil, fmt.Errorf("%w: httplimit: the limiter's policy %d (%q) has limit %d; every policy of a limiter with several must have a limit > 0", ratelimit.ErrInvalidConfig, i, p.Name, p.Limit)
			}
		}
		f.parts = ratefields.NewPolicies(policies, m.quotaUnit)
	}
	f.denied = make([]atomic.Pointer[reply], len(f.parts))
	f.tooLarge = make([]atomic.Pointer[reply], len(f.parts))
	return f, nil
}

// part returns the values of policy i, or nil when there is no such
// policy.
func (f *format) part(i int) *ratefields.Policy {
	if i < 0 || i >= len(f.parts) {
		return nil
	}
	return &f.parts[i]
}

// deniedBy returns the 429 answer naming policy i (which exists).
func (f *format) deniedBy(i int) *reply {
	if r := f.denied[i].Load(); r != nil {
		return r
	}
	r := newDenied(f.parts[i].Name, f.parts[i].InFlight)
	f.denied[i].Store(&r)
	return &r
}

// tooLargeBy returns the 413 answer naming policy i (which exists).
func (f *format) tooLargeBy(i int) *reply {
	if r := f.tooLarge[i].Load(); r != nil {
		return r
	}
	r := newTooLarge(f.parts[i].Name)
	f.tooLarge[i].Store(&r)
	return &r
}
