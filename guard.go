package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// FailurePolicy says how a Guard answers while its backend is failing.
type FailurePolicy int

const (
	// FailOpen allows requests while the backend fails: the limit is
	// lifted, the service stays up. The Decision says Allowed, naming the
	// tightest of the backend's policies for the key (see Guard), with its
	// Limit and zeros for the rest. Choose it when an outage of the
	// limiter must not become an outage of the service, as for most APIs.
	FailOpen FailurePolicy = iota
	// FailClosed denies requests while the backend fails, with a
	// RetryAfter (and ResetAfter) of FailClosedRetryAfter, or the rest of
	// the breaker's cool-down while it is open, and the backend's Limit.
	// Choose it when the limit protects something that must not be overrun
	// (a paid upstream, a login endpoint under attack).
	FailClosed
	// FailOver asks the Guard's Fallback limiter instead: an in-process
	// limiter of one replica's share of the limit, which Fleet.Fallback
	// builds and sizes by the replicas alive (the shared limit ÷ live
	// replicas, following the fleet as it grows or shrinks).
	// Choose it for a middle way: still limited, roughly. A cost within the
	// backend's limit that the fallback can never take (it exceeds the
	// fallback's limit) is denied, with the RetryAfter FailClosed would
	// give, rather than answered with ErrCostExceedsLimit.
	FailOver
)

// GuardConfig configures a Guard. The zero value means: no timeout of its
// own, fail open, no circuit breaker.
type GuardConfig struct {
	// Timeout bounds each backend call through its context; 0 leaves
	// only the caller's deadline. A go-redis client honours it only with
	// ContextTimeoutEnabled set.
	Timeout time.Duration
	// OnFailure is the policy for calls the backend fails or the open
	// breaker keeps from it.
	OnFailure FailurePolicy
	// Fallback answers under FailOver, and must be nil otherwise. For a
	// Redis backend shared by several replicas, build it with
	// Fleet.Fallback, which gives each replica its share of the backend's
	// policy, by the number of replicas alive. For a backend that holds
	// leases (see Acquirer), give an in-process Concurrency (or a
	// Composite holding one): its leases are its own (see Guard).
	Fallback Limiter
	// FailClosedRetryAfter is the RetryAfter of a fail-closed denial
	// while the breaker is closed; 0 means 1 s. While the breaker is open,
	// a fail-closed denial's RetryAfter is the rest of the cool-down.
	FailClosedRetryAfter time.Duration
	// BreakerFailures is how many consecutive backend failures open the
	// circuit breaker; 0 means no breaker.
	BreakerFailures int
	// BreakerCoolDown is how long the breaker stays open before it lets
	// one probe call through; it must be > 0 when BreakerFailures is.
	BreakerCoolDown time.Duration
	// Breaker, when not nil, is a circuit breaker this Guard shares with
	// others (see Breaker), in place of one of its own: BreakerFailures
	// and BreakerCoolDown must then be 0, and the breaker's changes go to
	// the Breaker's Hooks, not to this Guard's.
	Breaker *Breaker
	// Hooks receives each decision, and the changes of the Guard's own
	// breaker (a shared Breaker reports to its own Hooks); nil means
	// NopHooks. When it implements AdjustHooks, it also receives every
	// Refund, Settle and Reset the Guard forwards.
	Hooks Hooks
	// Name names the Guard in what it reports to Hooks (Decision's
	// Limiter); "" means "Guard".
	Name string
	// Clock times calls and the breaker's cool-down; nil means the system
	// clock.
	Clock Clock
}

// Guard wraps a Limiter whose backend can fail, typically a Redis limiter,
// so that its failures cannot take the service down with it. Each call gets
// the configured timeout; a backend error is answered by the failure policy
// with a nil error and reported to Hooks; and a circuit breaker stops
// calling a backend that keeps failing, answering from the policy at once
// until a probe after the cool-down succeeds.
//
// Only a failure of the backend (an error of class ErrBackend, or an error
// of a Limiter of another package, which has no class) is answered by the
// failure policy and counted by the breaker. The other errors say nothing
// about the backend's health, and pass through to the caller as they are,
// without a policy answer and without counting toward the breaker or
// closing it: those of class ErrCaller (ErrInvalidCost and
// ErrCostExceedsLimit, the caller's cost; ErrPolicy and ErrInvalidConfig, a
// key's policy that could not be read or is refused, see WithPolicyFunc,
// or a backend that is not built; ErrKeysApart, keys one store cannot
// serve together), ErrCorruptState (one key's data in Redis is not the
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
// are shown. Use it around every limiter that talks to a network; it
// reports its backend's policies as its own.
//
// Leases (see Acquirer): Acquire asks the backend's Acquire within the
// Timeout and answers its failure by the failure policy, as Decide does:
// FailOpen allows with a Lease that holds nothing, FailClosed denies, and
// FailOver acquires from the Fallback (a Concurrency of this replica's
// share of the limit, say), whose Lease holds the fallback's units. A
// lease is released and extended by the limiter that granted it, whether
// or not the backend is up, and Release and Extend are never answered by
// the failure policy: a backend error is returned to the caller, and the
// lease then holds its units until its TTL passes. Guard.Release and
// Guard.Extend bound them by the Timeout; Lease.Release and Lease.Extend
// go to the granting limiter directly, bounded by their ctx alone. A
// backend Acquire that
// timed out may have been granted all the same: its units come back at
// its TTL.
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
	// Breaker's; nil without one. breakerHooks hear of its changes.
	breaker      *breaker
	breakerHooks Hooks
	lastLimit    atomic.Int64 // the Limit of the latest backend answer
}

// NewGuard returns a Guard around backend. It returns an error wrapping
// ErrInvalidConfig for a nil backend, a negative timeout or retry-after, an
// unknown policy, FailOver without a Fallback or a Fallback without FailOver,
// a negative BreakerFailures, or a breaker without a positive cool-down.
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
	case cfg.OnFailure == FailOver && isNil(cfg.Fallback):
		return nil, fmt.Errorf("%w: %s: FailOver needs a Fallback limiter", ErrInvalidConfig, kind)
	case cfg.OnFailure != FailOver && !isNil(cfg.Fallback):
		return nil, fmt.Errorf("%w: %s: a Fallback is used only with OnFailure: FailOver", ErrInvalidConfig, kind)
	case cfg.BreakerFailures < 0:
		return nil, fmt.Errorf("%w: %s: BreakerFailures %d must be >= 0", ErrInvalidConfig, kind, cfg.BreakerFailures)
	case cfg.BreakerFailures > 0 && cfg.BreakerCoolDown <= 0:
		return nil, fmt.Errorf("%w: %s: a breaker needs a BreakerCoolDown > 0, got %v", ErrInvalidConfig, kind, cfg.BreakerCoolDown)
	case cfg.Breaker != nil && (cfg.BreakerFailures != 0 || cfg.BreakerCoolDown != 0):
		return nil, fmt.Errorf("%w: %s: a shared Breaker replaces BreakerFailures and BreakerCoolDown, which must be 0", ErrInvalidConfig, kind)
	case cfg.Breaker != nil && cfg.Breaker.b.threshold == 0:
		return nil, fmt.Errorf("%w: %s: a Breaker must be made by NewBreaker", ErrInvalidConfig, kind)
	}
	if cfg.FailClosedRetryAfter == 0 {
		cfg.FailClosedRetryAfter = time.Second
	}
	cfg.Name = cmp.Or(cfg.Name, "Guard")
	g := &Guard{backend: decorate(backend), cfg: cfg, hooks: activeHooks(cfg.Hooks), adjust: activeAdjustHooks(cfg.Hooks), clock: cfg.Clock}
	if !isNil(cfg.Fallback) {
		g.fallback = decorate(cfg.Fallback)
	}
	if isNil(g.clock) {
		g.clock = systemClock{}
	}
	switch {
	case cfg.Breaker != nil:
		g.breaker, g.breakerHooks = &cfg.Breaker.b, cfg.Breaker.hooks
	case cfg.BreakerFailures > 0:
		g.breaker = &breaker{threshold: cfg.BreakerFailures, coolDown: cfg.BreakerCoolDown}
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
	// The clock is read only for a breaker or a listener.
	var start time.Time
	if g.breaker != nil || g.hooks != nil {
		start = g.clock.Now()
	}
	admitted, wait, change := true, time.Duration(0), transition{}
	if g.breaker != nil {
		admitted, wait, change = g.breaker.admit(start)
		g.report(change)
	}
	if !admitted {
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
	if g.breaker != nil {
		g.report(g.breaker.record(outcome, g.clock.Now()))
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

// Release gives lease's units back through the limiter that granted it
// (see Lease.Release): the backend, or, for a lease acquired under
// FailOver, the Fallback. It runs within the Guard's Timeout and, like
// Refund and Settle, bypasses the breaker and the failure policy: a
// backend error is returned (the lease then holds its units until its TTL
// passes), never answered by the policy. The Guard does not report it:
// the limiter that granted the lease does (see Event.Lease).
func (g *Guard) Release(ctx context.Context, lease Lease) error {
	if g == nil || !g.backend.built() {
		return notBuilt("Guard")
	}
	ctx, cancel := g.adjustContext(ctx)
	defer cancel()
	_, err := forwardLease(ctx, AdjustRelease, lease)
	return err
}

// Extend renews lease through the limiter that granted it (see
// Lease.Extend), within the Guard's Timeout and bypassing the breaker and
// the failure policy, as Release does: a lease of the Fallback is renewed
// by the Fallback, whether or not the backend is back (see Guard, Leases).
// The Guard does not report it: the limiter that granted the lease does.
func (g *Guard) Extend(ctx context.Context, lease Lease) (Lease, error) {
	if g == nil || !g.backend.built() {
		return lease, notBuilt("Guard")
	}
	ctx, cancel := g.adjustContext(ctx)
	defer cancel()
	return forwardLease(ctx, AdjustExtend, lease)
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
	return forwardAdjust(ctx, a, op, key, taken, cost, opts)
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
		d.Bound, perCall = tightest(policies)
		d.Policy = policies[d.Bound]
	}
	limit := d.Policy.Limit
	d.Limit = limit
	if n < 0 || (!perCall && limit > 0 && n > limit) {
		d.Enforced = d.Result
		return Lease{}, d, checkCost(n, limit)
	}
	retryAfter = max(retryAfter, time.Nanosecond)
	if n == 0 && g.cfg.OnFailure != FailOver {
		d.Allowed = true // a peek is always allowed
		d.Enforced = d.Result
		return Lease{}, d, nil
	}
	switch g.cfg.OnFailure {
	case FailOver:
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
// clients are told the shared policy; or,
// when the backend has no policy of that name, fd's own policies, so that
// the policy named is always the one whose numbers are shown.
func (g *Guard) overFallback(d, fd Decision) Decision {
	for i, p := range d.Policies {
		if p.Name == fd.Policy.Name {
			d.Result, d.Bound, d.Policy = fd.Result, i, p
			if p.Limit > 0 {
				// A fallback larger than the shared policy shows no more
				// than its limit left.
				d.Limit, d.Remaining = p.Limit, min(d.Remaining, p.Limit)
			}
			d.Enforced = d.Result
			return d
		}
	}
	fd.Source, fd.WouldDeny, fd.Enforced, fd.rules = FromFallback, false, fd.Result, nil
	return fd
}

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

// report tells the breaker's hooks of a change, if there was one.
func (g *Guard) report(t transition) {
	if g.breakerHooks != nil && t.from != t.to {
		g.breakerHooks.BreakerChanged(t.from, t.to)
	}
}

// BreakerState returns the circuit breaker's state now, its own or its
// shared Breaker's. It is BreakerClosed for a nil *Guard or one without a
// breaker.
func (g *Guard) BreakerState() BreakerState {
	if g == nil || g.breaker == nil {
		return BreakerClosed
	}
	return g.breaker.current()
}
