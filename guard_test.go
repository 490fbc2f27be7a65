package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGuardFailurePolicies(t *testing.T) {
	ok := Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second}
	// A fallback of the backend's size, which starts from the backend's 9
	// left (see TestGuardFallbackStartsFromWhatTheBackendHadLeft).
	fallback, err := NewTokenBucket(PerSecond(1), 10, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	cases := []struct {
		name   string
		cfg    GuardConfig
		want   Result
		source Source
	}{
		{"fail open", GuardConfig{}, Result{Allowed: true, Limit: 10}, FromFailOpen},
		{"fail closed", GuardConfig{OnFailure: FailClosed}, Result{Limit: 10, RetryAfter: time.Second, ResetAfter: time.Second}, FromFailClosed},
		{"fail closed with a retry", GuardConfig{OnFailure: FailClosed, FailClosedRetryAfter: 3 * time.Second}, Result{Limit: 10, RetryAfter: 3 * time.Second, ResetAfter: 3 * time.Second}, FromFailClosed},
		{"fail over", GuardConfig{OnFailure: FailOver, Fallback: fallback}, Result{Allowed: true, Limit: 10, Remaining: 8, ResetAfter: 2 * time.Second}, FromFallback},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			backend := &stubBackend{res: ok}
			hooks := &recordingHooks{}
			tc.cfg.Hooks = hooks
			g, err := NewGuard(backend, tc.cfg)
			require.NoError(t, err)
			res, err := g.Allow(context.Background(), "k", 1)
			require.NoError(t, err)
			assert.Equal(t, ok, res)
			assert.Equal(t, FromBackend, hooks.last().Source)

			backend.set(Result{}, errDown)
			res, err = g.Allow(context.Background(), "k", 1)
			require.NoError(t, err, "the policy answers; the error goes to the hooks")
			assert.Equal(t, tc.want, res)
			d := hooks.last()
			assert.Equal(t, tc.source, d.Source)
			assert.ErrorIs(t, d.BackendErr, errDown)
			assert.Equal(t, KeyDigest("k"), d.Key)
			assert.Equal(t, 1, d.Cost)
		})
	}
}

func TestGuardPassesCallerMistakesThrough(t *testing.T) {
	backend, err := NewTokenBucket(PerSecond(1), 3, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailClosed, BreakerFailures: 1, BreakerCoolDown: time.Minute})
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err = g.Allow(context.Background(), "k", -1)
		require.ErrorIs(t, err, ErrInvalidCost)
		_, err = g.Allow(context.Background(), "k", 4)
		require.ErrorIs(t, err, ErrCostExceedsLimit)
	}
	assert.Equal(t, BreakerClosed, g.BreakerState(), "validation errors are not backend failures")
}

func TestGuardBreakerOpensProbesAndCloses(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend := &stubBackend{err: errDown}
	hooks := &recordingHooks{}
	g, err := NewGuard(backend, GuardConfig{
		OnFailure: FailClosed, BreakerFailures: 3, BreakerCoolDown: 10 * time.Second,
		Hooks: hooks, Clock: clock,
	})
	require.NoError(t, err)
	ctx := context.Background()

	for i := 0; i < 3; i++ {
		_, err := g.Allow(ctx, "k", 1)
		require.NoError(t, err)
	}
	assert.Equal(t, int64(3), backend.calls.Load())
	assert.Equal(t, BreakerOpen, g.BreakerState())

	// Open: answered by the policy without touching the backend, with
	// the rest of the cool-down as RetryAfter.
	clock.Advance(4 * time.Second)
	for i := 0; i < 100; i++ {
		res, err := g.Allow(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, Result{RetryAfter: 6 * time.Second, ResetAfter: 6 * time.Second}, res)
	}
	assert.Equal(t, int64(3), backend.calls.Load())
	assert.ErrorIs(t, hooks.last().BackendErr, errBreakerOpen)

	// After the cool-down one probe goes through; it fails, so the
	// breaker opens again for a full cool-down.
	clock.Advance(6 * time.Second)
	_, err = g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(4), backend.calls.Load())
	assert.Equal(t, BreakerOpen, g.BreakerState())
	_, err = g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(4), backend.calls.Load())

	// The backend recovers: the next probe closes the breaker.
	backend.set(Result{Allowed: true, Limit: 5, Remaining: 4}, nil)
	clock.Advance(10 * time.Second)
	res, err := g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, BreakerClosed, g.BreakerState())
	assert.Equal(t, [][2]BreakerState{
		{BreakerClosed, BreakerOpen},
		{BreakerOpen, BreakerHalfOpen}, {BreakerHalfOpen, BreakerOpen},
		{BreakerOpen, BreakerHalfOpen}, {BreakerHalfOpen, BreakerClosed},
	}, hooks.changes)
}

func TestGuardHalfOpenLetsOneProbeThrough(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend := &stubBackend{err: errDown}
	g, err := NewGuard(backend, GuardConfig{BreakerFailures: 1, BreakerCoolDown: time.Second, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, BreakerOpen, g.BreakerState())

	// The probe hangs on the backend; every other call meanwhile is
	// answered by the policy.
	backend.mu.Lock()
	backend.block = true
	backend.mu.Unlock()
	clock.Advance(time.Second)
	probeCtx, cancelProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		_, _ = g.Allow(probeCtx, "k", 1)
	}()
	require.Eventually(t, func() bool { return backend.calls.Load() == 2 }, 5*time.Second, time.Millisecond)
	for i := 0; i < 50; i++ {
		res, err := g.Allow(ctx, "k", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "fail open while the probe is out")
	}
	assert.Equal(t, int64(2), backend.calls.Load())
	assert.Equal(t, BreakerHalfOpen, g.BreakerState())

	// The probe's caller gives up: no verdict, and the next call probes.
	cancelProbe()
	<-probeDone
	backend.mu.Lock()
	backend.block = false
	backend.mu.Unlock()
	backend.set(Result{Allowed: true, Limit: 1}, nil)
	_, err = g.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, int64(3), backend.calls.Load())
	assert.Equal(t, BreakerClosed, g.BreakerState())
}

func TestGuardTimeoutBoundsTheCall(t *testing.T) {
	backend := &stubBackend{block: true}
	hooks := &recordingHooks{}
	g, err := NewGuard(backend, GuardConfig{Timeout: 20 * time.Millisecond, OnFailure: FailClosed, Hooks: hooks})
	require.NoError(t, err)
	res, err := g.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.ErrorIs(t, hooks.last().BackendErr, context.DeadlineExceeded)
}

func TestGuardCallerCancellationIsNotAFailure(t *testing.T) {
	backend := &stubBackend{block: true}
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailClosed, BreakerFailures: 1, BreakerCoolDown: time.Minute})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = g.Allow(ctx, "k", 1)
	require.ErrorIs(t, err, context.Canceled, "the caller's own cancellation comes back as an error")
	assert.Equal(t, BreakerClosed, g.BreakerState())
}

func TestNewGuardRejectsBadConfig(t *testing.T) {
	backend := &stubBackend{}
	fallback, err := NewTokenBucket(PerSecond(1), 1)
	require.NoError(t, err)
	cases := []struct {
		name    string
		backend Limiter
		cfg     GuardConfig
		want    string
	}{
		{"nil backend", nil, GuardConfig{}, "nil backend"},
		{"typed nil backend", (*TokenBucket)(nil), GuardConfig{}, "nil backend"},
		{"negative timeout", backend, GuardConfig{Timeout: -1}, "Timeout"},
		{"negative retry", backend, GuardConfig{FailClosedRetryAfter: -1}, "FailClosedRetryAfter"},
		{"unknown policy", backend, GuardConfig{OnFailure: 7}, "unknown failure policy"},
		{"fail over without fallback", backend, GuardConfig{OnFailure: FailOver}, "needs a Fallback"},
		{"fallback without fail over", backend, GuardConfig{Fallback: fallback}, "only with OnFailure: FailOver"},
		{"negative breaker", backend, GuardConfig{BreakerFailures: -1}, "BreakerFailures"},
		{"breaker without cool-down", backend, GuardConfig{BreakerFailures: 3}, "BreakerCoolDown"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g, err := NewGuard(tc.backend, tc.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, g)
		})
	}
}

func TestGuardPassesCorruptStateThroughWithoutMovingTheBreaker(t *testing.T) {
	for _, policy := range []FailurePolicy{FailOpen, FailClosed} {
		clock := ratelimittest.NewClock(epoch)
		bad := fmt.Errorf("ratelimit: Redis token bucket \"k\": %w", ErrCorruptState)
		backend := &stubBackend{res: Result{Limit: 2}, err: bad}
		hooks := &recordingHooks{}
		g, err := NewGuard(backend, GuardConfig{OnFailure: policy, BreakerFailures: 5, BreakerCoolDown: time.Minute, Hooks: hooks, Clock: clock})
		require.NoError(t, err)
		for i := 0; i < 20; i++ {
			res, err := g.Allow(context.Background(), "bad", 1)
			require.ErrorIs(t, err, ErrCorruptState, "policy %d: the caller sees the key's error", policy)
			assert.False(t, res.Allowed)
		}
		assert.Equal(t, BreakerClosed, g.BreakerState(), "policy %d", policy)
		assert.Equal(t, FromBackend, hooks.last().Source)
		assert.ErrorIs(t, hooks.last().Err, ErrCorruptState)
		assert.Empty(t, hooks.changes)

		// Nor does it count between real failures: four failures, a bad
		// key, one more failure is five in a row only if it reset nothing
		// and counted nothing.
		backend.set(Result{}, errDown)
		for i := 0; i < 4; i++ {
			_, err := g.Allow(context.Background(), "k", 1)
			require.NoError(t, err)
		}
		backend.set(Result{}, bad)
		_, err = g.Allow(context.Background(), "bad", 1)
		require.ErrorIs(t, err, ErrCorruptState)
		assert.Equal(t, BreakerClosed, g.BreakerState())
		backend.set(Result{}, errDown)
		_, err = g.Allow(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.Equal(t, BreakerOpen, g.BreakerState(), "the fifth real failure in a row opens it")
	}
}

func TestGuardFailOverDeniesACostOnlyTheFallbackCannotTake(t *testing.T) {
	// A shared limit of 100, a fallback of 25 per replica, the backend
	// down: a cost of 30 is valid and must wait for the backend, not be
	// told it can never succeed.
	backend, err := NewTokenBucket(PerSecond(10), 100)
	require.NoError(t, err)
	down := &policyStub{stubBackend: stubBackend{err: errDown}, policy: backend.Policy()}
	fallback, err := NewTokenBucket(PerMinute(150), 25)
	require.NoError(t, err)
	clock := ratelimittest.NewClock(epoch)
	g, err := NewGuard(down, GuardConfig{OnFailure: FailOver, Fallback: fallback, BreakerFailures: 1, BreakerCoolDown: 10 * time.Second, Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()

	res, err := g.Allow(ctx, "k", 30) // the backend fails: FailClosedRetryAfter
	require.NoError(t, err)
	assert.Equal(t, Result{Limit: 100, RetryAfter: time.Second, ResetAfter: time.Second}, res)
	require.Equal(t, BreakerOpen, g.BreakerState())

	clock.Advance(3 * time.Second) // open: the rest of the cool-down
	res, err = g.Allow(ctx, "k", 30)
	require.NoError(t, err)
	assert.Equal(t, Result{Limit: 100, RetryAfter: 7 * time.Second, ResetAfter: 7 * time.Second}, res)

	res, err = g.Allow(ctx, "k", 20)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the fallback takes what it can")
	assert.Equal(t, 100, res.Limit, "answers carry the backend's limit")
	assert.Equal(t, 5, res.Remaining)

	res, err = g.Allow(ctx, "k", 101)
	require.ErrorIs(t, err, ErrCostExceedsLimit, "beyond the backend's limit it can never succeed")
	assert.Equal(t, Result{Limit: 100}, res)
	_, err = g.Allow(ctx, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
}

// policyStub is a stubBackend that tells its Decision, as a Decider of
// another package would: its one policy, named "default".
type policyStub struct {
	stubBackend
	policy Policy
}

func (p *policyStub) Policies(context.Context, string) ([]NamedPolicy, error) {
	return []NamedPolicy{{Name: "default", Policy: p.policy}}, nil
}

func (p *policyStub) Decide(ctx context.Context, key string, n int) (Decision, error) {
	res, err := p.Allow(ctx, key, n)
	policies, _ := p.Policies(ctx, key)
	return Decision{Result: res, Policy: policies[0], Policies: policies, Enforced: res}, err
}

func TestGuardAnswersCarryTheBackendsPolicyWhenItIsDownFromTheStart(t *testing.T) {
	for _, tc := range []struct {
		policy FailurePolicy
		want   Result
	}{
		{FailOpen, Result{Allowed: true, Limit: 10}},
		{FailClosed, Result{Limit: 10, RetryAfter: time.Second, ResetAfter: time.Second}},
	} {
		down := &policyStub{stubBackend: stubBackend{err: errDown}, policy: Policy{Limit: 10, Window: 5 * time.Second}}
		g, err := NewGuard(down, GuardConfig{OnFailure: tc.policy})
		require.NoError(t, err)
		policies, err := g.Policies(context.Background(), "k")
		require.NoError(t, err)
		assert.Equal(t, []NamedPolicy{{Name: "default", Policy: down.policy}}, policies)
		res, err := g.Allow(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.Equal(t, tc.want, res, "policy %d: never a limit of 0", tc.policy)
	}
}

func TestGuardRefusesANilContext(t *testing.T) {
	backend := &stubBackend{res: Result{Allowed: true, Limit: 1}}
	g, err := NewGuard(backend, GuardConfig{Timeout: time.Second, BreakerFailures: 1, BreakerCoolDown: time.Second})
	require.NoError(t, err)
	var nilCtx context.Context
	_, err = g.Allow(nilCtx, "k", 1)
	require.ErrorContains(t, err, "nil context")
	assert.Zero(t, backend.calls.Load(), "the backend is not asked")
	assert.Equal(t, BreakerClosed, g.BreakerState())

	var nilGuard *Guard
	_, err = nilGuard.Allow(context.Background(), "k", 1)
	require.Error(t, err)
	_, err = (&Guard{}).Allow(context.Background(), "k", 1)
	require.Error(t, err)
}

func TestGuardAllowsPeeksWhileTheBackendFails(t *testing.T) {
	backend := &stubBackend{err: errDown}
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailClosed})
	require.NoError(t, err)
	res, err := g.Allow(context.Background(), "k", 0)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "a peek is always allowed")
}
