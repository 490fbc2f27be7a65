package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// discardWriter is a ResponseWriter that keeps headers and the status and
// throws the body away, like a server's writer without the network: a new
// one per request, with its own header map.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// trivial is the handler both benchmarks serve: a content type and two bytes.
func trivial(w http.ResponseWriter, _ *http.Request) {
	w.Header()["Content-Type"] = []string{"text/plain"}
	_, _ = w.Write([]byte("ok"))
}

// serveOnce serves r through h on a fresh writer, as a server would.
func serveOnce(h http.Handler, r *http.Request) int {
	w := &discardWriter{header: make(http.Header)}
	h.ServeHTTP(w, r)
	return w.status
}

// serveLoop serves r through h b.N times and returns the time per request
// in ns.
func serveLoop(b *testing.B, h http.Handler, r *http.Request) float64 {
	b.ReportAllocs()
	for b.Loop() {
		if status := serveOnce(h, r); status != 0 && status != http.StatusOK {
			b.Fatalf("status %d", status)
		}
	}
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// BenchmarkMiddleware serves one hot key (KeyByHeader) through a trivial
// handler, bare ("without") and behind the middleware on an in-process token
// bucket that never runs dry ("with"). "with" also reports what the
// middleware adds per request: ns-added/op, its ns/op less the last
// "without" run's (so run them together), and allocs-added/op, counted
// exactly with testing.AllocsPerRun. "with-fixed-result" puts a limiter that
// answers at once in place of the bucket, to show the middleware's own cost.
func BenchmarkMiddleware(b *testing.B) {
	l, err := ratelimit.NewTokenBucket(1<<20, 1e8)
	require.NoError(b, err)
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader))
	require.NoError(b, err)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(keyHeader, "hot")
	bare := http.HandlerFunc(trivial)
	with := m.Handler(bare)
	extraAllocs := testing.AllocsPerRun(1000, func() { serveOnce(with, r) }) -
		testing.AllocsPerRun(1000, func() { serveOnce(bare, r) })

	var bareNs float64
	b.Run("without", func(b *testing.B) { bareNs = serveLoop(b, bare, r) })
	b.Run("with", func(b *testing.B) {
		withNs := serveLoop(b, with, r)
		b.ReportMetric(withNs-bareNs, "ns-added/op")
		b.ReportMetric(extraAllocs, "allocs-added/op")
	})

	// The middleware alone: a limiter that answers at once, without a lock
	// or a clock.
	fixed, err := httplimit.NewMiddleware(fixedLimiter{res: ratelimit.Result{Allowed: true, Limit: 1 << 20, Remaining: 1<<20 - 1, ResetAfter: 10}},
		httplimit.KeyByHeader(keyHeader), httplimit.WithPolicyWindow(10*time.Millisecond))
	require.NoError(b, err)
	b.Run("with-fixed-result", func(b *testing.B) {
		withNs := serveLoop(b, fixed.Handler(bare), r)
		b.ReportMetric(withNs-bareNs, "ns-added/op")
	})
}

// fixedLimiter answers every call with the same Result.
type fixedLimiter struct{ res ratelimit.Result }

func (f fixedLimiter) Allow(context.Context, string, int) (ratelimit.Result, error) {
	return f.res, nil
}
