package grpclimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// benchStream is a grpc.ServerTransportStream without a network: it keeps
// the header set last, as a server's stream keeps it until it is sent.
type benchStream struct{ header metadata.MD }

func (s *benchStream) Method() string                  { return "/bench.Service/Call" }
func (s *benchStream) SetHeader(md metadata.MD) error  { s.header = md; return nil }
func (s *benchStream) SendHeader(md metadata.MD) error { return nil }
func (s *benchStream) SetTrailer(md metadata.MD) error { return nil }

// hotBucket is a token bucket that never runs dry at benchmark speeds.
func hotBucket(b *testing.B) *ratelimit.TokenBucket {
	b.Helper()
	l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e8), 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkUnaryInterceptor is the cost the unary interceptor adds to a
// call: the interceptor function called directly, keyed by the x-api-key
// metadata (KeyByMetadata) to one hot key of an in-process TokenBucket
// that never runs dry, with a handler that does nothing and a context that
// carries a server transport stream, so that grpc.SetHeader works as on a
// server. "bare" calls the handler alone; the difference is what the
// interceptor adds.
func BenchmarkUnaryInterceptor(b *testing.B) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "hot"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, &benchStream{})
	info := &grpc.UnaryServerInfo{FullMethod: "/bench.Service/Call"}
	handler := func(context.Context, any) (any, error) { return nil, nil }

	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := handler(ctx, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("with", func(b *testing.B) {
		in, err := grpclimit.NewInterceptor(hotBucket(b), grpclimit.KeyByMetadata("x-api-key"))
		if err != nil {
			b.Fatal(err)
		}
		unary := in.Unary()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := unary(ctx, nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("leased", func(b *testing.B) {
		// A limit of calls in flight, WithLeases: each call acquires,
		// holds its lease (its extension timer set and stopped) and
		// releases it.
		l, err := ratelimit.NewConcurrency(5, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		in, err := grpclimit.NewInterceptor(l, grpclimit.KeyByMetadata("x-api-key"), grpclimit.WithLeases())
		if err != nil {
			b.Fatal(err)
		}
		unary := in.Unary()
		b.ReportAllocs()
		for b.Loop() {
			if _, err := unary(ctx, nil, info, handler); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// discardWriter is an http.ResponseWriter that keeps the header and throws
// the rest away.
type discardWriter struct{ header http.Header }

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkHTTPMiddleware is the same shape for httplimit's middleware,
// for comparison: keyed by the X-Api-Key header (KeyByHeader) to the same
// hot key of the same limiter, a handler that does nothing, and a fresh
// header map per request as a server gives each; "bare" serves the handler
// alone on the same writer.
func BenchmarkHTTPMiddleware(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Api-Key", "hot")
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	serve := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		for b.Loop() {
			h.ServeHTTP(&discardWriter{header: make(http.Header)}, r)
		}
	}
	b.Run("bare", func(b *testing.B) { serve(b, next) })
	b.Run("with", func(b *testing.B) {
		mw, err := httplimit.NewMiddleware(hotBucket(b), httplimit.KeyByHeader("X-Api-Key"))
		if err != nil {
			b.Fatal(err)
		}
		serve(b, mw.Handler(next))
	})
}

// addedBlock is how many calls BenchmarkAddedCost makes through one path
// before it moves on to the next.
const addedBlock = 256

// BenchmarkAddedCost sets the two shapes above side by side: each
// iteration makes addedBlock calls through each of the four paths (gRPC
// bare and with the interceptor, HTTP bare and with the middleware), one
// block after the other, and times each block, so that drift in the
// machine's speed hits all four alike. It reports, per call, the time the
// interceptor adds (grpc-added-ns/op), the time the middleware adds
// (http-added-ns/op) and their ratio (grpc/http).
func BenchmarkAddedCost(b *testing.B) {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "hot"))
	ctx = grpc.NewContextWithServerTransportStream(ctx, &benchStream{})
	info := &grpc.UnaryServerInfo{FullMethod: "/bench.Service/Call"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	in, err := grpclimit.NewInterceptor(hotBucket(b), grpclimit.KeyByMetadata("x-api-key"))
	if err != nil {
		b.Fatal(err)
	}
	unary := in.Unary()

	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Api-Key", "hot")
	next := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	mw, err := httplimit.NewMiddleware(hotBucket(b), httplimit.KeyByHeader("X-Api-Key"))
	if err != nil {
		b.Fatal(err)
	}
	limited := mw.Handler(next)

	paths := []func(){
		func() { _, _ = handler(ctx, nil) },
		func() { _, _ = unary(ctx, nil, info, handler) },
		func() { next.ServeHTTP(&discardWriter{header: make(http.Header)}, r) },
		func() { limited.ServeHTTP(&discardWriter{header: make(http.Header)}, r) },
	}
	var spent [4]time.Duration
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for i, path := range paths {
			start := time.Now()
			for range addedBlock {
				path()
			}
			spent[i] += time.Since(start)
		}
		n += addedBlock
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(n) }
	grpcAdded := per(spent[1]) - per(spent[0])
	httpAdded := per(spent[3]) - per(spent[2])
	b.ReportMetric(grpcAdded, "grpc-added-ns/op")
	b.ReportMetric(httpAdded, "http-added-ns/op")
	b.ReportMetric(grpcAdded/httpAdded, "grpc/http")
}
