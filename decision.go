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

// NextUnit returns how long policy i of d (Policies[i]) holds its key to
// the units it has left, its Result's Remaining, and true: the time until
// one unit more than that can have been taken, whatever the calls made
// meanwhile; where that is not known exactly, a shorter time, never a
// longer one (which would hold the client to Remaining longer than the
// limiter does). That is:
//
//   - for a token bucket or GCRA, the time until its next unit has come
//     back (a key in debt waits out its debt first); with every unit left,
//     the time one unit takes to come back, as a unit taken now is back
//     only then;
//   - for a fixed or calendar window, the time until the window ends (a
//     count in debt stays until then); for an empty fixed window, its
//     length, as the next unit taken opens a window that long; for an
//     empty calendar window, the time until the window open now ends;
//   - for a sliding log, the time until the oldest entry still in the
//     window leaves it (in debt, until the oldest entries that hold the
//     units beyond the limit have left, and one more); with every unit
//     left, its window, for which a unit taken now counts;
//   - for a sliding counter, the earliest time a client can have taken one
//     unit more: within the window open now, where units taken count in
//     full, once the previous window's weighted share has fallen by one;
//     past the window's roll, where the units counted now and the units
//     left, taken at once before it, count as the previous window and
//     weigh less as the window slides, once they weigh less than the
//     limit; whichever comes first (sooner than the estimate's fall with
//     no unit taken would tell). With every unit left, its window, less
//     than the truth (by about one unit's share of the window).
//
// The sliding kinds' times are exact in their clock's unit (ns in process,
// whole µs on Redis, on the time the script decides on): no schedule of
// calls takes one unit more before it, and one can at it. httplimit and
// grpclimit round them up to whole seconds, as every kind's.
//
// A Prefetch's answer from a block tells the time until the block's window
// ends, or, for a token bucket or GCRA, one unit's time: its key's next
// unit is never further away while the key is not in debt. A Guard's
// answer from its fallback tells the fallback's, for each policy whose
// Result it shows (but one shown with less left than the fallback has). A
// DenyCache's remembered denial tells its backend's, aged.
//
// The policy's Result is d's own for a limiter of one policy, and
// Parts[i] for a Composite. NextUnit returns 0 and false when d does not
// tell it: for a policy of units in flight (a release may free units at
// any moment); a sliding window's in a DenyCache's remembered denial once
// it has passed (one unit more than d shows may be there since); a
// Decision of a Limiter of another package, or one a Guard made without
// its backend or fallback, which tells its policies but not how their
// state moves; and an i that names no policy of d whose Result d holds.
//
// The IETF draft of rate-limit header fields calls this the effective
// window of a policy's service limit (draft-ietf-httpapi-ratelimit-headers-11,
// section 4.1.2: the time within which the client can use no more than
// the available quota): httplimit and grpclimit send it, rounded up to
// whole seconds, as the t of each policy's RateLimit item. It reads d
// only, and is safe for concurrent use with other readers of d.
func (d *Decision) NextUnit(i int) (time.Duration, bool) {
	if i < 0 || i >= len(d.Policies) {
		return 0, false
	}
	if d.nextSet && i == d.PolicyIndex {
		return d.next, true
	}
	var res Result
	switch {
	case d.Parts != nil && i < len(d.Parts):
		if i < len(d.partNext) && d.partNext[i] > 0 {
			return d.partNext[i], true
		}
		res = d.Parts[i]
	case d.Parts == nil && i == d.PolicyIndex:
		res = d.Result
	default:
		return 0, false
	}
	if len(d.rules) != len(d.Policies) || res.Limit <= 0 {
		return 0, false
	}
	return nextUnit(d.rules[i], res, d.Policies[i].Window)
}

// nextUnit is NextUnit for a policy whose state moves by rl, whose Result
// is res (of a Limit > 0), and whose window (or time from empty to full)
// is window.
func nextUnit(rl rule, res Result, window time.Duration) (time.Duration, bool) {
	full := res.Remaining >= res.Limit
	switch {
	case rl.inFlight:
		return 0, false
	case rl.gradual:
		// With units taken, the oldest leaves at a time the Result does
		// not tell: only the limiter tells it (next, partNext).
		if !full || window <= 0 {
			return 0, false
		}
		return window, true
	case rl.unit > 0:
		// Remaining is Limit − ⌈ResetAfter / unit⌉, so one more unit is
		// there once ResetAfter has fallen to (Limit − Remaining − 1) ×
		// unit.
		if full {
			return time.Duration(rl.unit), true
		}
		owed := int64(res.Limit - max(res.Remaining, 0) - 1)
		reset := int64(res.ResetAfter)
		if owed > reset/rl.unit || reset == owed*rl.unit {
			return 0, false // a Result whose numbers disagree
		}
		return time.Duration(reset - owed*rl.unit), true
	case res.ResetAfter > 0:
		return res.ResetAfter, true
	case rl.calendar:
		return 0, false
	}
	if window <= 0 {
		return 0, false
	}
	return window, true
}

// withNext returns d, a Decision of one policy, with the wait until its
// next unit as its limiter tells it, next, when next > 0 (see
// Decision.next); d as it is otherwise.
func withNext(d Decision, next time.Duration) Decision {
	if next > 0 {
		d.next, d.nextSet = next, true
	}
	return d
}

// ageNext makes the next units d's limiters told (next, partNext) those
// of elapsed later, were nothing else done: each less elapsed, and no
// longer told once it has passed. The units a key takes meanwhile never
// bring its next unit sooner, so each stays true for the Remaining d
// shows. partNext is replaced, not changed, as it may be shared.
func (d *Decision) ageNext(elapsed time.Duration) {
	if d.nextSet {
		d.next -= elapsed
		d.nextSet = d.next > 0
		d.next = max(d.next, 0)
	}
	if d.partNext != nil {
		aged := make([]time.Duration, len(d.partNext))
		for i, next := range d.partNext {
			aged[i] = max(next-elapsed, 0)
		}
		d.partNext = aged
	}
}
