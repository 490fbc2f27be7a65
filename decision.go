package ratelimit

import (
	"context"
	"time"
)

// Decision is everything one call decided, as every layer tells it: the
// Result that Allow returns, the policy that bound it, every policy that
// applied, who answered, and, through a Shadow, whether the call was let
// through against a denial. Every limiter, Composite and decorator of
// this package returns one from Decide; a decorator builds its Decision
// from its backend's, and httplimit and grpclimit read nothing else. Its
// NextUnit method tells, policy by policy, how long the key is held to the
// units it has left.
//
// The zero Decision is that of a call nothing decided: no policy, Source
// FromBackend.
type Decision struct {
	// Result is what Allow returns for the call.
	Result
	// Policy is the policy that bound the decision, whose numbers Result
	// shows (Result.Limit is its Limit, except on a call that failed
	// before any policy was known). For a Composite, the part that bound
	// it (see Composite); for a limiter built WithPolicyFunc, the key's
	// policy for this call. A limiter of one policy names it "default".
	// It is Policies[PolicyIndex], or the zero NamedPolicy when Policies is
	// empty.
	Policy NamedPolicy
	// Policies lists every policy that applied to the call, in order:
	// one for a single limiter, a Composite's parts. It may be shared
	// between calls and must not be modified.
	Policies []NamedPolicy
	// PolicyIndex is the index of Policy in Policies: Policy is
	// Policies[PolicyIndex]. It is 0 when Policies is empty.
	PolicyIndex int
	// Parts holds, for a Composite's own answer, each part's Result, in
	// the order of Policies: a part that would have allowed a denied call
	// reports its state untouched, with RetryAfter 0. It is nil for every
	// other limiter, whose Result is its one policy's, and for an answer a
	// decorator made without its backend, but for a Guard's answer by a
	// fallback Composite, or by parts of policies of their own (see
	// Guard): then each part's Result as that answer has it.
	Parts []Result
	// Source says who answered: FromBackend when the limiter itself
	// decided, or the decorator that answered in its place (a Guard's
	// failure policy, a DenyCache's remembered denial, a Shadow that let a
	// denial through). Units were taken only when Source is FromBackend
	// and Allowed: only such calls may be refunded or settled.
	Source Source
	// WouldDeny reports that a Shadow, not enforcing, let through a call
	// its backend denied (Source FromShadow). The call took nothing.
	WouldDeny bool
	// Enforced is the answer an enforcing limiter gives the call: the
	// backend's denial when WouldDeny, and Result otherwise.
	Enforced Result

	// rules say how each policy's state moves between calls, for a
	// DenyCache; nil when not known (a Limiter of another package).
	rules []rule
	// next is, when nextSet, the bound policy's wait until its next unit
	// as the limiter tells it (see NextUnit), in place of what its rule
	// and Result tell: a sliding window with units taken sets it, a
	// Prefetch's answer from a block, and a Guard's from its fallback.
	next    time.Duration
	nextSet bool
	// partNext holds, beside Parts, each part's wait until its next unit
	// as its limiter tells it, in the order of Parts: > 0 where told (a
	// sliding window with units taken, whose Result does not tell it),
	// 0 where the part's rule and Result tell it instead. nil when no part
	// tells one; it may be shared between copies of the Decision and must
	// not be modified.
	partNext []time.Duration
}

// rule is how the state of one policy of a call moves while nothing else
// touches it, which lets a DenyCache tell from one denial what the same
// policy would answer later.
type rule struct {
	// unit is the time one unit takes to come back, in ns, for a token
	// bucket or GCRA (whose key owes ResetAfter); 0 for a fixed window
	// (whose count stays until ResetAfter).
	unit int64
	// inFlight marks a concurrency limiter's policy, whose units come back
	// whenever a lease is released: no denial tells what the key will
	// answer later.
	inFlight bool
	// gradual marks a sliding window's policy (a sliding log, a sliding
	// counter), whose units come back bit by bit as the window slides: a
	// denial tells only that the same cost is denied until its RetryAfter.
	gradual bool
	// calendar marks a calendar window's policy, whose windows open at the
	// calendar's bounds, not at the first unit taken: an empty key's
	// Result does not tell when the window open now ends.
	calendar bool
}

// Decider is a Limiter that tells its whole Decision: every limiter,
// Composite and decorator of this package. The decorators ask their
// backend's Decide, not its Allow: a type that embeds a limiter of this
// package to change what its Allow answers must change Decide as well.
//
// Decide decides as Allow does (Allow returns its Decision's Result). It is
// safe for concurrent use.
//
// Policies returns the policies that apply to key's calls, in the order a
// Decision lists them, without deciding anything or asking a backend:
// for a limiter built WithPolicyFunc, the key's policy (and its error,
// wrapping ErrPolicy or ErrInvalidConfig, when the key's policy cannot be
// read). A Guard uses it to tell its clients the backend's policy while
// the backend is down. The slice may be shared and must not be modified.
type Decider interface {
	Limiter
	Decide(ctx context.Context, key string, n int) (Decision, error)
	Policies(ctx context.Context, key string) ([]NamedPolicy, error)
}

// foreignDecision returns the Decision of a Limiter that is not a Decider,
// from the Result of its Allow.
func foreignDecision(res Result) Decision {
	d := Decision{Result: res, Enforced: res}
	if res.Limit > 0 {
		d.Policy = NamedPolicy{Name: defaultPolicyName, Policy: Policy{Limit: res.Limit}}
		d.Policies = []NamedPolicy{d.Policy}
	}
	return d
}

// defaultPolicyName names the one policy of a limiter of one policy.
const defaultPolicyName = "default"

// oneDecision returns the Decision of a limiter of one policy, policies
// (of one element, shared), that answered res by rl.
func oneDecision(res Result, policies []NamedPolicy, rl []rule) Decision {
	d := Decision{Result: res, Policies: policies, Enforced: res, rules: rl}
	if len(policies) > 0 {
		d.Policy = policies[0]
	}
	return d
}

// policyList returns p as the one policy of a limiter, named "default":
// own (shared) when p is the limiter's own policy, and a new slice
// otherwise, InFlight as own's is.
func policyList(p Policy, own []NamedPolicy) []NamedPolicy {
	if len(own) == 1 && own[0].Policy == p {
		return own
	}
	inFlight := len(own) == 1 && own[0].InFlight
	return []NamedPolicy{{Name: defaultPolicyName, Policy: p, InFlight: inFlight}}
}

// gradual reports whether a policy of d lets its units leave one by one
// (see rule.gradual).
func (d *Decision) gradual() bool {
	for _, rl := range d.rules {
		if rl.gradual {
			return true
		}
	}
	return false
}

// inFlight reports whether a policy of d limits units in flight (see
// NamedPolicy.InFlight): its rules or its Policies say so. A release may
// free such units at any moment, so no denial of d tells what its key
// will answer later.
func (d *Decision) inFlight() bool {
	for _, rl := range d.rules {
		if rl.inFlight {
			return true
		}
	}
	for _, p := range d.Policies {
		if p.InFlight {
			return true
		}
	}
	return false
}

// Source says who answered an Allow call.
type Source int

const (
	// FromBackend: the wrapped limiter answered.
	FromBackend Source = iota
	// FromFallback: the backend failed or its breaker is open, and the
	// fallback limiter answered.
	FromFallback
	// FromFailOpen: the backend failed or its breaker is open, and the
	// request was allowed by policy.
	FromFailOpen
	// FromFailClosed: the backend failed or its breaker is open, and the
	// request was denied by policy.
	FromFailClosed
	// FromDenyCache: a DenyCache answered from a remembered denial.
	FromDenyCache
	// FromShadow: the backend denied the call and a Shadow, not
	// enforcing, let it through; the Decision's Result is the allowed
	// answer, WouldDeny is set and Enforced holds the denial.
	FromShadow
)

// String returns the source's name in lower case, for metric labels.
func (s Source) String() string {
	switch s {
	case FromBackend:
		return "backend"
	case FromFallback:
		return "fallback"
	case FromFailOpen:
		return "fail_open"
	case FromFailClosed:
		return "fail_closed"
	case FromDenyCache:
		return "deny_cache"
	case FromShadow:
		return "shadow"
	}
	return "unknown"
}
