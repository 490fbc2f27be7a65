package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"sync/atomic"
	"time"
)

// ShadowConfig configures a Shadow. The zero value means: shadow (do not
// enforce), no hooks, the system clock.
type ShadowConfig struct {
	// Enforce is the mode the Shadow starts in: false (the zero value,
	// and the point of the type) lets every denial through; true returns
	// the backend's answers as they are. SetEnforce changes it later.
	Enforce bool
	// Hooks receives every Allow call the Shadow answers, with Source
	// FromShadow for a denial it let through; nil means NopHooks. When it
	// implements AdjustHooks, it also receives every Refund, Settle and
	// Reset the Shadow forwards.
	Hooks Hooks
	// Name names the Shadow in what it reports to Hooks (Decision's
	// Limiter); "" means "Shadow".
	Name string
	// Clock times calls for Hooks; nil means the system clock. It is read
	// only when Hooks listen.
	Clock Clock
}

// Shadow wraps a Limiter so that a limit can be rolled out without denying
// anyone: every call is decided and spent by the backend exactly as if the
// limit were enforced, and, while the Shadow is not enforcing, a denial is
// returned as allowed: its Decision says WouldDeny, with Source FromShadow
// and the denial in Enforced, and Hooks get it so. SetEnforce switches
// between shadowing and enforcing at run time.
//
// Spending: the backend decides every call, so an allowed call takes its
// units and a denied one takes nothing, as when enforced: the keys' state
// through a Shadow is, call for call, that of the bare backend. A call let
// through against a denial took nothing, so it must not be refunded or
// settled (its Decision's WouldDeny says so; httplimit does not adjust
// them). Likewise for a concurrency limit (see Acquirer): Acquire takes
// the backend's lease when it allows, and a denial let through gets a
// Lease that holds nothing, so the work it admits is not counted in
// flight, and the keys' leases are those of the bare backend. Release and
// Extend go to the limiter that granted the lease, whatever the mode.
//
// Results: a denial let through is returned with Allowed true and a
// RetryAfter of 0, and the backend's Limit, Remaining and ResetAfter, which
// describe the key as it is: typically nothing or little left. Errors are
// returned unchanged, whatever the mode (a backend failure, ErrPolicy,
// ErrInvalidCost, ErrCostExceedsLimit with Allowed false): a Shadow
// changes verdicts, not errors. While it does not enforce, the Decision of
// an error says Source FromShadow, and httplimit and grpclimit then let
// the request through after their error hook, whatever the error's class
// and unless their WithFailClosed says otherwise (a cost above the limit
// still answers 413 / ResourceExhausted), so that a limit being rolled out
// denies no one.
//
// Stacking: put the Shadow outermost, around a Guard and DenyCache (or
// whatever else the enforced stack is), so that every denial of the stack
// is shadowed, including a Guard's fail-closed denials. A Guard around a
// Shadow passes its Decision on, WouldDeny included; a DenyCache must not
// wrap a Shadow (see DenyCache).
//
// A Shadow reports its backend's policies as its own. While it enforces
// and nothing listens, a call costs one atomic load beyond the backend's.
// A Shadow is safe for concurrent use. Create one with NewShadow.
type Shadow struct {
	backend decorated
	hooks   Hooks       // nil when nothing listens
	adjust  AdjustHooks // hooks, when they hear of adjustments; nil otherwise
	name    string      // in what it reports to hooks
	clock   Clock
	enforce atomic.Bool
}

var (
	_ Decider  = (*Shadow)(nil)
	_ Adjuster = (*Shadow)(nil)
	_ Acquirer = (*Shadow)(nil)
)

// NewShadow returns a Shadow around backend, enforcing as cfg.Enforce says.
// It returns an error wrapping ErrInvalidConfig for a nil backend.
func NewShadow(backend Limiter, cfg ShadowConfig) (*Shadow, error) {
	if isNil(backend) {
		return nil, fmt.Errorf("%w: NewShadow: nil backend", ErrInvalidConfig)
	}
	s := &Shadow{
		backend: decorate(backend), hooks: activeHooks(cfg.Hooks), adjust: activeAdjustHooks(cfg.Hooks),
		name: cmp.Or(cfg.Name, "Shadow"), clock: cfg.Clock,
	}
	if isNil(s.clock) {
		s.clock = systemClock{}
	}
	s.enforce.Store(cfg.Enforce)
	return s, nil
}

// SetEnforce makes the Shadow enforce its backend's denials (true) or let
// them through (false), from the next call on. Calls under way finish in
// the mode they started in. It is safe to call at any time, from any
// goroutine.
// It does nothing on a nil *Shadow.
func (s *Shadow) SetEnforce(enforce bool) {
	if s != nil {
		s.enforce.Store(enforce)
	}
}

// Enforcing reports whether the Shadow enforces its backend's denials now.
// It is false for a nil *Shadow.
func (s *Shadow) Enforcing() bool { return s != nil && s.enforce.Load() }

// Allow decides n for key through the backend and returns its answer, or,
// for a denial while the Shadow does not enforce, that denial as allowed.
// See Shadow.
func (s *Shadow) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := s.Decide(ctx, key, n)
	return d.Result, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): the backend's, or, for a denial let through, that Decision
// with Allowed true, RetryAfter 0, WouldDeny true, Source FromShadow, and
// the denial in Enforced; for an error while not enforcing, the backend's
// Decision and error with Source FromShadow. A nil ctx is an error, and the backend is not
// called.
func (s *Shadow) Decide(ctx context.Context, key string, n int) (Decision, error) {
	_, d, err := s.call(ctx, key, n, false)
	return d, err
}

// Acquire takes n units for key through the backend's Acquire (see
// Acquirer) and returns its Lease and Decision, as Decide does: while the
// Shadow does not enforce, a denial is let through as allowed with a Lease
// that holds nothing (WouldDeny, Source FromShadow): the work it admits is
// not counted. Over a backend that is not an Acquirer, it decides as
// Decide does and returns a Lease that holds nothing.
func (s *Shadow) Acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	return s.call(ctx, key, n, true)
}

// call is Decide, or Acquire when leased.
func (s *Shadow) call(ctx context.Context, key string, n int, leased bool) (Lease, Decision, error) {
	if s == nil || !s.backend.built() {
		return Lease{}, Decision{}, notBuilt("Shadow")
	}
	if ctx == nil {
		return Lease{}, Decision{}, fmt.Errorf("ratelimit: Shadow: %w", errNilContext)
	}
	enforce := s.enforce.Load()
	var start time.Time
	if s.hooks != nil {
		start = s.clock.Now()
	}
	var lease Lease
	var d Decision
	var err error
	if leased {
		lease, d, err = s.backend.acquire(ctx, key, n)
	} else {
		d, err = s.backend.decide(ctx, key, n)
	}
	switch {
	case enforce:
	case err != nil:
		// The error is returned as it is, but marked as the Shadow's,
		// so that the middlewares do not refuse the request for it.
		d.Source = FromShadow
	case !d.Allowed:
		d.Enforced = d.Result
		d.Allowed, d.RetryAfter, d.WouldDeny, d.Source = true, 0, true, FromShadow
	}
	if s.hooks != nil {
		s.hooks.Decided(Event{
			Limiter: s.name, Key: s.backend.keys.event(s.hooks, key), Cost: n, Decision: d, Err: err,
			Latency: s.clock.Now().Sub(start),
		})
	}
	return lease, d, err
}

// Policies returns the backend's policies for key (see Decider).
func (s *Shadow) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if s == nil || !s.backend.built() {
		return nil, notBuilt("Shadow")
	}
	return s.backend.policies(ctx, key)
}

// Refund forwards to the backend, which must be an Adjuster, whatever the
// mode. Do not refund a call let through against a denial (a Decision's
// WouldDeny): it took nothing.
func (s *Shadow) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return s.adjustReported(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle forwards to the backend, which must be an Adjuster, whatever the
// mode. Do not settle a call let through against a denial (a Decision's
// WouldDeny): it took nothing.
func (s *Shadow) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return s.adjustReported(ctx, AdjustSettle, key, taken, cost, opts)
}

// Reset forwards to the backend, which must be an Adjuster.
func (s *Shadow) Reset(ctx context.Context, key string) error {
	_, err := s.adjustReported(ctx, AdjustReset, key, 0, 0, nil)
	return err
}

// adjustReported forwards the adjustment op of taken and cost to the
// backend, and reports it to the adjust hooks, if any.
func (s *Shadow) adjustReported(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if s == nil || s.adjust == nil {
		return s.forward(ctx, op, key, taken, cost, opts)
	}
	start := s.clock.Now()
	res, err := s.forward(ctx, op, key, taken, cost, opts)
	adjusted(s.adjust, s.name, op, s.backend.keys.event(s.adjust, key), taken, cost, opts, res, err, s.clock.Now().Sub(start))
	return res, err
}

// forward forwards the adjustment op of taken and cost to the backend.
func (s *Shadow) forward(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	a, err := s.adjuster()
	if err != nil {
		return Result{}, err
	}
	return forwardAdjust(ctx, a, op, key, taken, cost, opts)
}

// adjuster returns the backend as an Adjuster, or an error saying it is
// not one.
func (s *Shadow) adjuster() (Adjuster, error) {
	if s == nil || !s.backend.built() {
		return nil, notBuilt("Shadow")
	}
	return s.backend.adjuster("Shadow")
}

func (s *Shadow) limiter() Limiter { return s }

func (s *Shadow) backendOf() *decorated {
	if s == nil {
		return nil
	}
	return &s.backend
}
