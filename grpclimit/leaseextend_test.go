package grpclimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fakeTimers stands for time.AfterFunc in an Interceptor: the test fires
// each timer when it chooses, on the limiter's fake clock.
type fakeTimers struct {
	mu     sync.Mutex
	timers []*fakeTimer
}

// fakeTimer is one timer of fakeTimers.
type fakeTimer struct {
	mu      sync.Mutex
	f       func()
	d       time.Duration // as last set
	armed   bool
	stopped bool
}

func (ft *fakeTimers) after(d time.Duration, f func()) leaseTimer {
	t := &fakeTimer{f: f, d: d, armed: true}
	ft.mu.Lock()
	ft.timers = append(ft.timers, t)
	ft.mu.Unlock()
	return t
}

// last returns the timer started last; there must be n in all.
func (ft *fakeTimers) last(t *testing.T, n int) *fakeTimer {
	t.Helper()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	require.Len(t, ft.timers, n)
	return ft.timers[n-1]
}

func (t *fakeTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.armed
	t.armed, t.stopped = false, true
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.armed
	t.armed, t.d = true, d
	return was
}

// state returns whether the timer is set and for when, and whether it was
// stopped.
func (t *fakeTimer) state() (armed bool, d time.Duration, stopped bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.armed, t.d, t.stopped
}

// fire runs the timer's function as its expiry would, if it is set.
func (t *fakeTimer) fire() {
	t.mu.Lock()
	if !t.armed {
		t.mu.Unlock()
		return
	}
	t.armed = false
	f := t.f
	t.mu.Unlock()
	f()
}

// hookCall is one call of a WithOnError hook.
type hookCall struct {
	method string
	err    error
}

// leaseRig is an Interceptor built WithLeases over a Concurrency of 1 in
// flight with leases of 30 s on a fake clock, whose timers the test fires.
type leaseRig struct {
	clock  *ratelimit.FakeClock
	timers *fakeTimers
	in     *Interceptor
	mu     sync.Mutex
	hooked []hookCall
}

func newLeaseRig(t *testing.T) *leaseRig {
	t.Helper()
	rig := &leaseRig{clock: ratelimit.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)), timers: &fakeTimers{}}
	l, err := ratelimit.NewConcurrency(1, 30*time.Second, ratelimit.WithClock(rig.clock))
	require.NoError(t, err)
	rig.in, err = NewInterceptor(l, KeyByMetadata("x-api-key"), WithLeases(), WithOnError(func(_ context.Context, method string, err error) {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		rig.hooked = append(rig.hooked, hookCall{method, err})
	}))
	require.NoError(t, err)
	rig.in.after = rig.timers.after
	return rig
}

// hooks returns the hook's calls so far.
func (rig *leaseRig) hooks() []hookCall {
	rig.mu.Lock()
	defer rig.mu.Unlock()
	return append([]hookCall(nil), rig.hooked...)
}

// callCtx is the context of a call by alice.
var callCtx = metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "alice"))

// unary calls the unary interceptor as alice, with a handler that returns
// once release is closed (at once for nil), and returns the call's error.
func (rig *leaseRig) unary(entered chan<- context.Context, release <-chan struct{}) error {
	_, err := rig.in.Unary()(callCtx, nil, &grpc.UnaryServerInfo{FullMethod: "/test.Slow/Run"}, func(ctx context.Context, _ any) (any, error) {
		if entered != nil {
			entered <- ctx
		}
		if release != nil {
			<-release
		}
		return nil, nil
	})
	return err
}

// A unary call that runs longer than the lease's TTL keeps its slot: the
// lease is extended every third of the TTL, and the timer is stopped when
// the handler returns.
func TestUnaryLeaseExtendedWhileTheHandlerRuns(t *testing.T) {
	rig := newLeaseRig(t)
	entered, release, done := make(chan context.Context, 1), make(chan struct{}), make(chan error, 1)
	go func() { done <- rig.unary(entered, release) }()
	<-entered
	timer := rig.timers.last(t, 1)
	armed, d, _ := timer.state()
	require.True(t, armed)
	assert.Equal(t, 10*time.Second, d)
	for range 5 { // 50 s in all, well past the first lease's 30 s
		rig.clock.Advance(10 * time.Second)
		timer.fire()
		armed, d, _ = timer.state()
		require.True(t, armed)
		assert.Equal(t, 10*time.Second, d)
		err := rig.unary(nil, nil)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the slot is still held")
	}
	close(release)
	require.NoError(t, <-done)
	armed, _, stopped := timer.state()
	assert.False(t, armed)
	assert.True(t, stopped)
	timer.fire() // a timer that fires as it is stopped does nothing
	require.NoError(t, rig.unary(nil, nil), "the slot is free")
	assert.Empty(t, rig.hooks())
}

// An extension that comes too late fails with ErrLeaseExpired: the error
// goes to the hook with the call's method, the handler goes on
// uncancelled, and the lease is not extended again.
func TestLateExtensionReportsTheLostLeaseAndCancelsNothing(t *testing.T) {
	rig := newLeaseRig(t)
	entered, release, done := make(chan context.Context, 1), make(chan struct{}), make(chan error, 1)
	go func() { done <- rig.unary(entered, release) }()
	ctx := <-entered
	timer := rig.timers.last(t, 1)

	rig.clock.Advance(31 * time.Second)
	timer.fire()
	hooked := rig.hooks()
	require.Len(t, hooked, 1)
	assert.Equal(t, "/test.Slow/Run", hooked[0].method)
	assert.ErrorIs(t, hooked[0].err, ErrLease)
	assert.ErrorIs(t, hooked[0].err, ratelimit.ErrLeaseExpired)
	armed, _, _ := timer.state()
	assert.False(t, armed, "not extended again")
	require.NoError(t, ctx.Err(), "the call is not cancelled")

	close(release)
	require.NoError(t, <-done)
	assert.Len(t, rig.hooks(), 1, "releasing an expired lease is no error")
}

// fakeStream is a server stream of alice whose handler the test runs.
type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *fakeStream) Context() context.Context     { return s.ctx }
func (s *fakeStream) SetHeader(metadata.MD) error  { return nil }
func (s *fakeStream) SendHeader(metadata.MD) error { return nil }
func (s *fakeStream) SetTrailer(metadata.MD)       {}
func (s *fakeStream) SendMsg(any) error            { return nil }
func (s *fakeStream) RecvMsg(any) error            { return nil }

// A stream's lease is extended for as long as the stream is open, and its
// timer is stopped when the stream ends.
func TestStreamLeaseExtendedWhileTheStreamIsOpen(t *testing.T) {
	rig := newLeaseRig(t)
	entered, release, done := make(chan context.Context, 1), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- rig.in.Stream()(nil, &fakeStream{ctx: callCtx}, &grpc.StreamServerInfo{FullMethod: "/test.Slow/Watch"}, func(_ any, ss grpc.ServerStream) error {
			entered <- ss.Context()
			<-release
			return nil
		})
	}()
	ctx := <-entered
	lease, ok := LeaseOf(ctx)
	require.True(t, ok)
	assert.Equal(t, 30*time.Second, lease.TTL())
	timer := rig.timers.last(t, 1)
	for range 4 {
		rig.clock.Advance(10 * time.Second)
		timer.fire()
	}
	assert.Equal(t, codes.ResourceExhausted, status.Code(rig.unary(nil, nil)), "the slot is still held at 40 s")
	close(release)
	require.NoError(t, <-done)
	_, _, stopped := timer.state()
	assert.True(t, stopped)
	require.NoError(t, rig.unary(nil, nil), "the slot is free")
	assert.Empty(t, rig.hooks())
}
