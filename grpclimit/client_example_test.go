package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/outbound"
)

// A partner allows 10 calls a second. When it refuses one with a
// retry-after of 30 s, as grpclimit's server interceptors do, the
// partition is paused: the next call fails at once, unsent, with an error
// that both status.Code and errors.Is read. Here the call is invoked
// directly, without a connection; give the interceptor to grpc.NewClient
// with grpc.WithUnaryInterceptor.
func ExampleUnaryClientInterceptor() {
	limiter, err := ratelimit.NewGCRA(10, time.Second, ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
	if err != nil {
		panic(err)
	}
	up, err := outbound.New(limiter, outbound.Config{
		MaxWait: -1, // fail fast rather than wait
		Observer: func(e outbound.Event) {
			if e.Kind == outbound.Paused {
				fmt.Println(e.Partition, "paused for", e.Pause)
			}
		},
	})
	if err != nil {
		panic(err)
	}
	unary := grpclimit.UnaryClientInterceptor(up, grpclimit.WithClientPartition(
		func(context.Context, string) (string, error) { return "partner", nil }))

	sent := 0
	refused := func(_ context.Context, _ string, _, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		sent++
		for _, o := range opts {
			if h, ok := o.(grpc.HeaderCallOption); ok {
				*h.HeaderAddr = metadata.Pairs("retry-after", "30")
			}
		}
		return status.Error(codes.ResourceExhausted, "rate limit exceeded")
	}
	for range 2 {
		err := unary(context.Background(), "/partner.v1.Quotes/Get", nil, nil, nil, refused)
		fmt.Println(status.Code(err), errors.Is(err, outbound.ErrLimited))
	}
	fmt.Println("sent:", sent)
	// Output:
	// partner paused for 30s
	// ResourceExhausted false
	// ResourceExhausted true
	// sent: 1
}
