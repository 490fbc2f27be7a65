package outbound

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/stretchr/testify/require"
)

// BenchmarkTransportOwnTime measures a Transport's own time and
// allocations per request it does not make wait, in process: over a base
// that answers at once with a response made once, so that nothing but the
// Transport and its limiter is timed.
func BenchmarkTransportOwnTime(b *testing.B) {
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody}
	base := roundTripFunc(func(*http.Request) (*http.Response, error) { return resp, nil })
	lim, err := ratelimit.NewGCRA(1<<29, time.Second, ratelimit.WithPolicyFunc(LearnedPolicy))
	require.NoError(b, err)
	up, err := New(lim, Config{})
	require.NoError(b, err)
	tr := &Transport{Upstream: up, Base: base}
	req, err := http.NewRequest(http.MethodGet, "http://upstream.example/v1", nil)
	require.NoError(b, err)
	b.Run("limiter", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := lim.Allow(req.Context(), "another.example", 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("transport", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := tr.RoundTrip(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("transport-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := tr.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// BenchmarkTransport measures what a Transport adds to a request it does
// not make wait, in process: the same local server through a bare
// http.Transport and through a Transport over one, with a limiter that
// never denies and nothing learned. The difference of the two is the
// Transport's own time and allocations, the limiter's included.
func BenchmarkTransport(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	bare := &http.Transport{MaxIdleConnsPerHost: 64}
	defer bare.CloseIdleConnections()
	lim, err := ratelimit.NewGCRA(1<<29, time.Second, ratelimit.WithPolicyFunc(LearnedPolicy))
	require.NoError(b, err)
	up, err := New(lim, Config{})
	require.NoError(b, err)
	for name, rt := range map[string]http.RoundTripper{
		"bare":     bare,
		"outbound": &Transport{Upstream: up, Base: bare},
	} {
		b.Run(name, func(b *testing.B) {
			req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := rt.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}
