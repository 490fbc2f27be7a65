package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shadowStart is the fake clocks' start in the Shadow tests.
var shadowStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newShadowBucket returns a token bucket of capacity refilling at rate on
// clock.
func newShadowBucket(t *testing.T, rate Rate, capacity int, clock Clock) *TokenBucket {
	t.Helper()
	b, err := NewTokenBucket(rate, capacity, WithClock(clock))
	require.NoError(t, err)
	return b
}

// shadowStep is one call of a schedule: after advance, n for key.
type shadowStep struct {
	advance time.Duration
	key     string
	n       int
}

// shadowSchedule drains "a" past empty, lets it refill partly, asks for
// more than is there, and touches "b", with costs of 0 to 3.
var shadowSchedule = func() []shadowStep {
	var steps []shadowStep
	for range 8 {
		steps = append(steps, shadowStep{0, "a", 1})
	}
	for i := range 30 {
		steps = append(steps, shadowStep{300 * time.Millisecond, "a", 1 + i%3})
		if i%4 == 0 {
			steps = append(steps, shadowStep{0, "b", 2}, shadowStep{0, "a", 0})
		}
	}
	return steps
}()

func TestShadowSpendsExactlyAsEnforced(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(shadowStart)
	enforced := newShadowBucket(t, PerSecond(2), 5, clock)
	shadowed := newShadowBucket(t, PerSecond(2), 5, clock)
	s, err := NewShadow(shadowed, ShadowConfig{})
	require.NoError(t, err)
	require.False(t, s.Enforcing(), "the zero ShadowConfig shadows")

	denials := 0
	for i, step := range shadowSchedule {
		clock.Advance(step.advance)
		want, err := enforced.Allow(ctx, step.key, step.n)
		require.NoError(t, err)
		d, err := s.Decide(ctx, step.key, step.n)
		require.NoError(t, err)

		assert.Equal(t, want, d.Enforced, "call %d: the backend decides as an enforcing bucket", i)
		assert.Equal(t, !want.Allowed, d.WouldDeny, "call %d", i)
		assert.True(t, d.Allowed, "call %d: a shadow never denies", i)
		assert.Zero(t, d.RetryAfter, "call %d", i)
		assert.Equal(t, want.Limit, d.Limit, "call %d", i)
		assert.Equal(t, want.Remaining, d.Remaining, "call %d", i)
		assert.Equal(t, want.ResetAfter, d.ResetAfter, "call %d", i)
		assert.Zero(t, d.PolicyIndex, "call %d", i)
		wantSource := FromBackend
		if !want.Allowed {
			denials++
			wantSource = FromShadow
		}
		assert.Equal(t, wantSource, d.Source, "call %d", i)
	}
	require.Greater(t, denials, 5, "the schedule must deny")

	// The keys are left in the same state: the same peeks, and the same
	// answers from here on.
	for _, key := range []string{"a", "b", "c"} {
		want, err := enforced.Allow(ctx, key, 0)
		require.NoError(t, err)
		got, err := shadowed.Allow(ctx, key, 0)
		require.NoError(t, err)
		assert.Equal(t, want, got, key)
	}
	for range 6 {
		want, err := enforced.Allow(ctx, "a", 1)
		require.NoError(t, err)
		got, err := shadowed.Allow(ctx, "a", 1)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
}

func TestShadowEnforcingAnswersAsTheBackend(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(shadowStart)
	bare := newShadowBucket(t, PerSecond(2), 5, clock)
	s, err := NewShadow(newShadowBucket(t, PerSecond(2), 5, clock), ShadowConfig{Enforce: true})
	require.NoError(t, err)
	require.True(t, s.Enforcing())

	for i, step := range shadowSchedule {
		clock.Advance(step.advance)
		want, err := bare.Allow(ctx, step.key, step.n)
		require.NoError(t, err)
		d, err := s.Decide(ctx, step.key, step.n)
		require.NoError(t, err)
		assert.Equal(t, want, d.Result, "call %d", i)
		assert.Equal(t, want, d.Enforced, "call %d", i)
		assert.False(t, d.WouldDeny, "call %d", i)
		assert.Equal(t, FromBackend, d.Source, "call %d", i)
		assert.Zero(t, d.PolicyIndex, "call %d", i)
	}
}

// withoutRules returns ev without its Decision's rules (how each policy's
// state moves, for a DenyCache), to compare it with a literal.
func withoutRules(ev Event) Event {
	ev.rules = nil
	return ev
}

// TestShadowHooksSeeWouldDenyDecisionsWithTheBackendsResult: a denial let
// through is reported with the Result the caller got (allowed), Source
// FromShadow, WouldDeny, and the backend's denial in Enforced.
func TestShadowHooksSeeWouldDenyDecisionsWithTheBackendsResult(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(shadowStart)
	hooks := &recordingHooks{}
	bucket := newShadowBucket(t, PerSecond(1), 2, clock)
	s, err := NewShadow(bucket, ShadowConfig{Hooks: hooks, Clock: clock})
	require.NoError(t, err)

	for range 2 {
		res, err := s.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	res, err := s.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 2 * time.Second}, res)

	require.Len(t, hooks.events, 3)
	assert.Equal(t, FromBackend, hooks.events[0].Source)
	assert.True(t, hooks.events[0].Result.Allowed)
	policy := NamedPolicy{Name: "default", Policy: Policy{Limit: 2, Window: 2 * time.Second}}
	assert.Equal(t, Event{
		Limiter: "Shadow", Key: KeyDigest("k"), Cost: 1,
		Decision: Decision{
			Result: res, Policy: policy, Policies: []NamedPolicy{policy}, Source: FromShadow, WouldDeny: true,
			Enforced: Result{Allowed: false, Limit: 2, Remaining: 0, RetryAfter: time.Second, ResetAfter: 2 * time.Second},
		},
	}, withoutRules(hooks.last()))
	assert.Equal(t, "shadow", FromShadow.String())

	// Enforcing, the same denial is returned and reported as the backend's.
	s.SetEnforce(true)
	res, err = s.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, time.Second, res.RetryAfter)
	assert.Equal(t, Event{
		Limiter: "Shadow", Key: KeyDigest("k"), Cost: 1,
		Decision: Decision{Result: res, Policy: policy, Policies: []NamedPolicy{policy}, Source: FromBackend, Enforced: res},
	}, withoutRules(hooks.last()))
}

func TestShadowReturnsErrorsUnchanged(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(shadowStart)
	hooks := &recordingHooks{}
	s, err := NewShadow(newShadowBucket(t, PerSecond(1), 3, clock), ShadowConfig{Hooks: hooks, Clock: clock})
	require.NoError(t, err)

	d, err := s.Decide(ctx, "k", 4)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.Equal(t, Result{Limit: 3}, d.Result)
	assert.Equal(t, Result{Limit: 3}, d.Enforced)
	assert.False(t, d.WouldDeny, "an error is not a denial to let through")
	assert.Equal(t, FromShadow, d.Source, "the error of a Shadow that does not enforce, which middlewares let through")
	assert.Equal(t, FromShadow, hooks.last().Source)
	assert.ErrorIs(t, hooks.last().Err, ErrCostExceedsLimit)

	_, err = s.Allow(ctx, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)

	stub := &stubBackend{}
	stub.set(Result{Limit: 7}, errDown)
	s, err = NewShadow(stub, ShadowConfig{})
	require.NoError(t, err)
	res, err := s.Allow(ctx, "k", 1)
	require.ErrorIs(t, err, errDown)
	assert.Equal(t, Result{Limit: 7}, res, "a failure is not a denial to let through")

	var nilCtx context.Context
	_, err = s.Allow(nilCtx, "k", 1)
	require.ErrorIs(t, err, errNilContext)
	assert.Equal(t, int64(1), stub.calls.Load(), "a nil ctx does not reach the backend")
}

func TestShadowSetEnforceIsSafeUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	const capacity, goroutines, calls = 100, 64, 200
	clock := ratelimittest.NewClock(shadowStart) // stands still: no refill
	backend := &allowedCounter{Limiter: newShadowBucket(t, PerSecond(1), capacity, clock)}
	s, err := NewShadow(backend, ShadowConfig{})
	require.NoError(t, err)

	stop := make(chan struct{})
	flipped := make(chan struct{})
	go func() {
		defer close(flipped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				s.SetEnforce(i%2 == 0)
				_ = s.Enforcing()
			}
		}
	}()

	var taken, wouldDeny, denied atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				var res Result
				if g%2 == 0 {
					d, err := s.Decide(ctx, "k", 1)
					if !assert.NoError(t, err) {
						return
					}
					assert.Equal(t, d.WouldDeny, d.Allowed && !d.Enforced.Allowed)
					if d.WouldDeny {
						wouldDeny.Add(1)
						continue
					}
					res = d.Result
				} else {
					var err error
					if res, err = s.Allow(ctx, "k", 1); !assert.NoError(t, err) {
						return
					}
				}
				if res.Allowed {
					taken.Add(1)
				} else {
					denied.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-flipped

	// Allow's answers count shadowed denials as taken; Decide's tell
	// them apart. Whatever the mode, the bucket gave exactly its capacity.
	assert.Equal(t, int64(goroutines*calls), taken.Load()+wouldDeny.Load()+denied.Load())
	assert.Equal(t, int64(capacity), backend.allowed.Load(), "the bucket gave exactly its capacity")
	peek, err := s.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 0, peek.Remaining)

	s.SetEnforce(true)
	res, err := s.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "enforcing from the next call on")
	s.SetEnforce(false)
	res, err = s.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "shadowing from the next call on")
}

func TestShadowSpendsTheCapacityOnceUnderConcurrency(t *testing.T) {
	ctx := context.Background()
	const capacity, goroutines = 50, 64
	clock := ratelimittest.NewClock(shadowStart)
	s, err := NewShadow(newShadowBucket(t, PerSecond(1), capacity, clock), ShadowConfig{})
	require.NoError(t, err)
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				d, err := s.Decide(ctx, "k", 1)
				if assert.NoError(t, err) && assert.True(t, d.Allowed) && !d.WouldDeny {
					taken.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(capacity), taken.Load())
}

func TestShadowAroundACompositeKeepsItsPolicies(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(shadowStart)
	newComposite := func() *Composite {
		c, err := NewComposite(
			Part{Name: "per-second", Limiter: newShadowBucket(t, PerSecond(2), 2, clock)},
			Part{Name: "per-minute", Limiter: newShadowBucket(t, PerMinute(3), 3, clock)},
		)
		require.NoError(t, err)
		return c
	}
	bare, inner := newComposite(), newComposite()
	s, err := NewShadow(inner, ShadowConfig{})
	require.NoError(t, err)

	want, err := bare.Policies(ctx, "k")
	require.NoError(t, err)
	got, err := s.Policies(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.Equal(t, []string{"per-second", "per-minute"}, []string{got[0].Name, got[1].Name})

	for i, advance := range []time.Duration{0, 0, 0, time.Second, 0, time.Second} {
		clock.Advance(advance)
		want, err := bare.Decide(ctx, "k", 1)
		require.NoError(t, err)
		d, err := s.Decide(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, want.PolicyIndex, d.PolicyIndex, "call %d", i)
		assert.Equal(t, want.Policy, d.Policy, "call %d", i)
		assert.Equal(t, want.Policies, d.Policies, "call %d", i)
		assert.Equal(t, want.Parts, d.Parts, "call %d", i)
		assert.Equal(t, want.Result, d.Enforced, "call %d", i)
		assert.Equal(t, !want.Allowed, d.WouldDeny, "call %d", i)
		res := want.Result
		if !want.Allowed {
			res.Allowed, res.RetryAfter = true, 0
		}
		assert.Equal(t, res, d.Result, "call %d: a denial let through", i)
		wantBounds := []int{0, 0, 0, 1, 1, 1} // denied: the third by per-second, the fifth and sixth by per-minute
		assert.Equal(t, wantBounds[i], d.PolicyIndex, "call %d", i)
	}

	d, err := s.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.WouldDeny)
	assert.Equal(t, 1, d.PolicyIndex)
	assert.Equal(t, "per-minute", d.Policy.Name)
	assert.Equal(t, d.Policy, d.Policies[d.PolicyIndex])
}

func TestShadowForwardsAdjustments(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(shadowStart)
	bare := newShadowBucket(t, PerSecond(1), 5, clock)
	s, err := NewShadow(newShadowBucket(t, PerSecond(1), 5, clock), ShadowConfig{})
	require.NoError(t, err)
	var _ Adjuster = s

	for _, l := range []Limiter{bare, s} {
		_, err := l.Allow(ctx, "k", 4)
		require.NoError(t, err)
	}
	want, err := bare.Refund(ctx, "k", 2)
	require.NoError(t, err)
	got, err := s.Refund(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	want, err = bare.Settle(ctx, "k", 1, 4)
	require.NoError(t, err)
	got, err = s.Settle(ctx, "k", 1, 4)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	require.NoError(t, s.Reset(ctx, "k"))
	peek, err := s.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 5, peek.Remaining)

	// A backend that cannot adjust makes every adjustment an error.
	plain, err := NewShadow(&stubBackend{}, ShadowConfig{})
	require.NoError(t, err)
	_, err = plain.Refund(ctx, "k", 1)
	assert.ErrorContains(t, err, "cannot refund, settle or reset")
	_, err = plain.Settle(ctx, "k", 1, 2)
	assert.ErrorContains(t, err, "cannot refund, settle or reset")
	assert.ErrorContains(t, plain.Reset(ctx, "k"), "cannot refund, settle or reset")
}

func TestShadowReportsItsBackendsPolicy(t *testing.T) {
	clock := ratelimittest.NewClock(shadowStart)
	b := newShadowBucket(t, PerSecond(2), 10, clock)
	s, err := NewShadow(b, ShadowConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	policies, err := s.Policies(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, []NamedPolicy{{Name: "default", Policy: b.Policy()}}, policies)
	d, err := s.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, NamedPolicy{Name: "default", Policy: b.Policy()}, d.Policy)

	s, err = NewShadow(&stubBackend{}, ShadowConfig{})
	require.NoError(t, err)
	policies, err = s.Policies(ctx, "k")
	require.NoError(t, err)
	assert.Nil(t, policies, "a backend that is not a Decider tells no policy")
}

func TestNewShadowRejectsANilBackend(t *testing.T) {
	_, err := NewShadow(nil, ShadowConfig{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewShadow((*TokenBucket)(nil), ShadowConfig{})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestShadowNotMadeByItsConstructorErrs(t *testing.T) {
	ctx := context.Background()
	for _, s := range []*Shadow{nil, {}} {
		_, err := s.Allow(ctx, "k", 1)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		d, err := s.Decide(ctx, "k", 1)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.Equal(t, NamedPolicy{}, d.Policy)
		_, err = s.Refund(ctx, "k", 1)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorIs(t, s.Reset(ctx, "k"), ErrInvalidConfig)
		policies, err := s.Policies(ctx, "k")
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.Nil(t, policies)
	}
}

// allowedCounter counts the calls its Limiter allowed.
type allowedCounter struct {
	Limiter
	allowed atomic.Int64
}

func (c *allowedCounter) Allow(ctx context.Context, key string, n int) (Result, error) {
	res, err := c.Limiter.Allow(ctx, key, n)
	if err == nil && res.Allowed && n > 0 {
		c.allowed.Add(1)
	}
	return res, err
}
