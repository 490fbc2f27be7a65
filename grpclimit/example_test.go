package grpclimit_test

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
)

// Each Bearer token gets its own limit, under a hash of the token; a call
// without one is answered codes.Unauthenticated, one with a malformed one
// codes.InvalidArgument. The observer counts the decisions by method.
func ExampleKeyByBearer() {
	limiter, err := ratelimit.NewGCRA(100, time.Minute)
	if err != nil {
		panic(err)
	}
	counts := map[string]int{} // one goroutine here; guard it in a server
	in, err := grpclimit.NewInterceptor(limiter, grpclimit.KeyByBearer(),
		grpclimit.WithObserver(func(_ context.Context, method string, d ratelimit.Decision, err error) {
			counts[fmt.Sprintf("%s allowed=%t error=%t", method, d.Allowed, err != nil)]++
		}))
	if err != nil {
		panic(err)
	}
	unary := in.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: "/shop.v1.Orders/Get"}
	handler := func(context.Context, any) (any, error) { return "ok", nil }
	for _, auth := range []string{"Bearer mF_9.B5f-4.1JqM", "", "Bearer two words"} {
		md := metadata.MD{}
		if auth != "" {
			md.Set("authorization", auth)
		}
		_, err := unary(metadata.NewIncomingContext(context.Background(), md), nil, info, handler)
		fmt.Printf("%q: %v\n", auth, status.Code(err))
	}
	fmt.Println(counts)
	// Output:
	// "Bearer mF_9.B5f-4.1JqM": OK
	// "": Unauthenticated
	// "Bearer two words": InvalidArgument
	// map[/shop.v1.Orders/Get allowed=false error=true:2 /shop.v1.Orders/Get allowed=true error=false:1]
}
