package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"
)

// Guard wraps a Limiter whose backend can fail, typically a Redis limiter,
// so that its failures cannot take the service down with it. Each call gets
// the configured timeout; a backend error is answered by the failure policy
// with a nil error, reported to Hooks and, once per outage, logged (see
// GuardConfig.Logger); and a circuit breaker stops
// calling a backend that keeps failing, answering from the policy at once
// until a probe after the cool-down succeeds (on a Redis Cluster or Ring,
// one breaker per node: see GuardConfig.BreakerFailures).
//
// Only a failure of the backend (an error of class ErrBackend, or an error
// of a Limiter of another package, which has no class) is answered by the
// failure policy and counted by the breaker. The other errors say nothing
// about the backend's health, and pass through to the caller as they are,
// without a policy answer and without counting toward the breaker or
// closing it: those of class ErrCaller (ErrInvalidCost and
// ErrCostExceedsLimit, the caller's cost, or a Settle above WithMaxSettle;
// ErrPolicy and ErrInvalidConfig, a key's policy that could not be read or
// is refused, see WithPolicyFunc, or a backend that is not built;
// ErrKeysApart, keys one store cannot serve together; ErrInvalidKey, a key
// longer than WithMaxKeyLength), ErrCorruptState (one key's data in Redis is not the
// limiter's own: that call returns the error with Allowed false, and every
// other key is decided as before), and the error of a call whose caller
// gave up (its own ctx is done). A nil ctx is an error too, and the
// backend is not called.
//
// While the backend fails, the Guard's answers name the tightest of the
// backend's policies for the key (the smallest Limit among those that
// count units), with its Limit: what clients are told does not change
// while the backend is down. Under FailOver the fallback's Result is
// shown under the backend's policy of the name that bound the fallback's
// decision, or, when the backend has none of that name, as the fallback's
// own Decision, so that the policy named is always the one whose numbers
// are shown; a fallback Composite's parts' Results are in Parts, in the
// order of the backend's policies, each under the backend's Limit. Use it
// around every limiter that talks to a network; it reports its backend's
// policies as its own.
//
// Fallbacks start from the backend's state. A Guard that fails over to a
// fallback of this package's in-process rate limiters (or a Composite of
// them, as Fleet.Fallback builds) remembers, for each key the backend
// answered, what the backend said was left of each policy, until every one
// is full again (at most RememberKeys keys, 100,000 by default; a key
// answered while that many are held is not remembered). The first call it
// fails over for a key after such an answer brings the fallback's state of
// the key down to its share of what was left: a fallback policy of limit F
// for a backend policy of limit L that had R left keeps at most ⌊R × F / L⌋
// (for a token bucket or GCRA, R grown back at the policy's rate since the
// answer), and calls after it find the fallback as it left it. A Settle
// through the Guard that takes more than the call's estimate lowers what is
// remembered by as much (a Refund leaves it lower than the backend's, which
// only makes the fallback start lower), and a Reset forgets the key, which
// is full; adjustments made around the Guard are not seen. So while the
// backend is away, a fallback admits on a key its share of what the backend
// had left, plus what its own policy gives back in that time (a token
// bucket's, a GCRA's or a sliding window's rate; a fixed window's next
// window, the one it seeds ending when the backend's does; nothing more in
// a calendar window, whose windows are the backend's). A sliding window's
// seed counts the units the backend had spent as taken at the seeding, so
// that they come back a window later, not bit by bit as the backend's
// would. With Fleet.Fallback's shares over N replicas (F = ⌊L/N⌋), the
// fallbacks together admit in one calendar window at most the sum over
// replicas of ⌊Rᵢ × F / L⌋ (at most ⌊Rᵢ / N⌋), where Rᵢ is what the backend
// said was left in its latest answer on the key to replica i (L for a
// replica that remembers none): no more than what the backend had left when
// it went away plus what it admitted through the other replicas after the
// oldest of those answers. Both roundings are down, so they cost units,
// never give any: each replica's fallback may start below its exact share
// Rᵢ / N by less than 1 + (L mod N)/N units, under two (20 left of 100 over
// 3 replicas: ⌊20 × 33 / 100⌋ = 6 each, 18 in all). The backend does not
// learn what the fallbacks admitted: once it is back it admits what it had
// left, so a window may admit its limit plus what the fallbacks admitted
// while it was away. A policy of units in flight (a Concurrency part) is
// not brought down: its units come back by their leases. The seeding is a
// peek and, when the fallback has more left than its share, a Settle of the
// difference, which a fallback built WithHooks reports.
//
// A policy per part. GuardConfig.PartFailure gives parts of a Composite
// backend failure policies of their own, such as a monthly quota that
// fails closed beside a per-second limit that fails over. A call the
// backend fails is then answered part by part: when a part that fails
// closed has its say (any call but a peek, n == 0), the call is denied by
// it, with its RetryAfter and Source FromFailClosed, and nothing is asked
// of the fallback; otherwise the parts that fail over are decided, all or
// nothing, by the Fallback's parts of their names (which start from the
// backend's state, as above), while the parts that fail open allow the
// call, and the Source is FromFallback. The Decision lists every part in
// Policies and in Parts: a part that failed over shows the fallback's
// Result under the backend's Limit (and tells the fallback's next unit,
// see Decision.NextUnit), a part that failed open or closed its Limit
// alone (and RetryAfter and ResetAfter, when it denied). PolicyIndex names
// the part that decided: the denying part, or, for an allowed call, the
// part that failed over with the smallest share of its limit left; the
// Result is that part's, with the longest RetryAfter and ResetAfter of
// all, as a Composite's is.
//
// Leases (see Acquirer): Acquire asks the backend's Acquire within the
// Timeout and answers its failure by the failure policy, as Decide does:
// FailOpen allows with a Lease that holds nothing, FailClosed denies, and
// FailOver acquires from the Fallback (a Concurrency of this replica's
// share of the limit, say), whose Lease holds the fallback's units. A
// lease is released and extended by the limiter that granted it, whether
// or not the backend is up, and Release and Extend are never answered by
// the failure policy: a backend error is returned to the caller, and the
// lease then holds its units until its TTL passes. Lease.Release and
// Lease.Extend go to the granting limiter directly, bounded by their ctx
// alone, not by the Guard's Timeout: give them a ctx with a deadline. A
// backend Acquire that timed out may have been granted all the same: its
// units come back at its TTL.
//
// A fallback's lease stays the fallback's when the backend comes back: the
// backend never counts it, and the fallback counts it until it is released
// or its TTL passes. So, from the moment the backend answers the Guard's
// calls again, a key may have in flight up to the backend's limit in
// leases the backend granted plus the fallback's leases still held: at
// most the fallback's limit for the key on each replica whose Guard failed
// over (with Fleet.Fallback's shares, L/N rounded down but at least 1 on
// each of N replicas: at most twice the backend's limit L in flight when
// L >= N, and L + N when L < N).
// While the backend answers, no fallback lease is granted, so those only
// decrease, and one fallback TTL after the backend came back none is left,
// unless its holder extends it: an extended fallback lease stays counted
// by the fallback alone for as long as it is extended. The same holds the
// other way at the start of an outage: the fallback does not count the
// backend's leases, which hold their units on the backend until they
// expire, as releases fail while it is down.
//
// A Guard is safe for concurrent use. Create one with NewGuard.
type Guard struct {
	backend  decorated
	fallback decorated // cfg.Fallback; the zero value without one
	cfg      GuardConfig
	hooks    Hooks       // nil when nothing listens
	adjust   AdjustHooks // hooks, when they hear of adjustments; nil otherwise
	clock    Clock
	// breaker is the Guard's circuit breaker, its own or a shared
	// Breaker's, one per node of a cluster or ring; nil without one.
	// breakerHooks hear of its changes.
	breaker      *breakers
	breakerHooks Hooks
	lastLimit    atomic.Int64 // the Limit of the latest backend answer
	// parts holds each part's failure policy, when the parts of a
	// Composite backend fail by policies of their own; nil otherwise.
	parts *guardParts
	// memory holds what the backend last said of each key, for the
	// fallback to start from (see guardmemory.go), on base; nil when no
	// fallback can start from it. seeds are the fallback's limiters a
	// memo seeds.
	memory       *keyTable[memo]
	rememberKeys int64
	seeds        []seedTarget
	perCall      []bool // each part's PerCall, for a Composite backend
	base         clockBase
	outage       *outageLog // logs the backend's outages
}

// NewGuard returns a Guard around backend. It returns an error wrapping
// ErrInvalidConfig for a nil backend, a negative timeout, retry-after or
// RememberKeys, an unknown policy, FailOver without a Fallback or a
// Fallback without FailOver (of OnFailure or of a part), a PartFailure that
// names what is not a part of a Composite backend, parts that fail over
// beside others that do not with a Fallback that has no part of each of
// their names, a negative BreakerFailures, or a breaker without a positive
// cool-down.
func NewGuard(backend Limiter, cfg GuardConfig) (*Guard, error) {
	const kind = "NewGuard"
	switch {
	case isNil(backend):
		return nil, fmt.Errorf("%w: %s: nil backend", ErrInvalidConfig, kind)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("%w: %s: Timeout %v must be >= 0", ErrInvalidConfig, kind, cfg.Timeout)
	case cfg.FailClosedRetryAfter < 0:
		return nil, fmt.Errorf("%w: %s: FailClosedRetryAfter %v must be >= 0", ErrInvalidConfig, kind, cfg.FailClosedRetryAfter)
	case cfg.OnFailure < FailOpen || cfg.OnFailure > FailOver:
		return nil, fmt.Errorf("%w: %s: unknown failure policy %d", ErrInvalidConfig, kind, cfg.OnFailure)
	case cfg.RememberKeys < 0:
		return nil, fmt.Errorf("%w: %s: RememberKeys %d must be >= 0", ErrInvalidConfig, kind, cfg.RememberKeys)
	case cfg.BreakerFailures < 0:
		return nil, fmt.Errorf("%w: %s: BreakerFailures %d must be >= 0", ErrInvalidConfig, kind, cfg.BreakerFailures)
	case cfg.BreakerFailures > 0 && cfg.BreakerCoolDown <= 0:
		return nil, fmt.Errorf("%w: %s: a breaker needs a BreakerCoolDown > 0, got %v", ErrInvalidConfig, kind, cfg.BreakerCoolDown)
	case cfg.Breaker != nil && (cfg.BreakerFailures != 0 || cfg.BreakerCoolDown != 0):
		return nil, fmt.Errorf("%w: %s: a shared Breaker replaces BreakerFailures and BreakerCoolDown, which must be 0", ErrInvalidConfig, kind)
	case cfg.Breaker != nil && cfg.Breaker.b.threshold == 0:
		return nil, fmt.Errorf("%w: %s: a Breaker must be made by NewBreaker", ErrInvalidConfig, kind)
	}
	names, policies, err := partPolicies(kind, backend, cfg)
	if err != nil {
		return nil, err
	}
	failsOver := cfg.OnFailure == FailOver
	if policies != nil {
		failsOver = slices.Contains(policies, FailOver)
	}
	switch {
	case failsOver && isNil(cfg.Fallback):
		return nil, fmt.Errorf("%w: %s: FailOver needs a Fallback limiter", ErrInvalidConfig, kind)
	case !failsOver && !isNil(cfg.Fallback):
		return nil, fmt.Errorf("%w: %s: a Fallback is used only with OnFailure: FailOver (or a part's FailOver in PartFailure)", ErrInvalidConfig, kind)
	}
	if cfg.FailClosedRetryAfter == 0 {
		cfg.FailClosedRetryAfter = time.Second
	}
	cfg.Name = cmp.Or(cfg.Name, "Guard")
	g := &Guard{backend: decorate(backend), cfg: cfg, hooks: activeHooks(cfg.Hooks), adjust: activeAdjustHooks(cfg.Hooks), clock: cfg.Clock}
	if g.parts, err = newGuardParts(kind, names, policies, cfg.Fallback); err != nil {
		return nil, err
	}
	if policies != nil && g.parts == nil {
		// Every part has one policy: the Guard answers as a whole by it.
		g.cfg.OnFailure = policies[0]
	}
	if !isNil(cfg.Fallback) {
		g.fallback = decorate(cfg.Fallback)
		fallback := cfg.Fallback
		if g.parts != nil && g.parts.fallback.built() {
			fallback = g.parts.fallback.Limiter
		}
		g.seeds = seedTargets(backend, fallback)
	}
	if isNil(g.clock) {
		g.clock = systemClock{}
	}
	g.base = newClockBase(g.clock)
	policy := failurePolicyNames[g.cfg.OnFailure]
	if g.parts != nil {
		policy = "by part"
	}
	g.outage = newOutageLog(cfg.Logger, g.clock,
		"ratelimit: backend failing; calls answered by the failure policy",
		"ratelimit: backend answering again", "answered_by_policy",
		slog.String("limiter", g.cfg.Name), slog.String("on_failure", policy))
	if len(g.seeds) > 0 {
		g.rememberKeys = int64(cmp.Or(cfg.RememberKeys, DefaultRememberKeys))
		g.memory = newKeyTable[memo](int64(time.Minute)).outliving(func(m memo) int64 { return m.until })
		g.memory.counted = true
		if c := compositeIn(backend); c != nil {
			for _, p := range c.parts {
				g.perCall = append(g.perCall, p.PerCall)
			}
		}
	}
	switch {
	case cfg.Breaker != nil:
		g.breaker, g.breakerHooks = &cfg.Breaker.b, cfg.Breaker.hooks
	case cfg.BreakerFailures > 0:
		g.breaker = new(breakers).init(cfg.BreakerFailures, cfg.BreakerCoolDown)
		g.breakerHooks = g.hooks
	}
	return g, nil
}

// Allow asks the backend, or answers by the failure policy when the backend
// fails or the breaker is open. See Guard for the details.
func (g *Guard) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := g.Decide(ctx, key, n)
	return d.Result, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): the backend's when it answered; otherwise the failure
// policy's, with Source FromFailOpen, FromFailClosed or FromFallback and
// the backend's policies for key (see Guard). Units were taken from the
// backend only when Source is FromBackend.
func (g *Guard) Decide(ctx context.Context, key string, n int) (Decision, error) {
	_, d, err := g.call(ctx, key, n, false)
	return d, err
}

// Acquire takes n units for key through the backend's Acquire, or answers
// by the failure policy when the backend fails or the breaker is open, as
// Decide does (see Acquirer and Guard, Leases): FailOpen allows with a
// Lease that holds nothing, FailClosed denies, and FailOver acquires from
// the Fallback, whose Lease the fallback releases. Over a backend that is
// not an Acquirer, it decides as Decide does and returns a Lease that holds
// nothing.
func (g *Guard) Acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	return g.call(ctx, key, n, true)
}

// call is Decide, or Acquire when leased.
func (g *Guard) call(ctx context.Context, key string, n int, leased bool) (Lease, Decision, error) {
	if g == nil || !g.backend.built() {
		return Lease{}, Decision{}, notBuilt("Guard")
	}
	if ctx == nil {
		return Lease{}, Decision{}, fmt.Errorf("ratelimit: Guard: %w", errNilContext)
	}
	// The clock is read here only for a breaker or a listener; the outage
	// log reads it on a failure, and on answers for outageQuiet after one.
	var start time.Time
	if g.breaker != nil || g.hooks != nil {
		start = g.clock.Now()
	}
	admitted, wait, change, tk := true, time.Duration(0), transition{}, ticket{}
	var br *breaker // the breaker of key's node
	if g.breaker != nil {
		br = g.breaker.of(g.backend.node(key))
		admitted, wait, change, tk = br.admit(start)
		g.report(change)
	}
	if !admitted {
		g.outage.failed(errBreakerOpen)
		return g.failed(ctx, key, n, leased, wait, errBreakerOpen, start)
	}

	callCtx := ctx
	if g.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, g.cfg.Timeout)
		defer cancel()
	}
	var lease Lease
	var d Decision
	var err error
	if leased {
		lease, d, err = g.backend.acquire(callCtx, key, n)
	} else {
		d, err = g.backend.decide(callCtx, key, n)
	}
	outcome := backendOK
	switch {
	case err == nil && d.Source != FromBackend && d.Source != FromShadow:
		// A decorator inside answered without asking the store (a
		// DenyCache's remembered denial, an inner Guard's policy): that
		// says nothing of the backend's health.
		outcome = noVerdict
	case err == nil:
		g.lastLimit.Store(int64(d.Limit))
		if g.memory != nil {
			g.remember(key, &d, g.since(start))
		}
	case errors.Is(err, ErrCaller), errors.Is(err, ErrCorruptState):
		// The caller's mistake or one key's data, not the backend's
		// health: no verdict, so the breaker neither counts it nor closes
		// on it, and the error goes to the caller.
		outcome = noVerdict
	case ctx.Err() != nil:
		// The caller gave up; that says nothing about the backend.
		outcome = noVerdict
	default:
		// ErrBackend, or an error of a Limiter of another package, which
		// says nothing of its class.
		outcome = backendFailed
	}
	switch outcome {
	case backendOK:
		g.outage.ok()
	case backendFailed:
		// Before the breaker hears of it, so that the outage's line comes
		// before the line of the breaker it opens.
		g.outage.failed(err)
	}
	if br != nil {
		g.report(br.record(outcome, tk, g.clock.Now()))
	}
	if outcome != backendFailed {
		g.decided(key, n, d, lease, err, nil, start)
		return lease, d, err
	}
	return g.failed(ctx, key, n, leased, g.cfg.FailClosedRetryAfter, err, start)
}

// failed answers by the failure policy a call the backend failed
// (backendErr) or the open breaker kept from it, and reports it. The key's
// policies are read once, for both the answer and the report. Under
// FailOver, a call that acquires (leased) acquires from the fallback.
func (g *Guard) failed(ctx context.Context, key string, n int, leased bool, retryAfter time.Duration, backendErr error, start time.Time) (Lease, Decision, error) {
	policies, err := g.Policies(ctx, key)
	var lease Lease
	var d Decision
	if err == nil {
		lease, d, err = g.byPolicy(ctx, key, n, leased, policies, retryAfter)
	}
	g.decided(key, n, d, lease, err, backendErr, start)
	return lease, d, err
}

// Policies returns the backend's policies for key (see Decider), or, for
// a backend that is not a Decider, one named "default" with the Limit of
// its latest answer (none before its first). It asks nothing of the
// backend's store.
func (g *Guard) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if g == nil || !g.backend.built() {
		return nil, notBuilt("Guard")
	}
	if g.backend.decider != nil {
		return g.backend.policies(ctx, key)
	}
	if limit := g.lastLimit.Load(); limit > 0 {
		return []NamedPolicy{{Name: defaultPolicyName, Policy: Policy{Limit: int(limit)}}}, nil
	}
	return nil, nil
}

// Refund forwards to the backend, which must be an Adjuster, within the
// Guard's Timeout. Adjustments bypass the breaker and the failure policy:
// their errors are returned.
func (g *Guard) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return g.adjustReported(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle forwards to the backend, which must be an Adjuster, within the
// Guard's Timeout. Its errors are returned, as the breaker and the failure
// policy concern Allow only.
func (g *Guard) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return g.adjustReported(ctx, AdjustSettle, key, taken, cost, opts)
}

// Reset forwards to the backend, which must be an Adjuster, within the
// Guard's Timeout.
func (g *Guard) Reset(ctx context.Context, key string) error {
	_, err := g.adjustReported(ctx, AdjustReset, key, 0, 0, nil)
	return err
}

// adjustReported forwards the adjustment op of taken and cost to the
// backend, and reports it to the adjust hooks, if any.
func (g *Guard) adjustReported(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if g == nil || g.adjust == nil {
		return g.forward(ctx, op, key, taken, cost, opts)
	}
	start := g.clock.Now()
	res, err := g.forward(ctx, op, key, taken, cost, opts)
	adjusted(g.adjust, g.cfg.Name, op, g.backend.keys.event(g.adjust, key), taken, cost, opts, res, err, g.clock.Now().Sub(start))
	return res, err
}

// forward forwards the adjustment op of taken and cost to the backend,
// within the Guard's Timeout.
func (g *Guard) forward(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	a, err := g.adjuster()
	if err != nil {
		return Result{}, err
	}
	ctx, cancel := g.adjustContext(ctx)
	defer cancel()
	res, err := forwardAdjust(ctx, a, op, key, taken, cost, opts)
	if err == nil && g.memory != nil {
		g.adjustMemo(key, op, taken, cost)
	}
	return res, err
}

// adjuster returns the backend as an Adjuster, or an error saying it is
// not one.
func (g *Guard) adjuster() (Adjuster, error) {
	if g == nil || !g.backend.built() {
		return nil, notBuilt("Guard")
	}
	return g.backend.adjuster("Guard")
}

// adjustContext bounds ctx by the Guard's Timeout, if any; a nil ctx is
// left for the backend to refuse.
func (g *Guard) adjustContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx == nil || g.cfg.Timeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, g.cfg.Timeout)
}

// errBreakerOpen is the BackendErr Hooks see for calls the open breaker
// kept from the backend.
var errBreakerOpen = errors.New("ratelimit: circuit breaker open")

// byPolicy answers a call the backend could not: allowed, denied with
// retryAfter, or asked of the fallback. policies are the backend's for
// key; the answer names the tightest (the smallest Limit among those that
// count units, or the first policy when every one counts calls), or, for a
// fallback's answer, the backend's policy of the name that bound the
// fallback's decision.
//
// A cost the backend could never take is refused as the backend would
// refuse it, whatever the policy: with ErrInvalidCost for n < 0, and with
// ErrCostExceedsLimit above the tightest policy of units' limit when that
// is known.
func (g *Guard) byPolicy(ctx context.Context, key string, n int, leased bool, policies []NamedPolicy, retryAfter time.Duration) (Lease, Decision, error) {
	d := Decision{Policies: policies, Source: policySource[g.cfg.OnFailure]}
	perCall := true // no policy of units limits n
	if len(policies) > 0 {
		d.PolicyIndex, perCall = tightest(policies)
		d.Policy = policies[d.PolicyIndex]
	}
	limit := d.Policy.Limit
	d.Limit = limit
	if n < 0 || (!perCall && limit > 0 && n > limit) {
		d.Enforced = d.Result
		return Lease{}, d, checkCost(n, limit)
	}
	retryAfter = max(retryAfter, time.Nanosecond)
	if g.parts != nil {
		return g.byParts(ctx, key, n, leased, policies, retryAfter, d)
	}
	return g.wholeByPolicy(ctx, key, n, leased, policies, retryAfter, d)
}

// wholeByPolicy is byPolicy for a backend answered as a whole, by
// OnFailure: d names the tightest of policies, and n is a cost the backend
// could take.
func (g *Guard) wholeByPolicy(ctx context.Context, key string, n int, leased bool, policies []NamedPolicy, retryAfter time.Duration, d Decision) (Lease, Decision, error) {
	if n == 0 && g.cfg.OnFailure != FailOver {
		d.Allowed = true // a peek is always allowed
		d.Enforced = d.Result
		return Lease{}, d, nil
	}
	switch g.cfg.OnFailure {
	case FailOver:
		g.seed(ctx, key)
		var lease Lease
		var fd Decision
		var err error
		if leased {
			lease, fd, err = g.fallback.acquire(ctx, key, n)
		} else {
			fd, err = g.fallback.decide(ctx, key, n)
		}
		if errors.Is(err, ErrCostExceedsLimit) {
			// The backend could take n, once it is back.
			d.RetryAfter, d.ResetAfter = retryAfter, retryAfter
			d.Enforced = d.Result
			return Lease{}, d, nil
		}
		return lease, g.overFallback(d, fd), err
	case FailClosed:
		d.RetryAfter, d.ResetAfter = retryAfter, retryAfter
	default:
		d.Allowed = true
	}
	d.Enforced = d.Result
	return Lease{}, d, nil
}

// overFallback returns the fallback's Decision fd as the Guard's answer d
// for the backend's policies: the fallback's Result and Source
// FromFallback, naming the backend's policy of the name that bound fd,
// whose Limit it shows (and a Remaining of at most that Limit), so that
// clients are told the shared policy, and, when the fallback has a part
// of the name of each of the backend's policies (a Composite's mirror),
// each part's Result in Parts, shown alike; or, when the backend has no
// policy of that name, fd's own policies, so that the policy named is
// always the one whose numbers are shown. Each policy shown tells the
// fallback's next unit (see Decision.NextUnit), but where the Remaining
// shown is less than the fallback's: one unit more than it is there now.
func (g *Guard) overFallback(d, fd Decision) Decision {
	for i, p := range d.Policies {
		if p.Name == fd.Policy.Name {
			d.Result, d.PolicyIndex, d.Policy = fd.Result, i, p
			d.next, d.nextSet = fd.NextUnit(fd.PolicyIndex) // the fallback's, which the Result is
			if p.Limit > 0 && d.Remaining > p.Limit {
				// A fallback larger than the shared policy shows no more
				// than its limit left.
				d.Limit, d.Remaining = p.Limit, p.Limit
				d.next, d.nextSet = 0, false
			} else if p.Limit > 0 {
				d.Limit = p.Limit
			}
			d.Parts, d.partNext = partsOver(d.Policies, fd)
			d.Enforced = d.Result
			return d
		}
	}
	fd.next, fd.nextSet = fd.NextUnit(fd.PolicyIndex)
	if fd.Parts != nil {
		// Told before the rules go: the fallback's, part by part.
		fd.partNext = make([]time.Duration, len(fd.Parts))
		for j := range fd.Parts {
			fd.partNext[j], _ = fd.NextUnit(j)
		}
	}
	fd.Source, fd.WouldDeny, fd.Enforced, fd.rules = FromFallback, false, fd.Result, nil
	return fd
}

// partsOver returns the Results of the fallback's Decision fd's parts in
// the order of the backend's policies, each under its policy's Limit (and
// a Remaining of at most that Limit), and each one's next unit as fd tells
// it (0 where it does not, or where the Remaining shown is less than the
// fallback's); nil, nil unless fd has parts and a part of the name of
// each policy.
func partsOver(policies []NamedPolicy, fd Decision) ([]Result, []time.Duration) {
	if fd.Parts == nil || len(policies) < 2 {
		return nil, nil
	}
	parts, nexts := make([]Result, len(policies)), make([]time.Duration, len(policies))
	for i, p := range policies {
		j := slices.IndexFunc(fd.Policies, func(q NamedPolicy) bool { return q.Name == p.Name })
		if j < 0 || j >= len(fd.Parts) {
			return nil, nil
		}
		parts[i] = fd.Parts[j]
		nexts[i], _ = fd.NextUnit(j)
		if p.Limit > 0 {
			parts[i].Limit = p.Limit
			if parts[i].Remaining > p.Limit {
				parts[i].Remaining, nexts[i] = p.Limit, 0
			}
		}
	}
	return parts, nexts
}

// failurePolicyNames names each policy in the Guard's log lines.
var failurePolicyNames = [...]string{FailOpen: "fail_open", FailClosed: "fail_closed", FailOver: "fail_over"}

// policySource is the Source of each policy's answers.
var policySource = [...]Source{FailOpen: FromFailOpen, FailClosed: FromFailClosed, FailOver: FromFallback}

// decided reports the Decision d of a call to the hooks, if any. The
// lease the call returned is not in the report: only the limiter that
// granted it reports it, as only that limiter hears of every release.
func (g *Guard) decided(key string, n int, d Decision, _ Lease, err, backendErr error, start time.Time) {
	if g.hooks == nil {
		return
	}
	g.hooks.Decided(Event{
		Limiter: g.cfg.Name, Key: g.backend.keys.event(g.hooks, key), Cost: n, Decision: d,
		Err: err, BackendErr: backendErr, Latency: g.clock.Now().Sub(start),
	})
}

// report tells the breaker's hooks of a change, if there was one, and logs
// the first time the breaker opens in an outage.
func (g *Guard) report(t transition) {
	if t.to == BreakerOpen && t.from == BreakerClosed {
		g.outage.once(slog.LevelWarn, "ratelimit: circuit breaker open; the backend is called again by one probe per cool-down")
	}
	if g.breakerHooks != nil && t.from != t.to {
		g.breakerHooks.BreakerChanged(t.from, t.to)
	}
}

// BreakerState returns the circuit breaker's state now, its own or its
// shared Breaker's: on a cluster or ring, that of its most open node (open,
// then half-open, then closed). It is BreakerClosed for a nil *Guard or one
// without a breaker.
func (g *Guard) BreakerState() BreakerState {
	if g == nil || g.breaker == nil {
		return BreakerClosed
	}
	return g.breaker.state()
}

func (g *Guard) limiter() Limiter { return g }

func (g *Guard) backendOf() *decorated {
	if g == nil {
		return nil
	}
	return &g.backend
}

// since returns the time of start, a reading of the Guard's clock, on its
// clock base; the time now when start is the zero Time (not read).
func (g *Guard) since(start time.Time) int64 {
	if start.IsZero() {
		return g.base.elapsed()
	}
	return int64(start.Sub(g.base.start))
}

// remember keeps what the backend's answer d, made at (on the Guard's
// clock base), says of key, unless RememberKeys keys are held already.
func (g *Guard) remember(key string, d *Decision, at int64) {
	var m memo
	m.at, m.until = at, at
	if d.Parts != nil {
		if len(d.Parts) > maxMemoParts {
			return
		}
		for i := range d.Parts {
			m.parts[i] = memoPartOf(&d.Parts[i], d.rules, i, at)
			m.until = max(m.until, m.parts[i].full)
		}
		m.n = uint8(len(d.Parts))
	} else {
		m.parts[0] = memoPartOf(&d.Result, d.rules, 0, at)
		m.until, m.n = max(m.until, m.parts[0].full), 1
	}
	t := g.memory
	for swept := false; ; swept = true {
		sh, now := t.lock(key, at, maxSpan)
		_, w := sh.lookup(key)
		switch {
		case m.until <= now:
			// Full again at once: nothing to start from.
			t.remove(sh, key, w)
		case w != absent || t.reserve(g.rememberKeys):
			sh.write(key, w, m, m.until)
		case !swept:
			// Full: shards no call has touched may hold memos of keys
			// that are full again.
			sh.mu.Unlock()
			t.sweep(g.base.elapsed(), maxSpan)
			continue
		}
		sh.mu.Unlock()
		return
	}
}

// adjustMemo keeps key's memo true to an adjustment the backend applied
// through the Guard: a Reset forgets it (the key is full), and a Settle
// that took more than it gave back takes that from each policy's
// remaining (1 call from a PerCall part's, as it counts); a give-back
// leaves it as it was, lower than the backend's, which only makes the
// fallback start lower. The memo then seeds again at the next failed-over
// call.
func (g *Guard) adjustMemo(key string, op AdjustOp, taken, cost int) {
	t := g.memory
	sh, _ := t.lock(key, g.base.elapsed(), maxSpan)
	defer sh.mu.Unlock()
	m, w := sh.lookup(key)
	if w == absent {
		return
	}
	if op == AdjustReset {
		t.remove(sh, key, w)
		return
	}
	for i := range int(m.n) {
		more := int64(cost) - int64(taken)
		if i < len(g.perCall) && g.perCall[i] {
			more = int64(once(cost) - once(taken))
		}
		if more > 0 {
			m.parts[i].remaining = max(m.parts[i].remaining-more, 0)
		}
	}
	m.seeded = false
	sh.write(key, w, m, m.until)
}

// seed brings the fallback's state of key down, for each of its seed targets,
// to its share of what the backend last said was left (see Guard), once
// per memo: the first failed-over call after a backend answer seeds, and
// the calls after it find the fallback's state as it left it.
func (g *Guard) seed(ctx context.Context, key string) {
	if g.memory == nil {
		return
	}
	now := g.base.elapsed()
	t := g.memory
	sh, now := t.lock(key, now, maxSpan)
	m, w := sh.lookup(key)
	sh.mu.Unlock()
	if w == absent || m.seeded || m.until <= now {
		return
	}
	for _, target := range g.seeds {
		if target.part >= int(m.n) {
			continue
		}
		p := m.parts[target.part]
		if p.skip || p.full <= now {
			continue
		}
		k := key
		if target.key != nil {
			k = target.key(key)
		}
		cur, err := target.limiter.Decide(ctx, k, 0)
		if err != nil || cur.Limit <= 0 {
			continue
		}
		want := share(p.left(m.at, now), int64(cur.Limit), p.limit)
		if w, ok := target.limiter.(usedSeeder); ok {
			// Its windows are its own: the units the backend had spent
			// are counted in a window that ends when the backend's does.
			w.seedUsed(ctx, k, int64(cur.Limit)-want, p.full-now)
			continue
		}
		if extra := int64(cur.Remaining) - want; extra > 0 {
			_, _ = target.limiter.Settle(ctx, k, 0, int(extra))
		}
	}
	sh, _ = t.lock(key, now, maxSpan)
	if m2, w := sh.lookup(key); w != absent && m2.at == m.at {
		m2.seeded = true
		sh.write(key, w, m2, m2.until)
	}
	sh.mu.Unlock()
}

// byParts answers, part by part, a call the backend could not: policies
// are the backend's for key, in its parts' order. When a part that fails
// closed has its say (n > 0), the call is denied by it, and nothing is
// asked of the fallback; otherwise the parts that fail over are decided by
// their fallback (a denial there denies the call), and those that fail
// open allow it. The Decision lists every part: Parts holds each part's
// Result (the fallback's for a part that failed over, shown under the
// backend's policy and Limit; the Limit alone, and RetryAfter for a denial
// by a part that fails closed, for the others), PolicyIndex the part that bound
// the answer, and Source who gave it: FromFailClosed for a part that
// fails closed, FromFallback for the fallback.
func (g *Guard) byParts(ctx context.Context, key string, n int, leased bool, policies []NamedPolicy, retryAfter time.Duration, d Decision) (Lease, Decision, error) {
	gp := g.parts
	if len(policies) != len(gp.policies) {
		// The backend's policies are not its parts' (a Decider of another
		// kind in between): answer as a whole, by OnFailure.
		return g.wholeByPolicy(ctx, key, n, leased, policies, retryAfter, d)
	}
	results := make([]Result, len(policies))
	for i, p := range policies {
		results[i] = Result{Limit: p.Limit}
	}
	d.Parts = results
	closed := n > 0 && slices.Contains(gp.policies, FailClosed)
	if closed {
		for i, p := range gp.policies {
			if p == FailClosed {
				results[i].RetryAfter, results[i].ResetAfter = retryAfter, retryAfter
			}
		}
		return Lease{}, g.partsAnswer(d, FromFailClosed), nil
	}
	if gp.fallback.built() {
		g.seed(ctx, key)
		var lease Lease
		var fd Decision
		var err error
		if leased {
			lease, fd, err = gp.fallback.acquire(ctx, key, n)
		} else {
			fd, err = gp.fallback.decide(ctx, key, n)
		}
		if errors.Is(err, ErrCostExceedsLimit) {
			// The backend could take n, once it is back.
			for _, i := range gp.fallbackPart {
				results[i].RetryAfter, results[i].ResetAfter = retryAfter, retryAfter
			}
			return Lease{}, g.partsAnswer(d, FromFallback), nil
		}
		if err != nil {
			return lease, d, err
		}
		allowed := fd.Allowed
		d.partNext = make([]time.Duration, len(policies))
		for j, i := range gp.fallbackPart {
			r, k := fd.Result, fd.PolicyIndex
			if j < len(fd.Parts) {
				r, k = fd.Parts[j], j
			}
			d.partNext[i], _ = fd.NextUnit(k) // the fallback's, which the Result is
			if limit := policies[i].Limit; limit > 0 {
				// Shown under the backend's policy, whose Limit it has
				// (with less left than the fallback has, one unit more is
				// there now: no next unit).
				r.Limit = limit
				if r.Remaining > limit {
					r.Remaining, d.partNext[i] = limit, 0
				}
			}
			results[i] = r
		}
		for i, p := range gp.policies {
			if p == FailOpen {
				results[i].Allowed = allowed
			}
		}
		return lease, g.partsAnswer(d, FromFallback), nil
	}
	for i := range results {
		results[i].Allowed = true // every part fails open, or a peek
	}
	return Lease{}, g.partsAnswer(d, policySource[gp.policies[0]]), nil
}

// partsAnswer completes d, whose Parts are set, as a Composite's answer is
// made (see Composite): PolicyIndex is the part that bound it, Result that
// part's with the longest RetryAfter and ResetAfter of all, Source source.
func (g *Guard) partsAnswer(d Decision, source Source) Decision {
	d.PolicyIndex = bound(d.Parts)
	if source == FromFallback && d.Parts[d.PolicyIndex].RetryAfter == 0 {
		// An allowed answer is bound by a part whose numbers are known: a
		// part that failed over, not one that failed open, which knows
		// nothing of the key.
		b := -1
		for _, i := range g.parts.fallbackPart {
			if b < 0 || lessLeft(&d.Parts[i], &d.Parts[b]) {
				b = i
			}
		}
		d.PolicyIndex = b
	}
	d.Policy = d.Policies[d.PolicyIndex]
	d.Result = combine(d.Parts, d.PolicyIndex)
	d.Source = source
	d.Enforced = d.Result
	return d
}
