package bench

import (
	"net/http"
	"net/http/httptest"
	"strings"
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

// rotationBlock is how many requests the "interleaved" row serves through
// one handler before it moves on to the next.
const rotationBlock = 256

// BenchmarkMiddleware is the cost httplimit's middleware adds to a request:
// one goroutine serves one request, keyed by a header (KeyByHeader) to one
// hot key, through a trivial handler, bare ("without") and behind the
// middleware on an in-process TokenBucket of the hot-key configuration,
// which never runs dry ("with"). "with" also reports ns-added/op, its ns/op
// less that of the "without" run just before it, and allocs-added/op,
// counted exactly with testing.AllocsPerRun over 1000 requests of each.
//
// "interleaved" serves each of its b.N iterations through every handler of
// middlewareRows, in blocks of rotationBlock requests, one handler after the
// other, each cycle starting one handler further on, and times each block.
// The handlers are measured within a millisecond of each other, so drift in
// the machine's speed hits all alike, where the separate rows are seconds
// apart. It reports, per request, "without-ns/op" and each other handler's
// time less the bare handler's as "<name>-added-ns/op"; its ns/op is the
// time of one request through each.
func BenchmarkMiddleware(b *testing.B) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(middlewareKeyHeader, "hot")
	rows := middlewareRows(b, r)
	bare, with := rows[0].h, rows[1].h

	var bareNs float64
	b.Run("without", func(b *testing.B) { bareNs = serveLoop(b, bare, r) })
	extraAllocs := testing.AllocsPerRun(1000, func() { serveOnce(with, r) }) -
		testing.AllocsPerRun(1000, func() { serveOnce(bare, r) })
	b.Run("with", func(b *testing.B) {
		withNs := serveLoop(b, with, r)
		b.ReportMetric(withNs-bareNs, "ns-added/op")
		b.ReportMetric(extraAllocs, "allocs-added/op")
	})
	b.Run("interleaved", func(b *testing.B) {
		b.ReportAllocs()
		spent := make([]time.Duration, len(rows))
		for done, cycle := 0, 0; done < b.N; done, cycle = done+rotationBlock, cycle+1 {
			n := min(rotationBlock, b.N-done)
			for j := range rows {
				k := (cycle + j) % len(rows)
				t0 := time.Now()
				for range n {
					serveOnce(rows[k].h, r)
				}
				spent[k] += time.Since(t0)
			}
		}
		perRequest := func(d time.Duration) float64 { return float64(d) / float64(b.N) }
		b.ReportMetric(perRequest(spent[0]), "without-ns/op")
		for k := 1; k < len(rows); k++ {
			b.ReportMetric(perRequest(spent[k]-spent[0]), rows[k].name+"-added-ns/op")
		}
	})
}

// middlewareRow is one handler of BenchmarkMiddleware's "interleaved" row.
type middlewareRow struct {
	name string
	h    http.Handler
}

// middlewareRows returns the handlers the "interleaved" row compares, the
// bare trivial handler first and the default middleware second:
//
//   - "with": httplimit's middleware with the default five fields;
//   - "legacy" and "ietf": the same with WithHeaderStyle(LegacyHeaders)
//     (three fields) and WithHeaderStyle(IETFHeaders) (two), to show what
//     the fields cost;
//   - "floor-decide" and "floor-fields": floorHandler's least work, with no
//     fields and with the five default fields preformatted, which bound from
//     below what any middleware doing this could cost;
//   - "composite": the default middleware on a Composite of two in-process
//     TokenBuckets, the hot-key one and one four times its size, decided
//     through Decide, with both policies in RateLimit-Policy;
//   - "refund": the default middleware with WithRefund whose rule never
//     refunds: the cost of reading the time and wrapping the writer.
func middlewareRows(b *testing.B, r *http.Request) []middlewareRow {
	bare := http.HandlerFunc(trivialHandler)
	return []middlewareRow{
		{"without", bare},
		{"with", limitedHandler(b, bare, r, httplimit.BothHeaders, "RateLimit-Limit")},
		{"legacy", limitedHandler(b, bare, r, httplimit.LegacyHeaders, "RateLimit-Limit")},
		{"ietf", limitedHandler(b, bare, r, httplimit.IETFHeaders, "RateLimit-Policy")},
		{"floor-decide", floorHandler(b, bare, false)},
		{"floor-fields", floorHandler(b, bare, true)},
		{"composite", compositeHandler(b, bare, r)},
		{"refund", limitedHandler(b, bare, r, httplimit.BothHeaders, "RateLimit-Limit",
			httplimit.WithRefund(func(*http.Request, int) bool { return false }))},
	}
}

// compositeHandler returns next behind the default middleware on a
// Composite of two in-process TokenBuckets, "per-second" of the hot-key
// configuration and "per-minute" four times its size at the same rate,
// after checking that it passes r on with both policies listed.
func compositeHandler(b *testing.B, next http.Handler, r *http.Request) http.Handler {
	fast, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(hotRate), hotCapacity)
	if err != nil {
		b.Fatal(err)
	}
	slow, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(hotRate), 4*hotCapacity)
	if err != nil {
		b.Fatal(err)
	}
	c, err := ratelimit.NewComposite(ratelimit.Part{Name: "per-second", Limiter: fast}, ratelimit.Part{Name: "per-minute", Limiter: slow})
	if err != nil {
		b.Fatal(err)
	}
	m, err := httplimit.NewMiddleware(c, httplimit.KeyByHeader(middlewareKeyHeader))
	if err != nil {
		b.Fatal(err)
	}
	h := m.Handler(next)
	w := &discardWriter{header: make(http.Header)}
	h.ServeHTTP(w, r)
	if w.status != 0 && w.status != http.StatusOK || !strings.Contains(w.header.Get("RateLimit-Policy"), `"per-minute"`) {
		b.Fatalf("the middleware answered %d with headers %v", w.status, w.header)
	}
	return h
}

// limitedHandler returns next behind a middleware of the given header style
// and options on an in-process TokenBucket of the hot-key configuration,
// after checking that it passes r on with the field named field set.
func limitedHandler(b *testing.B, next http.Handler, r *http.Request, style httplimit.HeaderStyle, field string, opts ...httplimit.Option) http.Handler {
	l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(hotRate), hotCapacity)
	if err != nil {
		b.Fatal(err)
	}
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(middlewareKeyHeader), append([]httplimit.Option{httplimit.WithHeaderStyle(style)}, opts...)...)
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
	l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(hotRate), hotCapacity)
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
