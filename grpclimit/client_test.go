package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/outbound"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// upstreamServer starts a gRPC server with the health service, limited by
// limiter under one key for every caller through grpclimit's own server
// interceptors, on a loopback listener. It returns its address and the
// number of calls and streams that reached it, counted before the
// limiter. The server is stopped when the test ends.
func upstreamServer(t *testing.T, limiter ratelimit.Limiter) (string, *atomic.Int64) {
	t.Helper()
	in, err := grpclimit.NewInterceptor(limiter, func(context.Context, string) (string, error) { return "everyone", nil })
	require.NoError(t, err)
	var calls atomic.Int64
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			calls.Add(1)
			return h(ctx, req)
		}, in.Unary()),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
			calls.Add(1)
			return h(srv, ss)
		}, in.Stream()),
	)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return lis.Addr().String(), &calls
}

// dialThrough returns a client of the health service at target whose calls
// go through up by the client interceptors. It is closed when the test
// ends.
func dialThrough(t *testing.T, target string, up *outbound.Upstream, opts ...grpclimit.ClientOption) healthpb.HealthClient {
	t.Helper()
	conn, err := grpc.NewClient(target,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(up, opts...)),
		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(up, opts...)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// learning returns a token bucket of burst tokens refilled at perSecond,
// built to apply the limits an Upstream learns.
func learning(t *testing.T, perSecond, burst int) *ratelimit.TokenBucket {
	t.Helper()
	b, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(perSecond), burst, ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
	require.NoError(t, err)
	return b
}

// events records the Events of an Upstream.
type events struct {
	mu   sync.Mutex
	list []outbound.Event
}

func (e *events) observe(ev outbound.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

// of returns the recorded events of kind k.
func (e *events) of(k outbound.EventKind) []outbound.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []outbound.Event
	for _, ev := range e.list {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// callCtx returns a context for one call, ended when the test ends.
func callCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestClientWaitsForItsLimiterBeforeEachCall(t *testing.T) {
	target, calls := upstreamServer(t, learning(t, 1_000_000, 1000))
	var ev events
	// Two at once, then one every 50 ms: four calls take 100 ms at least,
	// and unless a call takes 50 ms, some wait.
	up, err := outbound.New(learning(t, 20, 2), outbound.Config{NoJitter: true, Observer: ev.observe})
	require.NoError(t, err)
	c := dialThrough(t, target, up)

	start := time.Now()
	for i := range 4 {
		_, err := c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
		require.NoError(t, err, "call %d", i)
	}
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	assert.NotEmpty(t, ev.of(outbound.Waited))
	assert.Empty(t, ev.of(outbound.Refused))
	assert.Equal(t, int64(4), calls.Load())
}

func TestClientResourceExhaustedPausesThePartitionForEveryUpstreamOfTheStore(t *testing.T) {
	oncePerMinute, err := ratelimit.NewGCRA(1, time.Minute)
	require.NoError(t, err)
	target, calls := upstreamServer(t, oncePerMinute)
	store := outbound.NewMemoryStore(nil)
	var ev events
	// Retry-After alone: the server's ratelimit field (r=0 after the first
	// call) would pause the partition before the server refuses any.
	retryAfterOnly := []outbound.Parser{outbound.RetryAfter}
	up, err := outbound.New(learning(t, 1_000_000, 1000), outbound.Config{Store: store, Observer: ev.observe, Parsers: retryAfterOnly})
	require.NoError(t, err)
	c := dialThrough(t, target, up)

	_, err = c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.NotErrorIs(t, err, outbound.ErrLimited, "the server's refusal, not the client's")
	limited := ev.of(outbound.UpstreamLimited)
	require.Len(t, limited, 1)
	assert.Equal(t, http.StatusTooManyRequests, limited[0].Status)

	// The partition is the ClientConn's target, paused in the store.
	st, err := store.Load(context.Background(), target)
	require.NoError(t, err)
	// retry-after: 60, less the time since it was read.
	assert.Greater(t, st.Pause, 50*time.Second)

	// Another Upstream on the same store sees the pause.
	other, err := outbound.New(learning(t, 1_000_000, 1000), outbound.Config{Store: store, MaxWait: -1})
	require.NoError(t, err)
	_, err = other.Admit(context.Background(), target, 1)
	require.ErrorIs(t, err, outbound.ErrLimited)

	// And its interceptor refuses the call, unsent.
	_, err = dialThrough(t, target, other).Check(callCtx(t), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, outbound.ErrLimited)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, int64(2), calls.Load())
}

func TestClientLearnsTheServersPolicyAndLowersItsLimit(t *testing.T) {
	threePerSecond, err := ratelimit.NewGCRA(3, time.Second)
	require.NoError(t, err)
	target, _ := upstreamServer(t, threePerSecond)
	store := outbound.NewMemoryStore(nil)
	var ev events
	up, err := outbound.New(learning(t, 100, 100), outbound.Config{Store: store, Observer: ev.observe})
	require.NoError(t, err)
	c := dialThrough(t, target, up)

	_, err = c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	st, err := store.Load(context.Background(), target)
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Policy{Limit: 3, Window: time.Second}, st.Policy)
	learned := ev.of(outbound.Learned)
	require.Len(t, learned, 1)
	assert.Equal(t, ratelimit.Policy{Limit: 3, Window: time.Second}, learned[0].Policy)

	// The learned 3/s holds: of the next calls made at once, the fourth
	// within the second would wait, so MaxWait -1 refuses it.
	fast, err := outbound.New(learning(t, 100, 100), outbound.Config{Store: store, MaxWait: -1})
	require.NoError(t, err)
	for i := range 3 {
		_, err := fast.Admit(context.Background(), target, 1)
		require.NoError(t, err, "call %d", i)
	}
	_, err = fast.Admit(context.Background(), target, 1)
	require.ErrorIs(t, err, outbound.ErrLimited)
}

func TestClientPausesWhenTheServerSaysItsQuotaIsSpent(t *testing.T) {
	oncePerMinute, err := ratelimit.NewGCRA(1, time.Minute)
	require.NoError(t, err)
	target, calls := upstreamServer(t, oncePerMinute)
	up, err := outbound.New(learning(t, 1_000_000, 1000), outbound.Config{MaxWait: -1})
	require.NoError(t, err)
	c := dialThrough(t, target, up)

	_, err = c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	// ratelimit: "default";r=0;t=60 paused the partition: the next call
	// is not sent, and the server refuses none.
	_, err = c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, outbound.ErrLimited)
	assert.Equal(t, int64(1), calls.Load())
}

func TestClientStreamLearnsFromItsHeaderWhenTheFirstMessageArrives(t *testing.T) {
	threePerSecond, err := ratelimit.NewGCRA(3, time.Second)
	require.NoError(t, err)
	target, _ := upstreamServer(t, threePerSecond)
	store := outbound.NewMemoryStore(nil)
	up, err := outbound.New(learning(t, 100, 100), outbound.Config{Store: store})
	require.NoError(t, err)
	c := dialThrough(t, target, up)

	ctx, cancel := context.WithCancel(callCtx(t))
	defer cancel()
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.NoError(t, err)
	st, err := store.Load(context.Background(), target)
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Policy{Limit: 3, Window: time.Second}, st.Policy)
}

func TestClientStreamRefusedByTheServerPausesThePartition(t *testing.T) {
	oncePerMinute, err := ratelimit.NewGCRA(1, time.Minute)
	require.NoError(t, err)
	target, calls := upstreamServer(t, oncePerMinute)
	store := outbound.NewMemoryStore(nil)
	// Retry-After alone, as in the unary test.
	up, err := outbound.New(learning(t, 1_000_000, 1000), outbound.Config{Store: store, Parsers: []outbound.Parser{outbound.RetryAfter}})
	require.NoError(t, err)
	c := dialThrough(t, target, up)

	ctx, cancel := context.WithCancel(callCtx(t))
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.NoError(t, err)
	cancel()
	_, err = w.Recv()
	require.Equal(t, codes.Canceled, status.Code(err), "%v", err)
	st, err := store.Load(context.Background(), target)
	require.NoError(t, err)
	assert.Zero(t, st.Pause, "a stream the caller ended teaches no pause")

	w, err = c.Watch(callCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	// The header, asked for first, is observed as a 200's, whose
	// retry-after means nothing; the end reads it again with the code.
	_, _ = w.Header()
	_, err = w.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	st, err = store.Load(context.Background(), target)
	require.NoError(t, err)
	assert.Greater(t, st.Pause, 50*time.Second, "retry-after: 60")

	// The next stream is not opened.
	_, err = dialThrough(t, target, mustUpstream(t, outbound.Config{Store: store, MaxWait: -1})).Watch(callCtx(t), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, outbound.ErrLimited)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, int64(2), calls.Load())
}

// mustUpstream returns an Upstream of cfg on a generous limiter.
func mustUpstream(t *testing.T, cfg outbound.Config) *outbound.Upstream {
	t.Helper()
	up, err := outbound.New(learning(t, 1_000_000, 1000), cfg)
	require.NoError(t, err)
	return up
}

func TestClientDeadlineShorterThanTheWaitFailsAtOnceUnsent(t *testing.T) {
	target, calls := upstreamServer(t, learning(t, 1_000_000, 1000))
	oncePer30s, err := ratelimit.NewGCRA(1, 30*time.Second, ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
	require.NoError(t, err)
	up, err := outbound.New(oncePer30s, outbound.Config{})
	require.NoError(t, err)
	c := dialThrough(t, target, up)

	_, err = c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Check(ctx, &healthpb.HealthCheckRequest{})
	elapsed := time.Since(start)
	require.ErrorIs(t, err, outbound.ErrLimited)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Less(t, elapsed, time.Second, "refused at once, not after waiting")
	assert.NoError(t, ctx.Err(), "the deadline has not passed")
	assert.Equal(t, int64(1), calls.Load())
}

func TestHTTPStatusOfEachCode(t *testing.T) {
	want := map[codes.Code]int{
		codes.OK:                 200,
		codes.Canceled:           499,
		codes.Unknown:            500,
		codes.InvalidArgument:    400,
		codes.DeadlineExceeded:   504,
		codes.NotFound:           404,
		codes.AlreadyExists:      409,
		codes.PermissionDenied:   403,
		codes.ResourceExhausted:  429,
		codes.FailedPrecondition: 400,
		codes.Aborted:            409,
		codes.OutOfRange:         400,
		codes.Unimplemented:      501,
		codes.Internal:           500,
		codes.Unavailable:        503,
		codes.DataLoss:           500,
		codes.Unauthenticated:    401,
		codes.Code(17):           500,
		codes.Code(1 << 31):      500,
	}
	for c, w := range want {
		assert.Equal(t, w, grpclimit.HTTPStatus(c), "code %v", c)
	}
}

func TestClientBadConfigurationFailsEveryCallUnsent(t *testing.T) {
	target, calls := upstreamServer(t, learning(t, 1_000_000, 1000))
	up := mustUpstream(t, outbound.Config{})
	for name, c := range map[string]healthpb.HealthClient{
		"nil upstream":            dialThrough(t, target, nil),
		"nil option":              dialThrough(t, target, up, nil),
		"nil partition func":      dialThrough(t, target, up, grpclimit.WithClientPartition(nil)),
		"nil cost func":           dialThrough(t, target, up, grpclimit.WithClientCost(nil)),
		"nil settle func":         dialThrough(t, target, up, grpclimit.WithClientSettle(nil)),
		"zero-value upstream":     dialThrough(t, target, &outbound.Upstream{}),
		"nil upstream and option": dialThrough(t, target, nil, nil),
	} {
		_, err := c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, name)
		assert.Equal(t, codes.Internal, status.Code(err), name)
		_, err = c.Watch(callCtx(t), &healthpb.HealthCheckRequest{})
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, name)
	}
	assert.Zero(t, calls.Load())
}

func TestClientPartitionAndCostFuncs(t *testing.T) {
	target, calls := upstreamServer(t, learning(t, 1_000_000, 1000))
	store := outbound.NewMemoryStore(nil)
	up, err := outbound.New(learning(t, 1_000_000, 10), outbound.Config{Store: store, MaxWait: -1})
	require.NoError(t, err)
	errNoTenant := errors.New("no tenant")
	byTenant := grpclimit.WithClientPartition(func(ctx context.Context, method string) (string, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		if v := md.Get("tenant"); len(v) > 0 {
			return v[0] + method, nil
		}
		return "", errNoTenant
	})
	cost := grpclimit.WithClientCost(func(ctx context.Context, _ string, req any) (int, error) {
		md, _ := metadata.FromOutgoingContext(ctx)
		switch v := md.Get("cost"); {
		case len(v) == 0:
			return 1, nil
		case v[0] == "status":
			return 0, status.Error(codes.PermissionDenied, "no budget for you")
		case v[0] == "negative":
			return -1, nil
		case v[0] == "zero":
			return 0, nil
		case v[0] == "anonymous":
			return 0, grpclimit.ErrMissingCredential
		}
		return 11, nil
	})
	c := dialThrough(t, target, up, byTenant, cost)
	tenant := func(kv ...string) context.Context {
		return metadata.AppendToOutgoingContext(callCtx(t), append([]string{"tenant", "a"}, kv...)...)
	}

	_, err = c.Check(callCtx(t), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, errNoTenant)
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)

	_, err = c.Check(tenant("cost", "status"), &healthpb.HealthCheckRequest{})
	assert.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)

	_, err = c.Check(tenant("cost", "negative"), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, ratelimit.ErrInvalidCost)
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	_, err = c.Check(tenant("cost", "zero"), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, ratelimit.ErrInvalidCost, "a cost of 0 would go out of budget")
	assert.Equal(t, codes.InvalidArgument, status.Code(err))

	_, err = c.Check(tenant("cost", "anonymous"), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, grpclimit.ErrMissingCredential)
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "classed as the server interceptors class it")

	_, err = c.Check(tenant("cost", "11"), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, ratelimit.ErrCostExceedsLimit)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Zero(t, calls.Load())

	// The partition is the tenant's and the method's: a 429 there pauses
	// no other.
	_, err = c.Check(tenant(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	require.NoError(t, store.Pause(context.Background(), "a/grpc.health.v1.Health/Check", time.Minute))
	_, err = c.Check(tenant(), &healthpb.HealthCheckRequest{})
	require.ErrorIs(t, err, outbound.ErrLimited)
	_, err = c.Check(metadata.AppendToOutgoingContext(callCtx(t), "tenant", "b"), &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	assert.Equal(t, int64(2), calls.Load())
}

func TestClientSettleReadsTheTrueCostFromTheAnswer(t *testing.T) {
	target, _ := upstreamServer(t, learning(t, 1_000_000, 1000))
	hourly, err := ratelimit.NewTokenBucket(ratelimit.PerHour(1), 10, ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
	require.NoError(t, err)
	up, err := outbound.New(hourly, outbound.Config{})
	require.NoError(t, err)
	var sawReply, sawHeader atomic.Bool
	c := dialThrough(t, target, up, grpclimit.WithClientSettle(func(_ string, reply any, header, _ metadata.MD) (int, bool) {
		_, ok := reply.(*healthpb.HealthCheckResponse)
		sawReply.Store(ok)
		sawHeader.Store(len(header.Get("ratelimit-policy")) > 0)
		return 6, true
	}))

	var hdr metadata.MD
	_, err = c.Check(callCtx(t), &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	require.NoError(t, err)
	assert.True(t, sawReply.Load())
	assert.True(t, sawHeader.Load())
	assert.NotEmpty(t, hdr.Get("ratelimit-policy"), "the caller's own Header option is filled too")

	// 10 - 6 left: 4 more calls, not 5.
	res, err := hourly.Allow(context.Background(), target, 4)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	res, err = hourly.Allow(context.Background(), target, 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
}
