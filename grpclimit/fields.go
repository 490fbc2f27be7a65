package grpclimit

import (
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
	"google.golang.org/grpc/metadata"
)

// The response metadata keys: gRPC metadata keys are lower case, and these
// are the HTTP field names of package httplimit in that form. Their values
// are formatted by internal/ratefields, as httplimit's are, so that a call
// and a request of the same decision carry the same bytes.
const (
	keyLimit      = "ratelimit-limit"
	keyRemaining  = "ratelimit-remaining"
	keyReset      = "ratelimit-reset"
	keyPolicy     = "ratelimit-policy"
	keyRateLimit  = "ratelimit"
	keyRetryAfter = "retry-after"
)

// HeaderStyle says which rate-limit fields the response metadata carries.
// The zero value is BothHeaders.
type HeaderStyle int

const (
	// BothHeaders sends the legacy fields and the IETF ones.
	BothHeaders HeaderStyle = iota
	// LegacyHeaders sends ratelimit-limit, ratelimit-remaining and
	// ratelimit-reset only.
	LegacyHeaders
	// IETFHeaders sends ratelimit-policy and ratelimit only, as in
	// draft-ietf-httpapi-ratelimit-headers-11.
	IETFHeaders
)

// legacy reports whether s includes the legacy fields.
func (s HeaderStyle) legacy() bool { return s != IETFHeaders }

// ietf reports whether s includes the IETF structured fields.
func (s HeaderStyle) ietf() bool { return s != LegacyHeaders }

// policySet is the formatted values of one list of policies, as a
// Decision lists them. It is immutable.
type policySet struct {
	policies []ratelimit.NamedPolicy // a copy of the Decision's
	vals     []ratefields.Policy
}

// newPolicySet formats the values of policies, those of a Decision, the
// policies that count units of unit (WithQuotaUnit's, or ""). It returns
// an error wrapping ratelimit.ErrInvalidConfig for a policy that cannot be
// sent: a name that is not a non-empty string of printable ASCII, or, in a
// list of several, a limit <= 0.
func newPolicySet(policies []ratelimit.NamedPolicy, unit string) (*policySet, error) {
	for i, p := range policies {
		if !ratefields.ValidName(p.Name) {
			return nil, fmt.Errorf("%w: grpclimit: the limiter's policy %d is named %q; a structured-field string is non-empty printable ASCII", ratelimit.ErrInvalidConfig, i, p.Name)
		}
		if p.Limit <= 0 && len(policies) > 1 {
			return nil, fmt.Errorf("%w: grpclimit: the limiter's policy %d (%q) has limit %d; every policy of a decision with several must have a limit > 0", ratelimit.ErrInvalidConfig, i, p.Name, p.Limit)
		}
	}
	return &policySet{policies: slices.Clone(policies), vals: ratefields.NewPolicies(policies, unit)}, nil
}

// lists reports whether s holds the values of policies.
func (s *policySet) lists(policies []ratelimit.NamedPolicy) bool {
	return slices.Equal(s.policies, policies)
}

// fields formats the response metadata of one Interceptor from each
// call's Decision.
//
// sets caches the values of the last policySets lists of policies
// formatted, so that a limiter whose calls list the same policies (its
// own, a Composite's parts, the plans in force) formats them once; a
// Decision that lists others formats them and takes the place of the
// oldest. The cache changes only what is allocated, never what is sent.
type fields struct {
	style HeaderStyle
	unit  string // WithQuotaUnit's, or ""
	sets  [policySets]atomic.Pointer[policySet]
	next  atomic.Uint32
}

// policySets is how many lists of policies an Interceptor keeps formatted.
const policySets = 4

// policy returns the values of d's policies, as d lists them, and the
// index among them of the policy that bound d: those of the cache when it
// holds them. A Decision of no policy, or of one whose limit is unknown
// (<= 0), gets the values of its Result's limit, with no w, under the name
// "default" or the policy's. It returns an error wrapping
// ratelimit.ErrInvalidConfig when d's policies cannot be sent (see
// newPolicySet) or its PolicyIndex names none of them.
func (f *fields) policy(d *ratelimit.Decision) ([]ratefields.Policy, int, error) {
	switch n := len(d.Policies); {
	case n == 0:
		return []ratefields.Policy{dynamicValues(defaultPolicyName, d.Limit)}, 0, nil
	case d.PolicyIndex < 0 || d.PolicyIndex >= n:
		return nil, 0, fmt.Errorf("%w: grpclimit: the limiter's Decision is bound by policy %d of %d", ratelimit.ErrInvalidConfig, d.PolicyIndex, n)
	case n == 1 && d.Policies[0].Limit <= 0:
		if !ratefields.ValidName(d.Policies[0].Name) {
			return nil, 0, fmt.Errorf("%w: grpclimit: the limiter's policy is named %q; a structured-field string is non-empty printable ASCII", ratelimit.ErrInvalidConfig, d.Policies[0].Name)
		}
		return []ratefields.Policy{dynamicValues(d.Policies[0].Name, d.Limit)}, 0, nil
	}
	for i := range f.sets {
		if s := f.sets[i].Load(); s != nil && s.lists(d.Policies) {
			return s.vals, d.PolicyIndex, nil
		}
	}
	s, err := newPolicySet(d.Policies, f.unit)
	if err != nil {
		return nil, 0, err
	}
	f.sets[f.next.Add(1)%policySets].Store(s)
	return s.vals, d.PolicyIndex, nil
}

// defaultPolicyName names the policy of a Decision that lists none.
const defaultPolicyName = "default"

// dynamicValues returns the values of a policy named name whose limit is
// known only from a Result of limit: its limit-only values, formatted for
// each call.
func dynamicValues(name string, limit int) ratefields.Policy {
	return ratefields.NewPolicy(ratelimit.NamedPolicy{Name: name, Policy: ratelimit.Policy{Limit: limit}}, "")
}

// fieldBlock holds the value slices of one response's metadata in one
// allocation.
type fieldBlock struct {
	vals [6]string
}

// metadata returns the rate-limit metadata for d, the call's Decision,
// whose policies' values are vals (vals[bound] the bound policy's), with
// retry-after (d's RetryAfter in whole seconds, rounded up, at least 1)
// when deny is true. pk is the partition key's parameter (";pk=:...:"), or
// "". These are the rules of package httplimit's header fields, and
// ratefields.AppendValues formats their values: ratelimit lists each
// policy's service limit on an allowed call, the bound one first, each
// with its own r and t, its effective window (ratelimit.Decision's
// NextUnit in whole seconds, rounded up, left out when the Decision does
// not tell it), and the bound one alone on a denial, whose t is the
// retry-after value (draft-ietf-httpapi-ratelimit-headers-11, sections
// 4.1.2 and 6); ratelimit-limit and ratelimit-remaining are the bound
// policy's, and ratelimit-reset the seconds until the key is full again
// (d's ResetAfter), or retry-after on a denial; ratelimit-limit and
// ratelimit-policy are left out while the limit is unknown (<= 0).
//
// The values that change with each call are formatted into one buffer
// and made one string that backs them all; the value slices share one
// backing array, each capped at length 1 so that an append copies instead
// of overwriting a neighbour.
func (f *fields) metadata(vals []ratefields.Policy, bound int, d *ratelimit.Decision, deny bool, pk string) metadata.MD {
	p := &vals[bound]
	var buf [ratefields.BufSize]byte
	b, rem, rst := ratefields.AppendValues(buf[:0], vals, bound, d, deny, f.style.ietf(), pk)
	s := string(b)
	blk := new(fieldBlock)
	md := make(metadata.MD, 6)
	i := 0
	known := p.Limit > 0
	if f.style.legacy() {
		if known {
			i = set(md, &blk.vals, i, keyLimit, p.Q)
		}
		i = set(md, &blk.vals, i, keyRemaining, s[:rem])
		i = set(md, &blk.vals, i, keyReset, s[rem:rst])
	}
	if f.style.ietf() {
		if known {
			i = set(md, &blk.vals, i, keyPolicy, p.List)
		}
		i = set(md, &blk.vals, i, keyRateLimit, s[rst:])
	}
	if deny {
		set(md, &blk.vals, i, keyRetryAfter, s[rem:rst])
	}
	return md
}

// limitOnly returns the metadata that does not depend on a key's state,
// for a call whose cost exceeds the limit: ratelimit-limit and
// ratelimit-policy, as the style allows; nil when the limit is unknown.
func (f *fields) limitOnly(p *ratefields.Policy) metadata.MD {
	if p.Limit <= 0 {
		return nil
	}
	md := make(metadata.MD, 2)
	if f.style.legacy() {
		md[keyLimit] = []string{p.Q}
	}
	if f.style.ietf() {
		md[keyPolicy] = []string{p.List}
	}
	return md
}

// retryAfterOnly returns the metadata of a fail-closed answer: retry-after
// of seconds, at least 1.
func retryAfterOnly(seconds int64) metadata.MD {
	return metadata.MD{keyRetryAfter: []string{strconv.FormatInt(max(seconds, 1), 10)}}
}

// set puts v at vals[i], makes it key's only value in md and returns i+1.
func set(md metadata.MD, vals *[6]string, i int, key, v string) int {
	vals[i] = v
	md[key] = vals[i : i+1 : i+1]
	return i + 1
}
