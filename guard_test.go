package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stubBackend answers every call with res and err, and counts the calls.
// With block set, a call waits for its context to end and returns its error.
type stubBackend struct {
	mu    sync.Mutex
	res   Result
	err   error
	block bool
	calls atomic.Int64
}

func (s *stubBackend) set(res Result, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res, s.err = res, err
}

func (s *stubBackend) Allow(ctx context.Context, _ string, _ int) (Result, error) {
	s.calls.Add(1)
	s.mu.Lock()
	res, err, block := s.res, s.err, s.block
	s.mu.Unlock()
	if block {
		<-ctx.Done()
		return Result{}, ctx.Err()
	}
	return res, err
}

// recordingHooks keeps what it is told.
type recordingHooks struct {
	mu        sync.Mutex
	decisions []Decision
	changes   [][2]BreakerState
}

func (h *recordingHooks) Decided(d Decision) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.decisions = append(h.decisions, d)
}

func (h *recordingHooks) BreakerChanged(from, to BreakerState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, [2]BreakerState{from, to})
}

func (h *recordingHooks) last() Decision {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.decisions[len(h.decisions)-1]
}

var errDown = errors.New("connection refused")

func TestGuardFailurePolicies(t *testing.T) {
	ok := Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: time.Second}
	fallback, err := NewTokenBucket(1, 1, WithClock(NewFakeClock(epoch)))
	require.NoError(t, err)
	cases := []struct {
		name   string
		cfg    GuardConfig
		want   Result
		source Source
	}{
		{"fail open", GuardConfig{}, Result{Allowed: true, Limit: 10}, FromFailOpen},
		{"fail closed", GuardConfig{OnFailure: FailClosed}, Result{Limit: 10, RetryAfter: time.Second}, FromFailClosed},
		{"fail closed with a retry", GuardConfig{OnFailure: FailClosed, FailClosedRetryAfter: 3 * time.Second}, Result{Limit: 10, RetryAfter: 3 * time.Second}, FromFailClosed},
		{"fail over", GuardConfig{OnFailure: FailOver, Fallback: fallback}, Result{Allowed: true, Limit: 1, ResetAfter: time.Second}, FromFallback},
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
			assert.Equal(t, "k", d.Key)
			assert.Equal(t, 1, d.Cost)
		})
	}
}

func TestGuardPassesCallerMistakesThrough(t *testing.T) {
	backend, err := NewTokenBucket(3, 1, WithClock(NewFakeClock(epoch)))
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
	clock := NewFakeClock(epoch)
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
		assert.Equal(t, Result{RetryAfter: 6 * time.Second}, res)
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
	clock := NewFakeClock(epoch)
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
	fallback, err := NewTokenBucket(1, 1)
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
