package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// heldBackend answers calls on key "held" only when the test lets them go,
// each with the answer the test gives it, and every other call at once with
// its current answer.
type heldBackend struct {
	mu      sync.Mutex
	res     Result
	err     error
	started chan struct{}   // receives when a held call reaches the backend
	answers chan heldAnswer // the answer of the next held call to return
	calls   map[string]int  // calls per key
}

type heldAnswer struct {
	res Result
	err error
}

func newHeldBackend() *heldBackend {
	return &heldBackend{started: make(chan struct{}), answers: make(chan heldAnswer), calls: map[string]int{}}
}

func (b *heldBackend) set(res Result, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.res, b.err = res, err
}

func (b *heldBackend) count(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[key]
}

func (b *heldBackend) Allow(ctx context.Context, key string, _ int) (Result, error) {
	b.mu.Lock()
	b.calls[key]++
	res, err := b.res, b.err
	b.mu.Unlock()
	if key != "held" {
		return res, err
	}
	b.started <- struct{}{}
	a := <-b.answers
	return a.res, a.err
}

// held starts a call on key "held" through g and returns once it has
// reached the backend; the returned channel gives its Decision when the
// test lets it go with b.answers.
func (b *heldBackend) held(t *testing.T, g *Guard) <-chan Decision {
	t.Helper()
	out := make(chan Decision, 1)
	go func() {
		d, err := g.Decide(context.Background(), "held", 1)
		assert.NoError(t, err)
		out <- d
	}()
	select {
	case <-b.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the held call never reached the backend")
	}
	return out
}

// TestBreakerClosesOnlyOnAProbeAfterTheCoolDown interleaves calls on a fake
// clock: a call that started while the breaker was closed and returns after
// it opened, with a success or a failure, changes nothing; a success that
// returns while a probe is out does not close it either; only the probe's
// own answer, sent once the cool-down has passed, closes or reopens it.
func TestBreakerClosesOnlyOnAProbeAfterTheCoolDown(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend := newHeldBackend()
	hooks := &recordingHooks{}
	g, err := NewGuard(backend, GuardConfig{
		OnFailure: FailClosed, BreakerFailures: 3, BreakerCoolDown: 5 * time.Second,
		Hooks: hooks, Clock: clock,
	})
	require.NoError(t, err)
	ctx := context.Background()
	ok := Result{Allowed: true, Limit: 5, Remaining: 4}

	// A call starts while the breaker is closed and stays out.
	early := backend.held(t, g)
	// Three failures open the breaker.
	backend.set(Result{}, errDown)
	for range 3 {
		d, err := g.Decide(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, FromFailClosed, d.Source)
	}
	require.Equal(t, BreakerOpen, g.BreakerState())

	// 200 ms later the early call comes back with a success: the breaker
	// stays open, with the rest of its cool-down.
	clock.Advance(200 * time.Millisecond)
	backend.answers <- heldAnswer{res: ok}
	assert.Equal(t, FromBackend, (<-early).Source, "the early call's own answer is the backend's")
	assert.Equal(t, BreakerOpen, g.BreakerState(), "a call sent before the breaker opened does not close it")
	backend.set(ok, nil)
	d, err := g.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFailClosed, d.Source)
	assert.Equal(t, 4800*time.Millisecond, d.RetryAfter, "the cool-down runs on from the opening")
	assert.Zero(t, backend.count("k")-3, "no call reached the backend while open")

	// Once the cool-down has passed, one probe goes out; it fails.
	clock.Advance(4800 * time.Millisecond)
	backend.set(Result{}, errDown)
	probe := backend.held(t, g) // the probe, sent after the cool-down
	assert.Equal(t, BreakerHalfOpen, g.BreakerState())
	d, err = g.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFailClosed, d.Source, "one probe at a time")
	backend.answers <- heldAnswer{err: errDown}
	assert.Equal(t, FromFailClosed, (<-probe).Source)
	assert.Equal(t, BreakerOpen, g.BreakerState(), "a failed probe reopens it")

	// After the next cool-down, a probe that succeeds closes it.
	clock.Advance(5 * time.Second)
	probe = backend.held(t, g)
	backend.answers <- heldAnswer{res: ok}
	assert.Equal(t, FromBackend, (<-probe).Source)
	assert.Equal(t, BreakerClosed, g.BreakerState())

	assert.Equal(t, [][2]BreakerState{
		{BreakerClosed, BreakerOpen},
		{BreakerOpen, BreakerHalfOpen}, {BreakerHalfOpen, BreakerOpen},
		{BreakerOpen, BreakerHalfOpen}, {BreakerHalfOpen, BreakerClosed},
	}, hooks.changes, "one cycle of open, probes and close; no change by a call sent before the opening")
}

// TestBreakerIgnoresALateAnswerWhileItsProbeIsOut: a call sent while the
// breaker was closed returns, with a success, while the probe is out: the
// breaker stays half-open, and the probe's failure reopens it.
func TestBreakerIgnoresALateAnswerWhileItsProbeIsOut(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend := newHeldBackend()
	hooks := &recordingHooks{}
	g, err := NewGuard(backend, GuardConfig{
		BreakerFailures: 1, BreakerCoolDown: time.Second, Hooks: hooks, Clock: clock,
	})
	require.NoError(t, err)
	ctx := context.Background()
	ok := Result{Allowed: true, Limit: 5, Remaining: 4}

	early := backend.held(t, g)
	backend.set(Result{}, errDown)
	_, err = g.Decide(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, BreakerOpen, g.BreakerState())
	clock.Advance(time.Second)
	probe := backend.held(t, g)
	require.Equal(t, BreakerHalfOpen, g.BreakerState())

	// The early call's success, while the probe is out.
	backend.answers <- heldAnswer{res: ok}
	<-early
	assert.Equal(t, BreakerHalfOpen, g.BreakerState(), "only the probe decides")
	backend.answers <- heldAnswer{err: errDown}
	<-probe
	assert.Equal(t, BreakerOpen, g.BreakerState())
	assert.Equal(t, [][2]BreakerState{
		{BreakerClosed, BreakerOpen}, {BreakerOpen, BreakerHalfOpen}, {BreakerHalfOpen, BreakerOpen},
	}, hooks.changes)
}
