package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
)

// Every class of KeyFunc and CostFunc error has its code: a call without
// its credential is Unauthenticated, the caller's other mistakes
// InvalidArgument, the server's Internal, and an error's own status wins.
// The observer sees each once, with the error; the handler never runs.
func TestKeyAndCostErrorCodeByClass(t *testing.T) {
	errLookup := errors.New("user store down")
	failing := func(err error) grpclimit.KeyFunc {
		return func(context.Context, string) (string, error) { return "", err }
	}
	costing := func(n int, err error) grpclimit.CostFunc {
		return func(context.Context, string) (int, error) { return n, err }
	}
	auth := func(v ...string) metadata.MD { return metadata.MD{"authorization": v} }
	cases := []struct {
		name string
		key  grpclimit.KeyFunc
		cost grpclimit.CostFunc
		md   metadata.MD
		code codes.Code
	}{
		{"KeyByBearer, no metadata", grpclimit.KeyByBearer(), nil, nil, codes.Unauthenticated},
		{"KeyByBearer, another scheme", grpclimit.KeyByBearer(), nil, auth("Basic abc"), codes.Unauthenticated},
		{"KeyByBearer, no token", grpclimit.KeyByBearer(), nil, auth("Bearer "), codes.InvalidArgument},
		{"KeyByBearer, two values", grpclimit.KeyByBearer(), nil, auth("Bearer a", "Bearer b"), codes.InvalidArgument},
		{"KeyByMetadata, missing", grpclimit.KeyByMetadata("x-api-key"), nil, nil, codes.Unauthenticated},
		{"KeyFunc's error of class ErrMissingCredential", failing(fmt.Errorf("%w: no session", grpclimit.ErrMissingCredential)), nil, nil, codes.Unauthenticated},
		{"KeyFunc's error of class ErrMalformedCredential", failing(fmt.Errorf("%w: bad token", grpclimit.ErrMalformedCredential)), nil, nil, codes.InvalidArgument},
		{"KeyFunc's own status", failing(status.Error(codes.PermissionDenied, "no")), nil, nil, codes.PermissionDenied},
		{"KeyFunc's own error", failing(errLookup), nil, nil, codes.Internal},
		{"negative cost", nil, costing(-1, nil), nil, codes.InvalidArgument},
		{"CostFunc error wrapping ErrInvalidCost", nil, costing(0, fmt.Errorf("x: %w", ratelimit.ErrInvalidCost)), nil, codes.InvalidArgument},
		{"CostFunc error wrapping ErrMissingCredential", nil, costing(0, fmt.Errorf("%w: no account", grpclimit.ErrMissingCredential)), nil, codes.Unauthenticated},
		{"CostFunc's own error", nil, costing(0, errLookup), nil, codes.Internal},
	}
	l, err := ratelimit.NewGCRA(10, time.Second)
	require.NoError(t, err)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := tc.key
			if key == nil {
				key = func(context.Context, string) (string, error) { return "k", nil }
			}
			var seen []error
			opts := []grpclimit.Option{grpclimit.WithObserver(func(_ context.Context, method string, d ratelimit.Decision, err error) {
				assert.Equal(t, "/svc/M", method)
				assert.Nil(t, d.Policies)
				seen = append(seen, err)
			})}
			if tc.cost != nil {
				opts = append(opts, grpclimit.WithCost(tc.cost))
			}
			in, err := grpclimit.NewInterceptor(l, key, opts...)
			require.NoError(t, err)
			ctx := metadata.NewIncomingContext(context.Background(), tc.md)
			ran := false
			_, err = in.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/svc/M"}, func(context.Context, any) (any, error) {
				ran = true
				return nil, nil
			})
			assert.Equal(t, tc.code, status.Code(err))
			assert.False(t, ran)
			if assert.Len(t, seen, 1) {
				assert.Error(t, seen[0])
			}
		})
	}
}

// KeyByBearer's key is httplimit.KeyByBearer's for the same token: a hash,
// never the token.
func TestGRPCKeyByBearerKeysByTheTokensHash(t *testing.T) {
	key := grpclimit.KeyByBearer()
	ctx := metadata.NewIncomingContext(context.Background(), metadata.MD{"authorization": {"bearer   mF_9.B5f-4.1JqM"}})
	k, err := key(ctx, "/svc/M")
	require.NoError(t, err)
	assert.Equal(t, "bearer:", k[:7])
	assert.NotContains(t, k, "mF_9")
	ctx = metadata.NewIncomingContext(context.Background(), metadata.MD{"authorization": {"Bearer mF_9.B5f-4.1JqM"}})
	k2, err := key(ctx, "/svc/M")
	require.NoError(t, err)
	assert.Equal(t, k, k2)
}

// The observer sees allowed and denied calls with the method, and a
// skipped call not at all.
func TestObserverSeesEachDecidedCall(t *testing.T) {
	l, err := ratelimit.NewGCRA(1, time.Minute)
	require.NoError(t, err)
	type seen struct {
		method  string
		allowed bool
	}
	var got []seen
	in, err := grpclimit.NewInterceptor(l, func(context.Context, string) (string, error) { return "k", nil },
		grpclimit.WithSkip(grpclimit.SkipHealthAndReflection),
		grpclimit.WithObserver(func(_ context.Context, method string, d ratelimit.Decision, err error) {
			assert.NoError(t, err)
			got = append(got, seen{method, d.Allowed})
		}))
	require.NoError(t, err)
	handler := func(context.Context, any) (any, error) { return nil, nil }
	for _, m := range []string{"/svc/A", "/svc/B", "/grpc.health.v1.Health/Check"} {
		_, _ = in.Unary()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: m}, handler)
	}
	assert.Equal(t, []seen{{"/svc/A", true}, {"/svc/B", false}}, got)
}

// With a plan per key, ratelimit-policy names each key's plan, and a key
// of no plan keeps "default"; a limiter of several policies refuses it.
func TestGRPCPlanNameNamesEachKeysPolicy(t *testing.T) {
	plans := map[string]string{"alice": "free", "bob": "pro"}
	limits := map[string]int{"free": 1, "pro": 5}
	l, err := ratelimit.NewGCRA(2, time.Minute, ratelimit.WithPolicyFunc(func(_ context.Context, key string) (ratelimit.Policy, error) {
		if plan, ok := plans[key]; ok {
			return ratelimit.Policy{Limit: limits[plan], Window: time.Minute}, nil
		}
		return ratelimit.Policy{Limit: 2, Window: time.Minute}, nil
	}))
	require.NoError(t, err)
	planOf := func(key string) (string, bool) { p, ok := plans[key]; return p, ok }
	in, err := grpclimit.NewInterceptor(l, grpclimit.KeyByMetadata("x-api-key"), grpclimit.WithPlanName(planOf))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)
	for key, want := range map[string]string{"alice": `"free";q=1;w=60`, "bob": `"pro";q=5;w=60`, "carol": `"default";q=2;w=60`} {
		md, err := check(t, c, "x-api-key", key)
		require.NoError(t, err)
		assert.Equal(t, []string{want}, md.Get("ratelimit-policy"), key)
	}
	_, err = check(t, c, "x-api-key", "alice")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), `"free"`)

	perSecond, err := ratelimit.NewGCRA(5, time.Second)
	require.NoError(t, err)
	perMinute, err := ratelimit.NewGCRA(50, time.Minute)
	require.NoError(t, err)
	comp, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "second", Limiter: perSecond},
		ratelimit.Part{Name: "minute", Limiter: perMinute},
	)
	require.NoError(t, err)
	_, err = grpclimit.NewInterceptor(comp, grpclimit.KeyByMetadata("x-api-key"), grpclimit.WithPlanName(planOf))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}
