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
	// FromShadow for a denial it let through; nil means NopHooks.
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
// returned as allowed and reported to Hooks as one that would have been
// denied (Source FromShadow). SetEnforce switches between shadowing and
// enforcing at run time.
//
// Spending: the backend decides every call, so an allowed call takes its
// units and a denied one takes nothing, as when enforced: the keys' state
// through a Shadow is, call for call, that of the bare backend. A call let
// through against a denial took nothing, so it must not be refunded or
// settled (AllowShadow says which calls those are; httplimit does not
// adjust them).
//
// Results: a denial let through is returned with Allowed true and a
// RetryAfter of 0, and the backend's Limit, Remaining and ResetAfter, which
// describe the key as it is: typically nothing or little left. Errors are
// returned unchanged, Results included, whatever the mode (a backend
// failure, ErrInvalidCost, ErrCostExceedsLimit with Allowed false): a Shadow
// changes verdicts, not errors.
//
// Stacking: put the Shadow outermost, around a Guard and DenyCache (or
// whatever else the enforced stack is), so that every denial of the stack
// is shadowed and callers that ask for it, such as httplimit, learn through
// ShadowLimiter which calls would have been denied. Around a Guard, that
// includes the Guard's fail-closed denials. A decorator around a Shadow
// still sees every call allowed while it shadows, and does not forward
// AllowShadow.
//
// A Shadow reports its backend's Policy and Policies as its own, and
// forwards AllowBound, so that a Composite's policies reach httplimit
// through it. While it enforces and nothing listens, a call costs one
// atomic load beyond the backend's. A Shadow is safe for concurrent use.
// Create one with NewShadow.
type Shadow struct {
	backend decorated
	hooks   Hooks  // nil when nothing listens
	name    string // in what it reports to hooks
	clock   Clock
	enforce atomic.Bool
}

// ShadowResult is the outcome of one call through a ShadowLimiter.
type ShadowResult struct {
	// Result is what Allow returns: the backend's Result, or, for a
	// denial let through, that Result with Allowed true and RetryAfter 0.
	Result
	// Bound is the index in PoliciesOf the limiter of the policy that
	// bound the decision, as AllowBound returns it; 0 for a backend of
	// one policy.
	Bound int
	// WouldDeny reports that the backend denied the call and the limiter,
	// not enforcing, let it through. The call took nothing.
	WouldDeny bool
	// Backend is the backend's own Result: the denial when WouldDeny,
	// and equal to Result otherwise.
	Backend Result
	// Source says who answered the backend's part: FromBackend, or, for
	// a backend that is a SourceLimiter (a Guard, say), its account, such
	// as FromFailOpen. Only a FromBackend answer that is not WouldDeny
	// took units.
	Source Source
}

// ShadowLimiter is implemented by limiters that can let a denial through
// and say when they did: Shadow. httplimit decides through it, when the
// limiter it is given is one, to mark the responses that would have been
// denied and to leave them unadjusted. Decorators do not forward it, so a
// ShadowLimiter must be the outermost limiter to be seen.
type ShadowLimiter interface {
	Limiter
	// AllowShadow decides n for key as Allow does, and says whether the
	// answer was allowed only because the limiter does not enforce.
	AllowShadow(ctx context.Context, key string, n int) (ShadowResult, error)
}

var (
	_ ShadowLimiter = (*Shadow)(nil)
	_ MultiPolicy   = (*Shadow)(nil)
	_ Adjuster      = (*Shadow)(nil)
)

// NewShadow returns a Shadow around backend, enforcing as cfg.Enforce says.
// It returns an error wrapping ErrInvalidConfig for a nil backend.
func NewShadow(backend Limiter, cfg ShadowConfig) (*Shadow, error) {
	if isNil(backend) {
		return nil, fmt.Errorf("%w: NewShadow: nil backend", ErrInvalidConfig)
	}
	s := &Shadow{backend: decorate(backend), hooks: activeHooks(cfg.Hooks), name: cmp.Or(cfg.Name, "Shadow"), clock: cfg.Clock}
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
func (s *Shadow) SetEnforce(enforce bool) { s.enforce.Store(enforce) }

// Enforcing reports whether the Shadow enforces its backend's denials now.
func (s *Shadow) Enforcing() bool { return s.enforce.Load() }

// Allow decides n for key through the backend and returns its answer, or,
// for a denial while the Shadow does not enforce, that denial as allowed.
// See Shadow.
func (s *Shadow) Allow(ctx context.Context, key string, n int) (Result, error) {
	sr, err := s.AllowShadow(ctx, key, n)
	return sr.Result, err
}

// AllowBound decides as Allow does, and also returns the index in Policies
// of the policy that bound the decision: the backend's when it is a
// MultiPolicy, and 0 otherwise.
func (s *Shadow) AllowBound(ctx context.Context, key string, n int) (Result, int, error) {
	sr, err := s.AllowShadow(ctx, key, n)
	return sr.Result, sr.Bound, err
}

// AllowShadow decides as AllowBound does, and says whether the call was
// let through against the backend's denial, with that denial. A nil ctx is
// an error, and the backend is not called.
func (s *Shadow) AllowShadow(ctx context.Context, key string, n int) (ShadowResult, error) {
	if s == nil || !s.backend.built() {
		return ShadowResult{}, notBuilt("Shadow")
	}
	if ctx == nil {
		res := Result{Limit: s.backend.policy.Limit}
		return ShadowResult{Result: res, Backend: res}, fmt.Errorf("ratelimit: Shadow: %w", errNilContext)
	}
	enforce := s.enforce.Load()
	var start time.Time
	if s.hooks != nil {
		start = s.clock.Now()
	}
	res, bound, answered, err := s.backend.allowSource(ctx, key, n)
	sr := ShadowResult{Result: res, Bound: bound, Backend: res, Source: answered}
	if err == nil && !res.Allowed && !enforce {
		sr.Allowed, sr.RetryAfter, sr.WouldDeny = true, 0, true
	}
	if s.hooks != nil {
		// A decision let through is reported as the backend's denial.
		s.hooks.Decided(Decision{
			Limiter: s.name, Policy: s.backend.policyFor(ctx, key),
			Key: key, Cost: n, Result: sr.Backend, Err: err,
			Latency: s.clock.Now().Sub(start), Source: sr.source(),
		})
	}
	return sr, err
}

// AllowSource decides as Allow does, and also says who answered: FromShadow
// for a denial let through, otherwise the backend (its own account when it
// is a SourceLimiter).
func (s *Shadow) AllowSource(ctx context.Context, key string, n int) (Result, int, Source, error) {
	sr, err := s.AllowShadow(ctx, key, n)
	return sr.Result, sr.Bound, sr.source(), err
}

// source says who answered the call of sr: FromShadow for a denial let
// through, and otherwise the backend, as sr.Source says (FromBackend, the
// zero Source, for a call the backend never saw).
func (sr *ShadowResult) source() Source {
	if sr.WouldDeny {
		return FromShadow
	}
	return sr.Source
}

// Policies returns the backend's policies (see PoliciesOf).
func (s *Shadow) Policies() []NamedPolicy {
	if s == nil {
		return nil
	}
	return s.backend.copyPolicies()
}

// Policy returns the backend's Policy, or the zero Policy if the backend
// reports none.
func (s *Shadow) Policy() Policy {
	if s == nil {
		return Policy{}
	}
	return s.backend.policy
}

// KeyPolicies returns the backend's (see KeyPolicyReporter).
func (s *Shadow) KeyPolicies() PolicyFunc {
	if s == nil {
		return nil
	}
	return s.backend.keyPolicies
}

// Refund forwards to the backend, which must be an Adjuster, whatever the
// mode. Do not refund a call let through against a denial (WouldDeny): it
// took nothing.
func (s *Shadow) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	a, err := s.adjuster()
	if err != nil {
		return Result{}, err
	}
	return a.Refund(ctx, key, n, opts...)
}

// Settle forwards to the backend, which must be an Adjuster, whatever the
// mode. Do not settle a call let through against a denial (WouldDeny): it
// took nothing.
func (s *Shadow) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	a, err := s.adjuster()
	if err != nil {
		return Result{}, err
	}
	return a.Settle(ctx, key, taken, cost, opts...)
}

// Reset forwards to the backend, which must be an Adjuster.
func (s *Shadow) Reset(ctx context.Context, key string) error {
	a, err := s.adjuster()
	if err != nil {
		return err
	}
	return a.Reset(ctx, key)
}

// adjuster returns the backend as an Adjuster, or an error saying it is
// not one.
func (s *Shadow) adjuster() (Adjuster, error) {
	if s == nil || !s.backend.built() {
		return nil, notBuilt("Shadow")
	}
	return s.backend.adjuster("Shadow")
}
