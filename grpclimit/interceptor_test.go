package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// bucket returns a token bucket of capacity 3 refilling 2 a second on a
// fake clock: w = 1.5 s, sent as 2; a denial right after three calls waits
// 500 ms exactly.
func bucket(t *testing.T) (*ratelimit.TokenBucket, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.NewClock(epoch)
	b, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 3, ratelimit.WithClock(clock))
	require.NoError(t, err)
	return b, clock
}

func byPeer(t *testing.T) grpclimit.KeyFunc {
	t.Helper()
	k, err := grpclimit.KeyByPeer(grpclimit.PeerConfig{})
	require.NoError(t, err)
	return k
}

func TestUnaryFieldsAndDenialOverLoopback(t *testing.T) {
	b, _ := bucket(t)
	in, err := grpclimit.NewInterceptor(b, byPeer(t))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)

	want := []map[string][]string{
		{"ratelimit-limit": {"3"}, "ratelimit-remaining": {"2"}, "ratelimit-reset": {"1"}, "ratelimit-policy": {`"default";q=3;w=2`}, "ratelimit": {`"default";r=2;t=1`}},
		{"ratelimit-limit": {"3"}, "ratelimit-remaining": {"1"}, "ratelimit-reset": {"1"}, "ratelimit-policy": {`"default";q=3;w=2`}, "ratelimit": {`"default";r=1;t=1`}},
		// t: the next token's time, rounded up; ratelimit-reset: the time to full.
		{"ratelimit-limit": {"3"}, "ratelimit-remaining": {"0"}, "ratelimit-reset": {"2"}, "ratelimit-policy": {`"default";q=3;w=2`}, "ratelimit": {`"default";r=0;t=1`}},
	}
	for i, w := range want {
		hdr, err := check(t, c)
		require.NoError(t, err, "call %d", i)
		assert.Equal(t, w, rateFields(hdr), "call %d", i)
	}

	// The 4th at once: denied, with the limiter's RetryAfter exactly.
	hdr, err := check(t, c)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, map[string][]string{
		"ratelimit-limit": {"3"}, "ratelimit-remaining": {"0"}, "ratelimit-reset": {"1"},
		"ratelimit-policy": {`"default";q=3;w=2`}, "ratelimit": {`"default";r=0;t=1`}, "retry-after": {"1"},
	}, rateFields(hdr))
	ri, qf := details(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, 500*time.Millisecond, ri.GetRetryDelay().AsDuration())
	require.NotNil(t, qf)
	require.Len(t, qf.GetViolations(), 1)
	assert.Equal(t, "default", qf.GetViolations()[0].GetQuotaId())
	assert.Equal(t, "policy:default", qf.GetViolations()[0].GetSubject())
	assert.Contains(t, qf.GetViolations()[0].GetDescription(), `"default";q=3;w=2`)
	assert.Contains(t, status.Convert(err).Message(), "retry after 500ms")
}

func TestStreamDecidedOnceWhenItOpens(t *testing.T) {
	b, _ := bucket(t)
	in, err := grpclimit.NewInterceptor(b, byPeer(t))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)

	watch := func() (map[string][]string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, recvErr := s.Recv()
		hdr, err := s.Header()
		require.NoError(t, err)
		return rateFields(hdr), recvErr
	}
	for i := range 3 {
		f, err := watch()
		require.NoError(t, err, "stream %d", i)
		assert.Equal(t, []string{`"default";q=3;w=2`}, f["ratelimit-policy"])
		assert.Equal(t, []string{[]string{"2", "1", "0"}[i]}, f["ratelimit-remaining"])
		assert.NotContains(t, f, "retry-after")
	}
	f, err := watch()
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, []string{"1"}, f["retry-after"])
	assert.Equal(t, []string{`"default";r=0;t=1`}, f["ratelimit"])
	ri, _ := details(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, 500*time.Millisecond, ri.GetRetryDelay().AsDuration())
}

func TestCompositeSendsEveryPolicyAndTheBoundOne(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	perSecond, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 2, ratelimit.WithClock(clock))
	require.NoError(t, err)
	perMinute, err := ratelimit.NewFixedWindow(5, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	comp, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "per-second", Limiter: perSecond},
		ratelimit.Part{Name: "per-minute", Limiter: perMinute},
	)
	require.NoError(t, err)
	in, err := grpclimit.NewInterceptor(comp, byPeer(t))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)

	const policies = `"per-second";q=2;w=1, "per-minute";q=5;w=60`
	hdr, err := check(t, c)
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{
		"ratelimit-limit": {"2"}, "ratelimit-remaining": {"1"}, "ratelimit-reset": {"60"},
		"ratelimit-policy": {policies}, "ratelimit": {`"per-second";r=1;t=1, "per-minute";r=4;t=60`},
	}, rateFields(hdr))
	_, err = check(t, c)
	require.NoError(t, err)

	hdr, err = check(t, c)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, []string{policies}, hdr["ratelimit-policy"])
	assert.Equal(t, []string{`"per-second";r=0;t=1`}, hdr["ratelimit"])
	ri, qf := details(t, err)
	assert.Equal(t, 500*time.Millisecond, ri.GetRetryDelay().AsDuration())
	assert.Equal(t, "per-second", qf.GetViolations()[0].GetQuotaId())
	assert.Contains(t, qf.GetViolations()[0].GetDescription(), `"per-second";q=2;w=1`)

	// Three more seconds: the per-second part is full, and the per-minute
	// one (2 of 5 used) binds.
	clock.Advance(3 * time.Second)
	hdr, err = check(t, c)
	require.NoError(t, err)
	assert.Equal(t, []string{`"per-minute";r=2;t=57, "per-second";r=1;t=1`}, hdr["ratelimit"], "each policy with its own effective window")
	assert.Equal(t, []string{"5"}, hdr["ratelimit-limit"])
}

func TestLimiterErrorFailsOpenByDefault(t *testing.T) {
	boom := errors.New("backend down")
	stub := &stubLimiter{err: boom}
	var hooked atomic.Value
	in, err := grpclimit.NewInterceptor(stub, byPeer(t), grpclimit.WithOnError(func(_ context.Context, method string, err error) {
		hooked.Store(method + ": " + err.Error())
	}))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)

	hdr, err := check(t, c)
	require.NoError(t, err)
	assert.Empty(t, rateFields(hdr))
	assert.Equal(t, "/grpc.health.v1.Health/Check: backend down", hooked.Load())
}

func TestLimiterErrorFailsClosedWithTheOption(t *testing.T) {
	stub := &stubLimiter{err: errors.New("backend down")}
	var hooks atomic.Int64
	in, err := grpclimit.NewInterceptor(stub, byPeer(t),
		grpclimit.WithFailClosed(2500*time.Millisecond),
		grpclimit.WithOnError(func(context.Context, string, error) { hooks.Add(1) }))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)

	hdr, err := check(t, c)
	require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Equal(t, map[string][]string{"retry-after": {"3"}}, rateFields(hdr))
	ri, _ := details(t, err)
	require.NotNil(t, ri)
	assert.Equal(t, 2500*time.Millisecond, ri.GetRetryDelay().AsDuration())
	assert.Equal(t, int64(1), hooks.Load())
}

func TestKeyByMetadata(t *testing.T) {
	b, _ := bucket(t)
	in, err := grpclimit.NewInterceptor(b, grpclimit.KeyByMetadata("X-API-Key"))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)

	_, err = check(t, c)
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	_, err = check(t, c, "x-api-key", "")
	assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)

	for range 3 {
		_, err = check(t, c, "x-api-key", "alice")
		require.NoError(t, err)
	}
	_, err = check(t, c, "x-api-key", "alice")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	hdr, err := check(t, c, "x-api-key", "bob") // a key of its own
	require.NoError(t, err)
	assert.Equal(t, []string{"2"}, hdr["ratelimit-remaining"])
}

// Every class of KeyFunc and CostFunc error has a code of its own: the
// error's own status, InvalidArgument for a cost that is not valid (the
// caller's mistake), Internal for any other (the server's). The limiter is
// never asked, and no message shows the error's text.
func TestKeyAndCostErrors(t *testing.T) {
	stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 1}}
	plain := func(context.Context, string) (string, error) { return "", errors.New("secret database detail") }
	own := func(context.Context, string) (string, error) {
		return "", status.Error(codes.PermissionDenied, "who are you")
	}
	okKey := func(context.Context, string) (string, error) { return "k", nil }
	tests := []struct {
		name string
		key  grpclimit.KeyFunc
		opts []grpclimit.Option
		code codes.Code
	}{
		{"plain key error", plain, nil, codes.Internal},
		{"key error with a status", own, nil, codes.PermissionDenied},
		{"cost error", okKey, []grpclimit.Option{grpclimit.WithCost(func(context.Context, string) (int, error) { return 0, errors.New("no") })}, codes.Internal},
		{"negative cost", okKey, []grpclimit.Option{grpclimit.WithCost(func(context.Context, string) (int, error) { return -1, nil })}, codes.InvalidArgument},
		{"cost error wrapping ErrInvalidCost", okKey, []grpclimit.Option{grpclimit.WithCost(func(context.Context, string) (int, error) {
			return 0, fmt.Errorf("estimate %q: %w", "secret", ratelimit.ErrInvalidCost)
		})}, codes.InvalidArgument},
		{"cost error with a status", okKey, []grpclimit.Option{grpclimit.WithCost(func(context.Context, string) (int, error) {
			return 0, status.Error(codes.FailedPrecondition, "no budget set")
		})}, codes.FailedPrecondition},
		{"KeyByMetadata, key missing", grpclimit.KeyByMetadata("x-api-key"), nil, codes.Unauthenticated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := grpclimit.NewInterceptor(stub, tt.key, tt.opts...)
			require.NoError(t, err)
			c := serve(t, interceptors(in)...)
			_, err = check(t, c)
			assert.Equal(t, tt.code, status.Code(err), "%v", err)
			assert.NotContains(t, err.Error(), "secret")
		})
	}
	assert.Zero(t, stub.calls.Load(), "the limiter is not asked")
}

func TestCostAboveTheLimit(t *testing.T) {
	b, _ := bucket(t)
	in, err := grpclimit.NewInterceptor(b, byPeer(t), grpclimit.WithCost(func(context.Context, string) (int, error) { return 4, nil }))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)

	hdr, err := check(t, c)
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, map[string][]string{"ratelimit-limit": {"3"}, "ratelimit-policy": {`"default";q=3;w=2`}}, rateFields(hdr))
	ri, qf := details(t, err)
	assert.Nil(t, ri, "no wait helps")
	require.NotNil(t, qf)
	assert.Contains(t, qf.GetViolations()[0].GetDescription(), "cost 4")
}

func TestSkip(t *testing.T) {
	stub := &stubLimiter{res: ratelimit.Result{Limit: 1, RetryAfter: time.Second}} // denies everything
	in, err := grpclimit.NewInterceptor(stub, byPeer(t), grpclimit.WithSkip(grpclimit.SkipHealthAndReflection))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)

	hdr, err := check(t, c)
	require.NoError(t, err)
	assert.Empty(t, rateFields(hdr))
	assert.Zero(t, stub.calls.Load())
}

func TestLimiterWithoutPolicyTakesTheResultsLimit(t *testing.T) {
	stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 7, Remaining: 6, ResetAfter: 1500 * time.Millisecond}}
	in, err := grpclimit.NewInterceptor(stub, byPeer(t), grpclimit.WithHeaderStyle(grpclimit.IETFHeaders))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)
	hdr, err := check(t, c)
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"ratelimit-policy": {`"default";q=7`}, "ratelimit": {`"default";r=6`}}, rateFields(hdr), "a limiter of another package tells no t")
}

func TestHeaderStyleLegacy(t *testing.T) {
	b, _ := bucket(t)
	in, err := grpclimit.NewInterceptor(b, byPeer(t), grpclimit.WithHeaderStyle(grpclimit.LegacyHeaders))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)
	hdr, err := check(t, c)
	require.NoError(t, err)
	assert.Equal(t, map[string][]string{"ratelimit-limit": {"3"}, "ratelimit-remaining": {"2"}, "ratelimit-reset": {"1"}}, rateFields(hdr))
}

func TestGuardGivesTheBareLimitersFields(t *testing.T) {
	b, _ := bucket(t)
	g, err := ratelimit.NewGuard(b, ratelimit.GuardConfig{})
	require.NoError(t, err)
	in, err := grpclimit.NewInterceptor(g, byPeer(t))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)
	hdr, err := check(t, c)
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";q=3;w=2`}, hdr["ratelimit-policy"])
	assert.Equal(t, []string{`"default";r=2;t=1`}, hdr["ratelimit"])
}

func TestNewInterceptorRejects(t *testing.T) {
	b, _ := bucket(t)
	key := grpclimit.KeyByMetadata("x-api-key")
	var nilBucket *ratelimit.TokenBucket
	tests := []struct {
		name string
		l    ratelimit.Limiter
		key  grpclimit.KeyFunc
		opts []grpclimit.Option
	}{
		{"nil limiter", nil, key, nil},
		{"typed nil limiter", nilBucket, key, nil},
		{"nil key", b, nil, nil},
		{"nil option", b, key, []grpclimit.Option{nil}},
		{"unknown style", b, key, []grpclimit.Option{grpclimit.WithHeaderStyle(7)}},
		{"nil cost", b, key, []grpclimit.Option{grpclimit.WithCost(nil)}},
		{"nil skip", b, key, []grpclimit.Option{grpclimit.WithSkip(nil)}},
		{"nil hook", b, key, []grpclimit.Option{grpclimit.WithOnError(nil)}},
		{"negative fail-closed retry", b, key, []grpclimit.Option{grpclimit.WithFailClosed(-time.Second)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in, err := grpclimit.NewInterceptor(tt.l, tt.key, tt.opts...)
			assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			assert.Nil(t, in)
		})
	}
}

func TestZeroInterceptorAnswersInternal(t *testing.T) {
	var in grpclimit.Interceptor
	_, err := in.Unary()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/x.Y/Z"},
		func(context.Context, any) (any, error) { t.Fatal("handler called"); return nil, nil })
	assert.Equal(t, codes.Internal, status.Code(err))
	assert.Equal(t, codes.Internal, status.Code(in.Limit(context.Background())))
}

func TestMetadataShowsEachKeysOwnPolicy(t *testing.T) {
	pro := ratelimit.Policy{Limit: 100, Window: time.Hour}
	l, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithPolicyFunc(func(_ context.Context, key string) (ratelimit.Policy, error) {
		if key == "pro" {
			return pro, nil
		}
		return ratelimit.Policy{}, nil
	}))
	require.NoError(t, err)
	in, err := grpclimit.NewInterceptor(l, func(ctx context.Context, _ string) (string, error) {
		return ctx.Value(planKey{}).(string), nil
	})
	require.NoError(t, err)
	for _, tc := range []struct{ key, policy, limit string }{
		{"pro", `"default";q=100;w=3600`, "100"},
		{"free", `"default";q=10;w=60`, "10"},
	} {
		stream := &benchStream{}
		ctx := grpc.NewContextWithServerTransportStream(context.WithValue(context.Background(), planKey{}, tc.key), stream)
		_, err := in.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) { return nil, nil })
		require.NoError(t, err)
		assert.Equal(t, []string{tc.policy}, stream.header.Get("ratelimit-policy"), tc.key)
		assert.Equal(t, []string{tc.limit}, stream.header.Get("ratelimit-limit"), tc.key)
	}
}

// planKey keys the test's plan in a context.
type planKey struct{}

// unary calls in's unary interceptor directly for key, with a handler
// that records whether it ran, and returns the metadata it set, whether
// the handler ran, and its error.
func unary(t *testing.T, in *grpclimit.Interceptor, key string) (map[string][]string, bool, error) {
	t.Helper()
	stream := &benchStream{}
	ctx := grpc.NewContextWithServerTransportStream(context.WithValue(context.Background(), planKey{}, key), stream)
	ran := false
	_, err := in.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) {
		ran = true
		return nil, nil
	})
	return rateFields(stream.header), ran, err
}

// byPlan keys a call by the plan in its context (see unary).
func byPlan(ctx context.Context, _ string) (string, error) { return ctx.Value(planKey{}).(string), nil }

func TestFailingPolicyFuncAnswersUnavailableUnlessPolicyErrorsPass(t *testing.T) {
	errLookup := errors.New("plan store unreachable")
	newLimiter := func(t *testing.T) ratelimit.Limiter {
		l, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithPolicyFunc(func(_ context.Context, key string) (ratelimit.Policy, error) {
			if key == "broken" {
				return ratelimit.Policy{}, errLookup
			}
			return ratelimit.Policy{}, nil
		}))
		require.NoError(t, err)
		// A Guard passes ErrPolicy through: it says nothing of the backend.
		g, err := ratelimit.NewGuard(l, ratelimit.GuardConfig{OnFailure: ratelimit.FailOpen})
		require.NoError(t, err)
		return g
	}

	t.Run("by default", func(t *testing.T) {
		var hooked []error
		in, err := grpclimit.NewInterceptor(newLimiter(t), byPlan,
			grpclimit.WithOnError(func(_ context.Context, _ string, err error) { hooked = append(hooked, err) }))
		require.NoError(t, err)

		md, ran, err := unary(t, in, "broken")
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.False(t, ran, "the limit is not lifted")
		assert.Equal(t, map[string][]string{"retry-after": {"1"}}, md)
		ri, qf := details(t, err)
		require.NotNil(t, ri)
		assert.Equal(t, time.Second, ri.GetRetryDelay().AsDuration())
		assert.Nil(t, qf)
		assert.NotContains(t, err.Error(), errLookup.Error(), "the lookup's error stays on the server")
		require.Len(t, hooked, 1)
		assert.ErrorIs(t, hooked[0], ratelimit.ErrPolicy)
		assert.ErrorIs(t, hooked[0], ratelimit.ErrCaller)
		assert.ErrorIs(t, hooked[0], errLookup)

		// Other keys are decided as before.
		md, ran, err = unary(t, in, "free")
		require.NoError(t, err)
		assert.True(t, ran)
		assert.Equal(t, []string{`"default";q=10;w=60`}, md["ratelimit-policy"])
	})

	t.Run("with WithFailClosed's delay", func(t *testing.T) {
		in, err := grpclimit.NewInterceptor(newLimiter(t), byPlan, grpclimit.WithFailClosed(2500*time.Millisecond))
		require.NoError(t, err)
		md, ran, err := unary(t, in, "broken")
		require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
		assert.False(t, ran)
		assert.Equal(t, map[string][]string{"retry-after": {"3"}}, md)
		ri, _ := details(t, err)
		require.NotNil(t, ri)
		assert.Equal(t, 2500*time.Millisecond, ri.GetRetryDelay().AsDuration())
	})

	t.Run("WithPolicyErrorsPass", func(t *testing.T) {
		var hooks atomic.Int64
		in, err := grpclimit.NewInterceptor(newLimiter(t), byPlan, grpclimit.WithPolicyErrorsPass(),
			grpclimit.WithOnError(func(context.Context, string, error) { hooks.Add(1) }))
		require.NoError(t, err)
		md, ran, err := unary(t, in, "broken")
		require.NoError(t, err)
		assert.True(t, ran, "let through on request")
		assert.Empty(t, md)
		assert.Equal(t, int64(1), hooks.Load())
	})

	t.Run("WithPolicyErrorsPass and WithFailClosed", func(t *testing.T) {
		stub := &stubLimiter{err: fmt.Errorf("%w: redis: connection refused", ratelimit.ErrBackend)}
		in, err := grpclimit.NewInterceptor(stub, byPlan, grpclimit.WithPolicyErrorsPass(), grpclimit.WithFailClosed(0))
		require.NoError(t, err)
		_, ran, err := unary(t, in, "any")
		assert.Equal(t, codes.Unavailable, status.Code(err), "a backend failure still fails closed")
		assert.False(t, ran)

		in, err = grpclimit.NewInterceptor(newLimiter(t), byPlan, grpclimit.WithPolicyErrorsPass(), grpclimit.WithFailClosed(0))
		require.NoError(t, err)
		_, ran, err = unary(t, in, "broken")
		assert.Equal(t, codes.Unavailable, status.Code(err), "WithFailClosed answers every limiter error, as httplimit does")
		assert.False(t, ran)
	})
}

func TestBackendErrorFailsOpenByDefault(t *testing.T) {
	stub := &stubLimiter{err: fmt.Errorf("%w: redis: i/o timeout", ratelimit.ErrBackend)}
	in, err := grpclimit.NewInterceptor(stub, byPlan)
	require.NoError(t, err)
	md, ran, err := unary(t, in, "any")
	require.NoError(t, err)
	assert.True(t, ran)
	assert.Empty(t, md)
}

func TestDecisionWhosePoliciesCannotBeSentIsALimiterError(t *testing.T) {
	for name, d := range map[string]ratelimit.Decision{
		"name not printable": {
			Result:   ratelimit.Result{Allowed: true, Limit: 5, Remaining: 4},
			Policy:   ratelimit.NamedPolicy{Name: "plan\n", Policy: ratelimit.Policy{Limit: 5}},
			Policies: []ratelimit.NamedPolicy{{Name: "plan\n", Policy: ratelimit.Policy{Limit: 5}}},
		},
		"bound out of range": {
			Result:      ratelimit.Result{Allowed: true, Limit: 5, Remaining: 4},
			Policies:    []ratelimit.NamedPolicy{{Name: "a", Policy: ratelimit.Policy{Limit: 5}}},
			PolicyIndex: 1,
		},
		"no limit among several": {
			Result:   ratelimit.Result{Allowed: true, Limit: 5, Remaining: 4},
			Policy:   ratelimit.NamedPolicy{Name: "a", Policy: ratelimit.Policy{Limit: 5}},
			Policies: []ratelimit.NamedPolicy{{Name: "a", Policy: ratelimit.Policy{Limit: 5}}, {Name: "b"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var hooked error
			in, err := grpclimit.NewInterceptor(&decisionStub{d: d}, byPlan,
				grpclimit.WithOnError(func(_ context.Context, _ string, err error) { hooked = err }))
			require.NoError(t, err)
			md, ran, err := unary(t, in, "k")
			assert.Equal(t, codes.Unavailable, status.Code(err), "an unknown limit is not lifted: %v", err)
			assert.False(t, ran)
			assert.Equal(t, map[string][]string{"retry-after": {"1"}}, md)
			assert.ErrorIs(t, hooked, ratelimit.ErrInvalidConfig)

			in, err = grpclimit.NewInterceptor(&decisionStub{d: d}, byPlan, grpclimit.WithFailClosed(0))
			require.NoError(t, err)
			_, _, err = unary(t, in, "k")
			assert.Equal(t, codes.Unavailable, status.Code(err))
		})
	}
}

func TestMetadataComesFromTheDecisionAlone(t *testing.T) {
	// A Decider of another package answers from a fallback, bound by its
	// second policy: the metadata names that policy and lists both, with
	// the Result's numbers, whatever the Limiter's type.
	policies := []ratelimit.NamedPolicy{
		{Name: "requests", Policy: ratelimit.Policy{Limit: 60, Window: time.Minute}, PerCall: true},
		{Name: "tokens", Policy: ratelimit.Policy{Limit: 20000, Window: time.Minute}},
	}
	d := ratelimit.Decision{
		Result:      ratelimit.Result{Limit: 20000, Remaining: 7, RetryAfter: 1200 * time.Millisecond, ResetAfter: time.Minute},
		Policy:      policies[1],
		Policies:    policies,
		PolicyIndex: 1,
		Source:      ratelimit.FromFallback,
	}
	d.Enforced = d.Result
	in, err := grpclimit.NewInterceptor(&decisionStub{d: d}, byPlan)
	require.NoError(t, err)
	md, ran, err := unary(t, in, "k")
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.False(t, ran)
	assert.Equal(t, map[string][]string{
		"ratelimit-limit": {"20000"}, "ratelimit-remaining": {"7"}, "ratelimit-reset": {"2"},
		"ratelimit-policy": {`"requests";q=60;w=60, "tokens";q=20000;w=60`},
		"ratelimit":        {`"tokens";r=7;t=2`}, "retry-after": {"2"},
	}, md)
	_, qf := details(t, err)
	require.NotNil(t, qf)
	assert.Equal(t, "tokens", qf.GetViolations()[0].GetQuotaId())
}
