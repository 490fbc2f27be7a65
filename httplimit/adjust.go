package httplimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// ErrAdjustment is wrapped, with the limiter's error, by the errors the
// WithOnError hook gets when a Refund or Settle after a handler fails (see
// WithRefund and WithSettle): the request has been served by then, and the
// error says that its units were not adjusted. It is also wrapped, with no
// limiter's error, by the report of a cost the handler gave above
// WithMaxSettle's bound: that request is settled at the bound.
var ErrAdjustment = errors.New("httplimit: adjusting the units of a served request failed")

// SetCost reports the true cost of the request whose context is ctx (or one
// derived from it), for the middleware to settle once the handler returns
// (see WithSettle): the units the request took are replaced by cost. It may
// be called any number of times, from any goroutine, while the handler
// runs; the last call counts.
//
// It reports whether the cost was recorded: false when no Middleware built
// WithSettle admitted the request (or it was skipped, or failed open), when
// the handler has already returned, or when cost < 0. When several such
// Middlewares are nested, every one of them records it.
func SetCost(ctx context.Context, cost int) bool {
	if ctx == nil || cost < 0 {
		return false
	}
	t, _ := ctx.Value(trackerKey{}).(*tracker)
	recorded := false
	for ; t != nil; t = t.parent {
		if t.setCost(int64(cost)) {
			recorded = true
		}
	}
	return recorded
}

// trackerKey is the context key under which a tracker finds itself.
type trackerKey struct{}

// The states of a tracker's cost other than a cost reported.
const (
	costUnset  = -1 // no cost reported
	costClosed = -2 // the handler has returned: too late
)

// tracker follows one allowed request through its handler when the
// middleware adjusts requests afterwards: the status of its response (w,
// under WithRefund) and the cost it reports (ctx and cost, under
// WithSettle). Its parts live in one allocation.
type tracker struct {
	w       statusWriter
	ctx     trackerContext
	cost    atomic.Int64
	settles bool        // the Middleware settles (WithSettle): SetCost counts
	refused atomic.Bool // a Middleware inside refused the request
	parent  *tracker    // the tracker of an enclosing Middleware, if any
	// passed is the writer the handler got: a Middleware inside that
	// refuses a request written to it (or to a writer around it) refused
	// this one.
	passed http.ResponseWriter
}

// setCost records cost unless the handler has returned, and reports whether
// it did.
func (t *tracker) setCost(cost int64) bool {
	if !t.settles {
		return false
	}
	for {
		old := t.cost.Load()
		if old == costClosed {
			return false
		}
		if t.cost.CompareAndSwap(old, cost) {
			return true
		}
	}
}

// close ends the time in which SetCost counts and returns the cost
// reported, or costUnset.
func (t *tracker) close() int64 {
	return t.cost.Swap(costClosed)
}

// trackerContext is the context a handler gets under WithSettle: the
// request's context, whose Value also finds the tracker. Every other call
// goes to the request's context, so cancellation, deadlines and the
// context package's own lookups work through it as through the request's.
type trackerContext struct {
	context.Context
	t *tracker
}

// Value returns the tracker for trackerKey, and otherwise the request
// context's value for key.
func (c *trackerContext) Value(key any) any {
	if key == (trackerKey{}) {
		return c.t
	}
	return c.Context.Value(key)
}

// statusWriter records the status of a response on its way to the
// server's http.ResponseWriter.
type statusWriter struct {
	http.ResponseWriter
	status int      // the first final status, or 0 while there is none
	t      *tracker // the tracker it belongs to
}

// WriteHeader records code when it is the first final status, and passes
// it on.
func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write passes b on; without a status yet, the response is a 200.
func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom copies src to the response through the server's writer's own
// ReadFrom when it has one (so that net/http can send a file with
// sendfile); without a status yet, the response is a 200.
func (w *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if rf, ok := w.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{w.ResponseWriter}, src)
}

// writerOnly hides every method of a writer but Write, so that io.Copy
// does not call ReadFrom again.
type writerOnly struct{ io.Writer }

// Flush sends what is buffered to the client, as http.Flusher asks, when
// the server's writer can (see FlushError).
func (w *statusWriter) Flush() { _ = w.FlushError() }

// FlushError sends what is buffered to the client through the server's
// writer, and returns http.ErrNotSupported when it cannot flush. It is what
// http.ResponseController's Flush calls. A flush sends the header, so
// without a status yet, the response is a 200.
func (w *statusWriter) FlushError() error {
	err := http.NewResponseController(w.ResponseWriter).Flush()
	if w.status == 0 && !errors.Is(err, http.ErrNotSupported) {
		w.status = http.StatusOK
	}
	return err
}

// Unwrap returns the server's writer, for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// hijackWriter is a statusWriter around a server's writer that implements
// http.Hijacker, so that handlers asserting w.(http.Hijacker) find it.
type hijackWriter struct{ *statusWriter }

// Hijack takes over the connection from the server's writer. The status
// stays what it was: 200 unless the handler called WriteHeader.
func (w hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return w.ResponseWriter.(http.Hijacker).Hijack()
}

// writer returns the writer the handler gets: w, which then records the
// status of the response to rw.
func (w *statusWriter) writer(rw http.ResponseWriter) http.ResponseWriter {
	w.ResponseWriter = rw
	if _, ok := rw.(http.Hijacker); ok {
		return hijackWriter{w}
	}
	return w
}

// finalStatus returns the status of the response: 200 when the handler gave
// none, as net/http answers.
func (w *statusWriter) finalStatus() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}

// refused tells the Middlewares around the one that refused r (429, 413
// or 503), which track r for an adjustment, that its handler will not
// run: each gives back what r took from it.
//
// An enclosing Middleware is found through the writer w of the refused
// request: its status writer (WithRefund), or the writer it passed on
// (WithSettle, found in r's context), is w or a writer w wraps (found
// through Unwrap methods, as http.ResponseController finds a writer). So
// a request the handler makes of its own, with a writer of its own, is
// not taken for the one the enclosing Middleware admitted, and a writer
// around it without an Unwrap method hides it.
func refused(w http.ResponseWriter, r *http.Request) {
	settling, _ := r.Context().Value(trackerKey{}).(*tracker)
	for w != nil {
		switch v := w.(type) {
		case *statusWriter:
			v.t.refused.Store(true)
		case hijackWriter:
			v.t.refused.Store(true)
		}
		for t := settling; t != nil; t = t.parent {
			if sameWriter(t.passed, w) {
				t.refused.Store(true)
			}
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return
		}
		w = u.Unwrap()
	}
}

// sameWriter reports whether a and b are one writer: equal values of one
// comparable type.
func sameWriter(a, b http.ResponseWriter) bool {
	ta := reflect.TypeOf(a)
	return ta != nil && ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// serveTracked passes an allowed request to next and then adjusts the n
// units it took from key, as WithRefund and WithSettle say: settled at the
// cost its handler reported, at most most units (< 0: unbounded; see
// WithMaxSettle), or else at cost, its CostFunc's (which is n but for a
// cost of 0, which took 1); and refunds them whenever a Middleware inside
// refused the request. taken is the time read just after the request was
// decided.
func (h *limitedHandler) serveTracked(w http.ResponseWriter, r *http.Request, key string, n, cost int, taken time.Time, most int64) {
	m := h.m
	t := &tracker{settles: m.settle}
	rw, req := w, r
	if m.refund != nil {
		// The Middlewares inside find it through the writer.
		t.w.t = t
		rw = t.w.writer(w)
	}
	t.passed = rw
	if m.settle {
		// SetCost and the Middlewares inside find it in the context.
		t.cost.Store(costUnset)
		t.parent, _ = r.Context().Value(trackerKey{}).(*tracker)
		t.ctx = trackerContext{Context: r.Context(), t: t}
		req = r.WithContext(&t.ctx)
	}
	h.next.ServeHTTP(rw, req)

	reported := int64(costUnset)
	if m.settle {
		reported = m.boundSettle(r, t.close(), most)
	}
	if reported < 0 {
		reported = int64(cost) // none reported: the request costs what it was estimated at
	}
	switch {
	case t.refused.Load():
		// A Middleware inside refused the request: its handler never
		// ran, so nothing of it is owed.
		m.adjust(r, key, n, refundAll, taken)
	case m.refund != nil && m.refund(req, t.w.finalStatus()):
		m.adjust(r, key, n, refundAll, taken)
	case reported != int64(n):
		m.adjust(r, key, n, reported, taken)
	}
}

// refundAll is the cost that makes adjust refund.
const refundAll = -1

// adjust settles the n units a request on key took at cost, or refunds them
// for refundAll, under r's context without its cancellation and bounded by
// the adjust timeout, and passes an error to the WithOnError hook.
//
// The call carries a token the Middleware makes for this request alone
// (ratelimit.WithToken; see newTokens), nothing the client sends, so that
// two requests are never taken for one: every request that ran is adjusted
// for itself. A call that fails with ratelimit.ErrBackend (the server may
// or may not have applied it: a reply lost, a connection broken) is tried
// once more with the same token while the timeout allows; on Redis the
// token makes that second try change nothing when the first one applied.
func (m *Middleware) adjust(r *http.Request, key string, n int, cost int64, taken time.Time) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.adjustWait)
	defer cancel()
	opts := []ratelimit.AdjustOption{ratelimit.TakenAt(taken), ratelimit.WithToken(m.tokens.next())}
	err := m.adjustOnce(ctx, key, n, cost, opts)
	if err != nil && errors.Is(err, ratelimit.ErrBackend) && ctx.Err() == nil {
		err = m.adjustOnce(ctx, key, n, cost, opts)
	}
	if err != nil && m.onError != nil {
		m.onError(r, err)
	}
}

// adjustOnce makes one Refund (cost refundAll) or Settle call, and returns
// its error wrapping ErrAdjustment.
func (m *Middleware) adjustOnce(ctx context.Context, key string, n int, cost int64, opts []ratelimit.AdjustOption) error {
	if cost == refundAll {
		if _, err := m.adjuster.Refund(ctx, key, n, opts...); err != nil {
			return fmt.Errorf("%w: Refund of %d: %w", ErrAdjustment, n, err)
		}
		return nil
	}
	if _, err := m.adjuster.Settle(ctx, key, n, int(cost), opts...); err != nil {
		return fmt.Errorf("%w: Settle of %d at cost %d: %w", ErrAdjustment, n, cost, err)
	}
	return nil
}
