package grpclimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold/leaseholdtest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// hookCall is one call of a WithOnError hook.
type hookCall struct {
	method string
	err    error
}

// leaseRig is an Interceptor built WithLeases over a Concurrency of 1 in
// flight with leases of 30 s on a fake clock, whose timers the test fires.
type leaseRig struct {
	clock  *ratelimittest.Clock
	timers *leaseholdtest.Timers
	in     *Interceptor
	mu     sync.Mutex
	hooked []hookCall
}

func newLeaseRig(t *testing.T) *leaseRig {
	t.Helper()
	rig := &leaseRig{clock: ratelimittest.NewClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)), timers: &leaseholdtest.Timers{}}
	l, err := ratelimit.NewConcurrency(1, 30*time.Second, ratelimit.WithClock(rig.clock))
	require.NoError(t, err)
	rig.in, err = NewInterceptor(l, KeyByMetadata("x-api-key"), WithLeases(), WithOnError(func(_ context.Context, method string, err error) {
		rig.mu.Lock()
		defer rig.mu.Unlock()
		rig.hooked = append(rig.hooked, hookCall{method, err})
	}))
	require.NoError(t, err)
	rig.in.after = rig.timers.After
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
// interceptor's timer extends the lease (every third of its TTL, as
// package leasehold's tests check), and is stopped when the handler
// returns.
func TestUnaryLeaseExtendedWhileTheHandlerRuns(t *testing.T) {
	rig := newLeaseRig(t)
	entered, release, done := make(chan context.Context, 1), make(chan struct{}), make(chan error, 1)
	go func() { done <- rig.unary(entered, release) }()
	<-entered
	timer := rig.timers.Last(t, 1)
	for range 5 { // 50 s in all, well past the first lease's 30 s
		rig.clock.Advance(10 * time.Second)
		timer.Fire()
		err := rig.unary(nil, nil)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the slot is still held")
	}
	close(release)
	require.NoError(t, <-done)
	armed, _, stopped := timer.State()
	assert.False(t, armed)
	assert.True(t, stopped)
	timer.Reset(10 * time.Second) // as a firing that raced Stop
	timer.Fire()                  // extends nothing: the lease was released
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
	timer := rig.timers.Last(t, 1)

	rig.clock.Advance(31 * time.Second)
	timer.Fire()
	hooked := rig.hooks()
	require.Len(t, hooked, 1)
	assert.Equal(t, "/test.Slow/Run", hooked[0].method)
	assert.ErrorIs(t, hooked[0].err, ErrLease)
	assert.ErrorIs(t, hooked[0].err, ratelimit.ErrLeaseExpired)
	armed, _, _ := timer.State()
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
	timer := rig.timers.Last(t, 1)
	for range 4 {
		rig.clock.Advance(10 * time.Second)
		timer.Fire()
	}
	assert.Equal(t, codes.ResourceExhausted, status.Code(rig.unary(nil, nil)), "the slot is still held at 40 s")
	close(release)
	require.NoError(t, <-done)
	_, _, stopped := timer.State()
	assert.True(t, stopped)
	require.NoError(t, rig.unary(nil, nil), "the slot is free")
	assert.Empty(t, rig.hooks())
}
