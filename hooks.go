package ratelimit

import (
	"time"
)

// Hooks receives decisions for metrics and tracing: those of every limiter
// built WithHooks, and what the Guard, DenyCache and Shadow decorators do.
// A Hooks that also implements AdjustHooks hears, from the same limiters
// and decorators, of every Refund, Settle and Reset too, and from the
// concurrency limiters of every Release and Extend of their leases (see
// AdjustHooks);
// Hooks itself has no method for them, so that an implementation of
// Decided and BreakerChanged alone stays one. Implementations must be safe
// for concurrent use and fast: they are called on the request path, after
// each decision. NopHooks, the default, does nothing. The library logs no
// decision: only the start and end of a backend's outage (see
// GuardConfig.Logger and FleetConfig.Logger).
type Hooks interface {
	// Decided is called once per call the limiter or decorator answered
	// (Allow, Decide or Acquire).
	Decided(Event)
	// BreakerChanged is called when a Guard's circuit breaker changes
	// state (on a Redis Cluster or Ring, the breaker of one node, not
	// named); a Breaker that Guards share reports to its own Hooks
	// instead (see BreakerConfig), never to the Guards'.
	BreakerChanged(from, to BreakerState)
}

// KeylessHooks is the optional interface of a Hooks that never reads the
// key of what it hears, such as one that only counts (otelratelimit's):
// the events and adjustments every limiter and decorator reports to it
// carry an empty Key, which spares the digest each report of a key costs
// otherwise (see WithKeysShown).
type KeylessHooks interface {
	Hooks
	// IgnoresKeys marks the Hooks; it is never called.
	IgnoresKeys()
}

// Event describes one call for Hooks: who reports it, the call, and its
// Decision.
type Event struct {
	// Limiter names who reports: the name WithName gave, or the type's
	// ("TokenBucket", "RedisGCRA", "Guard", ...), or a decorator's Name.
	Limiter string
	// Key and Cost are the call's key and n: the key as KeyDigest gives
	// it, unless the reporter shows keys whole (see WithKeysShown), and ""
	// for Hooks that never read keys (see KeylessHooks).
	Key  string
	Cost int
	// Decision is the call's, as Decide returned it: its Result is what
	// Allow returned, its Policy the policy that bound it (for a limiter
	// built WithPolicyFunc, the key's policy in force for this call), and
	// its Source who answered. A Shadow's report of a denial it let
	// through has Source FromShadow and WouldDeny, with the denial in
	// Enforced. A part of a Composite reports its own share: its key,
	// cost and Result.
	Decision
	// Lease is the lease an Acquire granted (see Acquirer), in the
	// report of the limiter that granted it only (a concurrency limiter,
	// alone or as a Composite's part): a decorator's report leaves it
	// empty, since a Lease is released by the limiter that granted it,
	// whatever layer returned it, and only that limiter hears of every
	// release. It holds nothing for an Allow or Decide, a denial, or a
	// limiter that holds nothing in flight. The granting limiter reports
	// the lease's Release and Extend to its AdjustHooks (AdjustRelease,
	// AdjustExtend), so that its Lease.Held events minus its releases
	// count the leases a process holds.
	Lease Lease
	// Err is the error the call returned.
	Err error
	// BackendErr is the backend's error when the answer came from the
	// failure policy because the backend failed; nil otherwise.
	BackendErr error
	// Latency is the time the call took, on the reporter's clock (a Redis
	// limiter's: the system clock).
	Latency time.Duration
}

// NopHooks is the Hooks that does nothing.
type NopHooks struct{}

// Decided does nothing.
func (NopHooks) Decided(Event) {}

// BreakerChanged does nothing.
func (NopHooks) BreakerChanged(from, to BreakerState) {}

// activeHooks returns h, or nil when h is nil or NopHooks, so that the
// decorators can skip building reports nobody reads.
func activeHooks(h Hooks) Hooks {
	if _, nop := h.(NopHooks); nop || isNil(h) {
		return nil
	}
	return h
}

// observer reports the decisions of a limiter built WithHooks. Its zero
// value reports nothing. It is immutable and safe for concurrent use.
type observer struct {
	hooks  Hooks       // nil when nothing listens
	adjust AdjustHooks // hooks, when they hear of adjustments; nil otherwise
	name   string
	policy Policy
	own    []NamedPolicy // policy, named "default"
	rules  []rule        // how policy's state moves
	// maxSettle bounds what one Settle may charge (WithMaxSettle); for a
	// Composite's part, read through observerOf.
	maxSettle settleCap
	// keys bounds the limiter's keys and says how its errors and reports
	// show them.
	keys keyRules
}

// decision returns the Decision res of a call under p, the limiter's own
// policy or the key's, whose state moves by rl (nil: the limiter's own
// rule).
func (o *observer) decision(res Result, p Policy, rl []rule) Decision {
	if rl == nil {
		rl = o.rules
	}
	return oneDecision(res, policyList(p, o.own), rl)
}

// report tells the hooks of one call's Decision d. The caller has checked
// that o.hooks is not nil.
func (o *observer) report(key string, n int, d Decision, err error, latency time.Duration) {
	o.hooks.Decided(Event{Limiter: o.name, Key: o.keys.event(o.hooks, key), Cost: n, Decision: d, Err: err, Latency: latency})
}

// reportPolicy reports a decision res made under policy p, the key's own
// for a limiter built WithPolicyFunc.
func (o *observer) reportPolicy(p Policy, key string, n int, res Result, err error, latency time.Duration) {
	o.report(key, n, o.decision(res, p, nil), err, latency)
}

// reportNext is reportPolicy for a decision whose policy's wait until its
// next unit is next, as the limiter tells it (0: as its rule and Result
// tell, see withNext).
func (o *observer) reportNext(p Policy, key string, n int, res Result, next time.Duration, err error, latency time.Duration) {
	o.report(key, n, withNext(o.decision(res, p, nil), next), err, latency)
}
