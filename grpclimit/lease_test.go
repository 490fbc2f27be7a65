package grpclimit_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold/leaseholdtest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// slowHealth is a health service whose Check holds each call until release
// is closed, counting the calls inside it, and whose Watch sends one
// message per receive on step until steps have been sent, or until its
// call ends when steps is 0. Either panics when its request names the
// service "panic".
type slowHealth struct {
	healthpb.UnimplementedHealthServer
	inside, most atomic.Int64
	entered      chan context.Context // one send per call that got in
	release      chan struct{}
	step         chan struct{}
	steps        int
}

func newSlowHealth() *slowHealth {
	return &slowHealth{entered: make(chan context.Context, 64), release: make(chan struct{}), step: make(chan struct{})}
}

func (s *slowHealth) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if req.GetService() == "panic" {
		panic("boom")
	}
	n := s.inside.Add(1)
	defer s.inside.Add(-1)
	for {
		most := s.most.Load()
		if n <= most || s.most.CompareAndSwap(most, n) {
			break
		}
	}
	s.entered <- ctx
	<-s.release
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (s *slowHealth) Watch(req *healthpb.HealthCheckRequest, ss grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	s.entered <- ss.Context()
	if s.steps == 0 {
		<-ss.Context().Done()
		return ss.Context().Err()
	}
	for range s.steps {
		if err := ss.Send(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
			return err
		}
		<-s.step
	}
	return nil
}

// recoverer answers a unary call whose handler panicked codes.Internal, as
// a recovery interceptor outside grpclimit's would.
func recoverer(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = status.Errorf(codes.Internal, "panic: %v", v)
		}
	}()
	return handler(ctx, req)
}

// serveBuf serves srv behind in (after recoverer) over an in-memory
// connection and returns a client of it; both are closed when the test
// ends.
func serveBuf(t *testing.T, srv healthpb.HealthServer, in *grpclimit.Interceptor) healthpb.HealthClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverer, in.Unary()), grpc.StreamInterceptor(in.Stream()))
	healthpb.RegisterHealthServer(s, srv)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		s.Stop()
		<-done
	})
	return healthpb.NewHealthClient(conn)
}

// concurrency returns an in-process concurrency limiter of limit in flight
// per key, whose leases last ttl, on a new fake clock.
func concurrency(t *testing.T, limit int, ttl time.Duration, opts ...ratelimit.Option) (*ratelimit.Concurrency, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.NewClock(epoch)
	l, err := ratelimit.NewConcurrency(limit, ttl, append([]ratelimit.Option{ratelimit.WithClock(clock)}, opts...)...)
	require.NoError(t, err)
	return l, clock
}

// leasedInterceptor returns an Interceptor built WithLeases (and opts)
// over l, keyed by x-api-key.
func leasedInterceptor(t *testing.T, l ratelimit.Limiter, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	in, err := grpclimit.NewInterceptor(l, grpclimit.KeyByMetadata("x-api-key"), append([]grpclimit.Option{grpclimit.WithLeases()}, opts...)...)
	require.NoError(t, err)
	return in
}

// checkAs makes one Check call as key, for service, and returns its
// response header and error.
func checkAs(c healthpb.HealthClient, key, service string) (metadata.MD, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	var hdr metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: service}, grpc.Header(&hdr))
	return hdr, err
}

// free returns the units l has free for key.
func free(t *testing.T, l *ratelimit.Concurrency, key string) int {
	t.Helper()
	d, err := l.Decide(context.Background(), key, 0)
	require.NoError(t, err)
	return d.Remaining
}

// Thirty-two calls at once on a limit of 5 in flight: five get in and
// stay in, the other 27 are answered ResourceExhausted at once with the
// fields of the policy in flight; once the five are done, their slots
// are back.
func TestUnaryLeasesLetNoMoreThanTheLimitInFlight(t *testing.T) {
	l, _ := concurrency(t, 5, time.Minute)
	srv := newSlowHealth()
	c := serveBuf(t, srv, leasedInterceptor(t, l))

	type answer struct {
		hdr metadata.MD
		err error
	}
	answers := make(chan answer, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			hdr, err := checkAs(c, "alice", "")
			answers <- answer{hdr, err}
		})
	}
	for range 5 {
		<-srv.entered
	}
	for range 27 {
		a := <-answers
		require.Equal(t, codes.ResourceExhausted, status.Code(a.err), "%v", a.err)
		assert.Equal(t, map[string][]string{
			"ratelimit-limit": {"5"}, "ratelimit-remaining": {"0"}, "ratelimit-reset": {"60"},
			"ratelimit-policy": {`"default";q=5;qu="concurrent-requests"`}, "ratelimit": {`"default";r=0;t=60`},
			"retry-after": {"60"},
		}, rateFields(a.hdr))
		ri, qf := details(t, a.err)
		require.NotNil(t, ri)
		assert.Equal(t, time.Minute, ri.GetRetryDelay().AsDuration())
		require.NotNil(t, qf)
		assert.Contains(t, qf.GetViolations()[0].GetDescription(), `"default";q=5;qu="concurrent-requests"`)
	}
	assert.Equal(t, int64(5), srv.inside.Load())
	close(srv.release)
	wg.Wait()
	close(answers)
	for a := range answers {
		require.NoError(t, a.err)
		assert.Equal(t, []string{`"default";q=5;qu="concurrent-requests"`}, a.hdr["ratelimit-policy"])
	}
	assert.Equal(t, int64(5), srv.most.Load())
	assert.Equal(t, 5, free(t, l, "alice"))
}

// A call gives its slot back when its handler returns, and when it
// panics: with a limit of 1, every call in turn gets the one slot.
func TestUnaryLeaseReleasedOnReturnAndOnPanic(t *testing.T) {
	l, _ := concurrency(t, 1, time.Minute)
	srv := newSlowHealth()
	close(srv.release)
	c := serveBuf(t, srv, leasedInterceptor(t, l))
	for i := range 3 {
		hdr, err := checkAs(c, "alice", "")
		require.NoError(t, err, "call %d", i)
		assert.Equal(t, []string{`"default";r=0`}, hdr["ratelimit"])
		<-srv.entered
		_, err = checkAs(c, "alice", "panic")
		require.Equal(t, codes.Internal, status.Code(err), "%v", err)
		assert.Contains(t, status.Convert(err).Message(), "boom")
		assert.Equal(t, 1, free(t, l, "alice"), "after the panic of call %d", i)
	}
}

// A stream holds its slot for its whole life: while it is open, another
// call of the key is denied; once it has ended, the slot is free.
func TestStreamHoldsItsLeaseForItsLife(t *testing.T) {
	l, _ := concurrency(t, 1, time.Minute)
	srv := newSlowHealth()
	srv.steps = 3
	close(srv.release)
	c := serveBuf(t, srv, leasedInterceptor(t, l))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", "alice")
	s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	for i := range 3 {
		_, err := s.Recv()
		require.NoError(t, err, "message %d", i)
		if i == 0 {
			hdr, err := s.Header()
			require.NoError(t, err)
			assert.Equal(t, []string{`"default";q=1;qu="concurrent-requests"`}, hdr["ratelimit-policy"])
			assert.Equal(t, []string{`"default";r=0`}, hdr["ratelimit"])
		}
		_, err = checkAs(c, "alice", "")
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "while the stream is open, after message %d: %v", i, err)
		srv.step <- struct{}{}
	}
	_, err = s.Recv()
	require.ErrorIs(t, err, io.EOF)
	assert.Equal(t, 1, free(t, l, "alice"))
	_, err = checkAs(c, "alice", "")
	require.NoError(t, err)
}

// A stream the client cancels ends, and gives its slot back.
func TestCancelledStreamGivesItsSlotBack(t *testing.T) {
	l, _ := concurrency(t, 1, time.Minute)
	srv := newSlowHealth()
	c := serveBuf(t, srv, leasedInterceptor(t, l))

	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.Watch(metadata.AppendToOutgoingContext(ctx, "x-api-key", "alice"), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	<-srv.entered
	assert.Equal(t, 0, free(t, l, "alice"))
	cancel()
	_, err = s.Recv()
	require.Equal(t, codes.Canceled, status.Code(err))
	require.Eventually(t, func() bool { return free(t, l, "alice") == 1 }, 5*time.Second, time.Millisecond)
}

// The handler finds its lease with LeaseOf, in a unary call's context and
// in a stream's.
func TestHandlersFindTheirLease(t *testing.T) {
	l, _ := concurrency(t, 5, time.Minute)
	srv := newSlowHealth()
	srv.steps = 1
	close(srv.release)
	c := serveBuf(t, srv, leasedInterceptor(t, l))

	_, err := checkAs(c, "alice", "")
	require.NoError(t, err)
	lease, ok := grpclimit.LeaseOf(<-srv.entered)
	require.True(t, ok)
	assert.True(t, lease.Held())
	assert.Equal(t, "alice", lease.Key())
	assert.Equal(t, 1, lease.Units())

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Watch(metadata.AppendToOutgoingContext(ctx, "x-api-key", "bob"), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = s.Recv()
	require.NoError(t, err)
	lease, ok = grpclimit.LeaseOf(<-srv.entered)
	require.True(t, ok)
	assert.Equal(t, "bob", lease.Key())
	srv.step <- struct{}{}
	_, err = s.Recv()
	require.ErrorIs(t, err, io.EOF)

	_, ok = grpclimit.LeaseOf(context.Background())
	assert.False(t, ok)
}

// Without WithLeases, a limiter of calls in flight is refused; with it,
// Limit, which cannot hold a lease, answers codes.Internal.
func TestInFlightLimiterNeedsWithLeases(t *testing.T) {
	l, _ := concurrency(t, 5, time.Minute)
	_, err := grpclimit.NewInterceptor(l, grpclimit.KeyByMetadata("x-api-key"))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithLeases")

	in := leasedInterceptor(t, l)
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "alice"))
	err = in.Limit(ctx)
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Equal(t, 5, free(t, l, "alice"), "Limit took nothing of the call's key")
}

// With a rate limiter, whose leases hold nothing, WithLeases changes
// nothing: the same answers and metadata, and no lease for the handler.
func TestWithLeasesOverARateLimiterChangesNothing(t *testing.T) {
	plain, _ := bucket(t)
	withLeases, _ := bucket(t)
	a, err := grpclimit.NewInterceptor(plain, grpclimit.KeyByMetadata("x-api-key"))
	require.NoError(t, err)
	srvA, srvB := newSlowHealth(), newSlowHealth()
	close(srvA.release)
	close(srvB.release)
	ca, cb := serveBuf(t, srvA, a), serveBuf(t, srvB, leasedInterceptor(t, withLeases))
	for i := range 5 {
		hdrA, errA := checkAs(ca, "alice", "")
		hdrB, errB := checkAs(cb, "alice", "")
		assert.Equal(t, rateFields(hdrA), rateFields(hdrB), "call %d", i)
		assert.Equal(t, status.Code(errA), status.Code(errB), "call %d", i)
		assert.Equal(t, status.Convert(errA).Message(), status.Convert(errB).Message(), "call %d", i)
		if errB == nil {
			_, ok := grpclimit.LeaseOf(<-srvB.entered)
			assert.False(t, ok)
		}
	}
	carol := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "carol"))
	require.NoError(t, leasedInterceptor(t, withLeases).Limit(carol), "Limit decides as before")
}

// On the system's timers, a running call's lease is extended: with a TTL
// of 150 ms, two extensions come about 50 ms apart, then the release.
func TestLeaseExtendedOnRealTimers(t *testing.T) {
	events := make(leaseholdtest.AdjustEvents, 16)
	l, err := ratelimit.NewConcurrency(1, 150*time.Millisecond, ratelimit.WithHooks(events))
	require.NoError(t, err)
	var hookErrs atomic.Int64
	in := leasedInterceptor(t, l, grpclimit.WithOnError(func(context.Context, string, error) { hookErrs.Add(1) }))
	srv := newSlowHealth()
	c := serveBuf(t, srv, in)
	done := make(chan error, 1)
	go func() {
		_, err := checkAs(c, "alice", "")
		done <- err
	}()
	<-srv.entered
	require.True(t, events.AssertExtended(t, 2))
	close(srv.release)
	require.NoError(t, <-done)
	e, ok := events.NextRelease(t)
	require.True(t, ok)
	assert.True(t, e.Result.Allowed, "the lease was still held when released")
	assert.Zero(t, hookErrs.Load())
}

// In a list of policies, the one in flight names its quota unit and the
// rate one keeps its window.
func TestPolicyListNamesTheQuotaUnitOfThePolicyInFlight(t *testing.T) {
	policies := []ratelimit.NamedPolicy{
		{Name: "running", Policy: ratelimit.Policy{Limit: 5, Window: time.Minute}, InFlight: true},
		{Name: "per-minute", Policy: ratelimit.Policy{Limit: 100, Window: time.Minute}},
	}
	res := ratelimit.Result{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: time.Second}
	stub := &decisionStub{d: ratelimit.Decision{Result: res, Policy: policies[1], Policies: policies, PolicyIndex: 1, Enforced: res}}
	_, err := grpclimit.NewInterceptor(stub, grpclimit.KeyByMetadata("x-api-key"))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

	srv := newSlowHealth()
	close(srv.release)
	c := serveBuf(t, srv, leasedInterceptor(t, stub))
	hdr, err := checkAs(c, "alice", "")
	require.NoError(t, err)
	assert.Equal(t, []string{`"running";q=5;qu="concurrent-requests", "per-minute";q=100;w=60`}, hdr["ratelimit-policy"])
	assert.Equal(t, []string{`"per-minute";r=99`}, hdr["ratelimit"])
}
