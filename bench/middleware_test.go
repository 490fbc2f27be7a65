package bench

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// middlewareKeyHeader is the header BenchmarkMiddleware keys requests by.
const middlewareKeyHeader = "X-Api-Key"

// discardWriter is a ResponseWriter that keeps headers and the status and
// throws the body away, like a server's writer without the network.
type discardWriter struct {
	header http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.header }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }

// trivialHandler is the handler both rows serve: a content type and two
// bytes.
func trivialHandler(w http.ResponseWriter, _ *http.Request) {
	w.Header()["Content-Type"] = []string{"text/plain"}
	_, _ = w.Write([]byte("ok"))
}

// serveOnce serves r through h on a new writer with its own header map, as a
// server would for each request.
func serveOnce(h http.Handler, r *http.Request) int {
	w := &discardWriter{header: make(http.Header)}
	h.ServeHTTP(w, r)
	return w.status
}

// serveLoop serves r through h b.N times and returns the time per request in
// ns.
func serveLoop(b *testing.B, h http.Handler, r *http.Request) float64 {
	b.ReportAllocs()
	for b.Loop() {
		if status := serveOnce(h, r); status != 0 && status != http.StatusOK {
			b.Fatalf("status %d", status)
		}
	}
	return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
}

// pairBlock is how many requests the "paired" row serves through one handler
// before it switches to the other.
const pairBlock = 256

// BenchmarkMiddleware is the cost httplimit's middleware adds to a request:
// one goroutine serves one request, keyed by a header (KeyByHeader) to one hot key, through a
// trivial handler, bare ("without") and behind the middleware on an
// in-process TokenBucket of the hot-key configuration, which never runs dry
// ("with"). "with" also reports ns-added/op, its ns/op less that of the
// "without" run just before it, and allocs-added/op, counted exactly with
// testing.AllocsPerRun over 1000 requests of each. "with-legacy" and
// "with-ietf" are the same with WithHeaderStyle(LegacyHeaders) (three
// fields) and WithHeaderStyle(IETFHeaders) (two) instead of the default
// five, to show what each field costs.
//
// "floor-decide" and "floor-fields" bound what any such middleware could
// reach: floorHandler's least work, with no fields and with the five default
// fields preformatted, in the same way as "with".
//
// "paired" serves each of its b.N iterations through both handlers, in
// alternating blocks of pairBlock requests (bare first in one block pair,
// middleware first in the next), timing each block, and reports
// ns-added/op, the middleware's time less the bare handler's per request,
// and ns-without/op. The two are measured within a few hundred
// microseconds of each other, so a burst of load on the machine hits both
// alike; its ns/op is the time of one request through each.
func BenchmarkMiddleware(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(middlewareKeyHeader, "hot")
	bare := http.HandlerFunc(trivialHandler)
	with := limitedHandler(b, bare, r, httplimit.BothHeaders, "RateLimit-Limit")
	var bareNs float64
	b.Run("without", func(b *testing.B) { bareNs = serveLoop(b, bare, r) })
	for _, row := range []struct {
		name string
		h    http.Handler
	}{
		{"with", with},
		{"with-legacy", limitedHandler(b, bare, r, httplimit.LegacyHeaders, "RateLimit-Limit")},
		{"with-ietf", limitedHandler(b, bare, r, httplimit.IETFHeaders, "RateLimit-Policy")},
		{"floor-decide", floorHandler(b, bare, false)},
		{"floor-fields", floorHandler(b, bare, true)},
	} {
		extraAllocs := testing.AllocsPerRun(1000, func() { serveOnce(row.h, r) }) -
			testing.AllocsPerRun(1000, func() { serveOnce(bare, r) })
		b.Run(row.name, func(b *testing.B) {
			withNs := serveLoop(b, row.h, r)
			b.ReportMetric(withNs-bareNs, "ns-added/op")
			b.ReportMetric(extraAllocs, "allocs-added/op")
		})
	}
	b.Run("paired", func(b *testing.B) {
		b.ReportAllocs()
		var bareT, withT time.Duration
		for done, i := 0, 0; done < b.N; done, i = done+pairBlock, i+1 {
			n := min(pairBlock, b.N-done)
			first, second := http.Handler(bare), with
			if i%2 == 1 {
				first, second = with, bare
			}
			t0 := time.Now()
			for range n {
				serveOnce(first, r)
			}
			t1 := time.Now()
			for range n {
				serveOnce(second, r)
			}
			t2 := time.Now()
			if i%2 == 0 {
				bareT, withT = bareT+t1.Sub(t0), withT+t2.Sub(t1)
			} else {
				withT, bareT = withT+t1.Sub(t0), bareT+t2.Sub(t1)
			}
		}
		b.ReportMetric(float64(withT-bareT)/float64(b.N), "ns-added/op")
		b.ReportMetric(float64(bareT)/float64(b.N), "ns-without/op")
	})
}

// limitedHandler returns next behind a middleware of the given header style
// on an in-process TokenBucket of the hot-key configuration, after checking
// that it passes r on with the field named field set.
func limitedHandler(b *testing.B, next http.Handler, r *http.Request, style httplimit.HeaderStyle, field string) http.Handler {
	l, err := ratelimit.NewTokenBucket(hotCapacity, hotRate)
	if err != nil {
		b.Fatal(err)
	}
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(middlewareKeyHeader), httplimit.WithHeaderStyle(style))
	if err != nil {
		b.Fatal(err)
	}
	h := m.Handler(next)
	w := &discardWriter{header: make(http.Header)}
	h.ServeHTTP(w, r)
	if w.status != 0 && w.status != http.StatusOK || w.header.Get(field) == "" {
		b.Fatalf("the middleware answered %d with headers %v", w.status, w.header)
	}
	return h
}

// floorFieldNames and floorFieldValues are the five default fields and the
// values the hot-key configuration gives them, formatted once.
var (
	floorFieldNames  = [...]string{"Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit"}
	floorFieldValues = [...][]string{{"1048576"}, {"1048575"}, {"1"}, {`"default";q=1048576;w=1`}, {`"default";r=1048575;t=1`}}
)

// floorHandler is the least work of a middleware in front of next, written
// inline: key the request with KeyByHeader, ask an in-process TokenBucket of
// the hot-key configuration, and, when fields is true, set the five default
// fields to floorFieldValues, which are shared by every response so that
// nothing is formatted or allocated. It is not usable middleware (the values
// never change, and a handler could write through the shared slices); it
// bounds from below what httplimit can cost.
func floorHandler(b *testing.B, next http.Handler, fields bool) http.Handler {
	l, err := ratelimit.NewTokenBucket(hotCapacity, hotRate)
	if err != nil {
		b.Fatal(err)
	}
	key := httplimit.KeyByHeader(middlewareKeyHeader)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := key(r)
		if err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		if res, err := l.Allow(r.Context(), k, 1); err != nil || !res.Allowed {
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if fields {
			h := w.Header()
			for i, name := range floorFieldNames {
				h[name] = floorFieldValues[i]
			}
		}
		next.ServeHTTP(w, r)
	})
}
