package grpclimit_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// epoch is where the tests' fake clocks start.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// serve starts a real gRPC server with the health service behind opts on a
// loopback listener, and returns a client of it. Both are closed when the
// test ends.
func serve(t *testing.T, opts ...grpc.ServerOption) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(opts...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-done
	})
	return healthpb.NewHealthClient(conn)
}

// interceptors returns the server options that put in in front of every
// unary and stream call.
func interceptors(in interface {
	Unary() grpc.UnaryServerInterceptor
	Stream() grpc.StreamServerInterceptor
}) []grpc.ServerOption {
	return []grpc.ServerOption{grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream())}
}

// check makes one Check call and returns its response header and error.
func check(t *testing.T, c healthpb.HealthClient, md ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var hdr metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr))
	return hdr, err
}

// rateFields returns the rate-limit fields of md, each key's values.
func rateFields(md metadata.MD) map[string][]string {
	out := map[string][]string{}
	for _, k := range []string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "ratelimit-policy", "ratelimit", "retry-after"} {
		if v, ok := md[k]; ok {
			out[k] = v
		}
	}
	return out
}

// details returns the RetryInfo and QuotaFailure details of err's status,
// nil for those it lacks.
func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status error: %v", err)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.RetryInfo:
			ri = v
		case *errdetails.QuotaFailure:
			qf = v
		}
	}
	return ri, qf
}

// stubLimiter answers every call with res and err, and counts the calls.
type stubLimiter struct {
	res   ratelimit.Result
	err   error
	calls atomic.Int64
}

func (s *stubLimiter) Allow(context.Context, string, int) (ratelimit.Result, error) {
	s.calls.Add(1)
	return s.res, s.err
}

// decisionStub is a ratelimit.Decider of another package that answers
// every call with d.
type decisionStub struct{ d ratelimit.Decision }

func (s *decisionStub) Allow(context.Context, string, int) (ratelimit.Result, error) {
	return s.d.Result, nil
}

func (s *decisionStub) Decide(context.Context, string, int) (ratelimit.Decision, error) {
	return s.d, nil
}

func (s *decisionStub) Policies(context.Context, string) ([]ratelimit.NamedPolicy, error) {
	return s.d.Policies, nil
}
