package grpclimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// TestMetadataCarriesTheBytesOfHTTPLimitsHeaderFields checks that a call
// and a request decided alike carry the same rate-limit values: each case
// builds one limiter for the Interceptor and one for a Middleware, on
// fake clocks at the same time, sends the same calls through each, and
// compares the last call's metadata with the last response's header
// fields, named in lower case.
func TestMetadataCarriesTheBytesOfHTTPLimitsHeaderFields(t *testing.T) {
	secret := []byte("0123456789abcdef")
	bucket := func(rate ratelimit.Rate, capacity int) func(ratelimit.Clock) (ratelimit.Limiter, error) {
		return func(c ratelimit.Clock) (ratelimit.Limiter, error) {
			return ratelimit.NewTokenBucket(rate, capacity, ratelimit.WithClock(c))
		}
	}
	composite := func(c ratelimit.Clock) (ratelimit.Limiter, error) {
		second, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10, ratelimit.WithClock(c))
		if err != nil {
			return nil, err
		}
		hour, err := ratelimit.NewTokenBucket(ratelimit.PerHour(1000), 1000, ratelimit.WithClock(c))
		if err != nil {
			return nil, err
		}
		return ratelimit.NewComposite(ratelimit.Part{Name: "per-second", Limiter: second}, ratelimit.Part{Name: "per-hour", Limiter: hour})
	}
	tests := []struct {
		what    string
		limiter func(ratelimit.Clock) (ratelimit.Limiter, error)
		calls   int
		grpc    []grpclimit.Option
		http    []httplimit.Option
	}{
		{"an allowed call", bucket(ratelimit.PerSecond(1), 10), 3, nil, nil},
		{"a denied call", bucket(ratelimit.Every(2*time.Second), 2), 3, nil, nil},
		{"a partition key", bucket(ratelimit.PerSecond(1), 10), 1,
			[]grpclimit.Option{grpclimit.WithPartitionKey(secret)}, []httplimit.Option{httplimit.WithPartitionKey(secret)}},
		{"a Composite's parts with a quota unit", composite, 2,
			[]grpclimit.Option{grpclimit.WithQuotaUnit("tokens")}, []httplimit.Option{httplimit.WithQuotaUnit("tokens")}},
		{"a denied Composite", composite, 11, nil, nil},
		{"the IETF fields alone", bucket(ratelimit.PerSecond(1), 10), 1,
			[]grpclimit.Option{grpclimit.WithHeaderStyle(grpclimit.IETFHeaders)}, []httplimit.Option{httplimit.WithHeaderStyle(httplimit.IETFHeaders)}},
		{"the legacy fields alone", bucket(ratelimit.PerSecond(1), 10), 1,
			[]grpclimit.Option{grpclimit.WithHeaderStyle(grpclimit.LegacyHeaders)}, []httplimit.Option{httplimit.WithHeaderStyle(httplimit.LegacyHeaders)}},
	}
	for _, tt := range tests {
		t.Run(tt.what, func(t *testing.T) {
			gl, err := tt.limiter(ratelimittest.NewClock(epoch))
			require.NoError(t, err)
			in, err := grpclimit.NewInterceptor(gl, grpclimit.KeyByMetadata("x-api-key"), tt.grpc...)
			require.NoError(t, err)
			stream := &benchStream{}
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "alice"))
			ctx = grpc.NewContextWithServerTransportStream(ctx, stream)
			unary := in.Unary()
			handler := func(context.Context, any) (any, error) { return nil, nil }
			for range tt.calls {
				_, _ = unary(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/bench.Service/Call"}, handler)
			}

			hl, err := tt.limiter(ratelimittest.NewClock(epoch))
			require.NoError(t, err)
			m, err := httplimit.NewMiddleware(hl, httplimit.KeyByHeader("X-Api-Key"), tt.http...)
			require.NoError(t, err)
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			var w *httptest.ResponseRecorder
			for range tt.calls {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.Header.Set("X-Api-Key", "alice")
				w = httptest.NewRecorder()
				h.ServeHTTP(w, r)
			}

			want := map[string][]string{}
			for k, v := range w.Header() {
				if k = strings.ToLower(k); strings.HasPrefix(k, "ratelimit") || k == "retry-after" {
					want[k] = v
				}
			}
			require.NotEmpty(t, want)
			assert.Equal(t, want, rateFields(stream.header))
		})
	}
}
