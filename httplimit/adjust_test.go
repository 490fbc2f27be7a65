package httplimit_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// serverErrors is the refund rule that does not count 5xx answers.
func serverErrors(_ *http.Request, status int) bool { return status >= 500 }

// statusHandler answers with the status in the query parameter "status",
// and first reports the cost in "cost" with SetCost, when there is one.
// It counts its calls and remembers what SetCost answered last.
type statusHandler struct {
	calls    atomic.Int64
	recorded atomic.Bool
}

func (s *statusHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	q := r.URL.Query()
	if c := q.Get("cost"); c != "" {
		cost, _ := strconv.Atoi(c)
		s.recorded.Store(httplimit.SetCost(r.Context(), cost))
	}
	if st := q.Get("status"); st != "" {
		status, _ := strconv.Atoi(st)
		w.WriteHeader(status)
	}
}

// adjusting returns m's handler in front of a statusHandler, and the
// handler.
func adjusting(t *testing.T, l ratelimit.Limiter, opts ...httplimit.Option) (http.Handler, *statusHandler) {
	t.Helper()
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), opts...)
	require.NoError(t, err)
	next := &statusHandler{}
	return m.Handler(next), next
}

// get sends one GET of target for key through h.
func get(h http.Handler, key, target string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Header.Set(keyHeader, key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// fakeCalls returns l's adjustments when it is a fakeBucket, and ok false
// otherwise.
func fakeCalls(l ratelimit.Limiter) ([]adjustCall, bool) {
	if f, ok := l.(*fakeBucket); ok {
		return f.calls(), true
	}
	return nil, false
}

// Failures of the service give their units back: however many 5xx
// answers, the key keeps its whole limit for the requests that count.
func TestRefundOnServerErrors(t *testing.T) {
	for _, kind := range adjustables {
		t.Run(kind.name, func(t *testing.T) {
			l, _ := kind.new(t, 2, time.Second)
			h, next := adjusting(t, l, httplimit.WithRefund(serverErrors))

			for i := range 5 {
				w := get(h, "alice", "/?status=503")
				require.Equal(t, http.StatusServiceUnavailable, w.Code, "request %d", i)
				// The fields were set before the handler ran.
				assert.Equal(t, allowedRL(kind.foreign, `"default";r=1;t=1`), w.Header().Get("RateLimit"), "request %d", i)
			}
			w := get(h, "alice", "/?status=200")
			assert.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, allowedRL(kind.foreign, `"default";r=1;t=1`), w.Header().Get("RateLimit"))
			w = get(h, "alice", "/?status=404")
			assert.Equal(t, http.StatusNotFound, w.Code)
			assert.Equal(t, allowedRL(kind.foreign, `"default";r=0;t=1`), w.Header().Get("RateLimit"), "the next token in 1 s")
			w = get(h, "alice", "/")
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "1", w.Header().Get("Retry-After"))
			assert.Equal(t, int64(7), next.calls.Load())

			if calls, ok := fakeCalls(l); ok {
				require.Len(t, calls, 5)
				for _, c := range calls {
					assert.Equal(t, "Refund", c.method)
					assert.Equal(t, "alice", c.key)
					assert.Equal(t, 1, c.taken)
					assert.Equal(t, 2, c.opts, "TakenAt and the request's token")
				}
			}
		})
	}
}

// On a login endpoint keyed by account, successful logins give their unit
// back, so that only failed attempts count.
func TestRefundOnSuccessCountsOnlyFailures(t *testing.T) {
	for _, kind := range adjustables {
		t.Run(kind.name, func(t *testing.T) {
			l, clock := kind.new(t, 3, time.Minute) // 3 failures, then one more a minute
			h, next := adjusting(t, l, httplimit.WithRefund(func(_ *http.Request, status int) bool { return status < 400 }))

			for i, status := range []int{200, 200, 401, 200, 401, 200, 200, 401} {
				w := get(h, "bob", "/login?status="+strconv.Itoa(status))
				require.Equal(t, status, w.Code, "attempt %d", i)
			}
			w := get(h, "bob", "/login?status=200") // even the right password
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "60", w.Header().Get("Retry-After"))
			assert.Equal(t, int64(8), next.calls.Load())

			clock.Advance(time.Minute)
			assert.Equal(t, http.StatusOK, get(h, "bob", "/login?status=200").Code)
			assert.Equal(t, http.StatusOK, get(h, "bob", "/login?status=200").Code, "a success did not count")
			assert.Equal(t, http.StatusUnauthorized, get(h, "carol", "/login?status=401").Code, "another account")
		})
	}
}

// The refund rule gets the response's final status: 200 when the handler
// gives none, as net/http answers.
func TestRefundGetsTheFinalStatus(t *testing.T) {
	cases := []struct {
		name    string
		handler http.HandlerFunc
		want    int
	}{
		{"writes nothing", func(http.ResponseWriter, *http.Request) {}, 200},
		{"Write without WriteHeader", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("hi")) }, 200},
		{"WriteHeader", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }, 204},
		{"informational first", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusBadGateway)
		}, 502},
		{"superfluous WriteHeader", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			w.WriteHeader(http.StatusInternalServerError)
		}, 404},
		{"Write then WriteHeader", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("hi"))
			w.WriteHeader(http.StatusInternalServerError)
		}, 200},
		{"switching protocols", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusSwitchingProtocols) }, 101},
		{"flush first", func(w http.ResponseWriter, _ *http.Request) {
			require.NoError(t, http.NewResponseController(w).Flush())
			w.WriteHeader(http.StatusInternalServerError)
		}, 200},
		{"io.Copy", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.Copy(w, strings.NewReader("body"))
		}, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			var got []int
			m, err := httplimit.NewMiddleware(newFakeBucket(10, time.Second, clock), httplimit.KeyByHeader(keyHeader),
				httplimit.WithRefund(func(_ *http.Request, status int) bool { got = append(got, status); return false }))
			require.NoError(t, err)
			get(m.Handler(tc.handler), "k", "/")
			assert.Equal(t, []int{tc.want}, got)
		})
	}
}

// io.Copy into the wrapped writer still reaches the server's ReadFrom.
func TestRefundWrapperCopiesThroughReadFrom(t *testing.T) {
	rf := &readFromRecorder{ResponseRecorder: httptest.NewRecorder()}
	clock := ratelimittest.NewClock(epoch)
	m, err := httplimit.NewMiddleware(newFakeBucket(10, time.Second, clock), httplimit.KeyByHeader(keyHeader), httplimit.WithRefund(serverErrors))
	require.NoError(t, err)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, err := io.Copy(w, struct{ io.Reader }{strings.NewReader("body")}) // no WriteTo
		assert.NoError(t, err)
	}))
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(keyHeader, "k")
	h.ServeHTTP(rf, r)
	assert.Equal(t, "body", rf.Body.String())
	assert.Equal(t, int64(4), rf.readFrom)
}

// readFromRecorder is a ResponseRecorder with a ReadFrom method that
// counts what it copies.
type readFromRecorder struct {
	*httptest.ResponseRecorder
	readFrom int64
}

func (r *readFromRecorder) ReadFrom(src io.Reader) (int64, error) {
	n, err := io.Copy(r.ResponseRecorder, src)
	r.readFrom += n
	return n, err
}

// The writer a handler gets under WithRefund keeps what the server's
// offers: http.ResponseController's methods, Flusher and Hijacker.
func TestResponseControllerThroughTheRefundWrapper(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	l := newFakeBucket(10, time.Second, clock)
	// A hijacked connection is no longer the server's: the client may have
	// its answer, and the server be closed, before the handler returns.
	// The fake says when each refund is done.
	refunded := make(chan adjustCall, 3)
	l.notify = refunded
	var statuses []int
	var mu sync.Mutex
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithRefund(func(_ *http.Request, status int) bool {
		mu.Lock()
		defer mu.Unlock()
		statuses = append(statuses, status)
		return true
	}))
	require.NoError(t, err)

	mux := http.NewServeMux()
	mux.HandleFunc("/stream", func(w http.ResponseWriter, _ *http.Request) {
		rc := http.NewResponseController(w)
		assert.NoError(t, rc.SetWriteDeadline(time.Now().Add(time.Minute)))
		assert.NoError(t, rc.SetReadDeadline(time.Now().Add(time.Minute)))
		assert.NoError(t, rc.EnableFullDuplex())
		w.WriteHeader(http.StatusAccepted)
		_, _ = io.WriteString(w, "part 1\n")
		assert.NoError(t, rc.Flush())
		f, ok := w.(http.Flusher)
		if assert.True(t, ok, "http.Flusher") {
			f.Flush()
		}
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, _ *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !assert.True(t, ok, "http.Hijacker") {
			return
		}
		conn, buf, err := hj.Hijack()
		if !assert.NoError(t, err) {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
		assert.NoError(t, buf.Flush())
	})
	mux.HandleFunc("/hijack-rc", func(w http.ResponseWriter, _ *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if !assert.NoError(t, err) {
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nrc")
		assert.NoError(t, buf.Flush())
	})
	srv := httptest.NewServer(m.Handler(mux))
	defer srv.Close()

	send := func(path string) (int, string) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set(keyHeader, "k")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := send("/stream")
	assert.Equal(t, http.StatusAccepted, code)
	assert.Equal(t, "part 1\n", body)
	code, body = send("/hijack")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "hijacked", body)
	code, body = send("/hijack-rc")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "rc", body)

	for range 3 {
		assert.Equal(t, "Refund", (<-refunded).method)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{202, 200, 200}, statuses)
}

// A writer that cannot hijack (HTTP/2, or a recorder) is not made to look
// as if it could.
func TestRefundWrapperHijacksOnlyWhenTheServerCan(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	m, err := httplimit.NewMiddleware(newFakeBucket(10, time.Second, clock), httplimit.KeyByHeader(keyHeader), httplimit.WithRefund(serverErrors))
	require.NoError(t, err)
	var isHijacker bool
	var hijackErr, flushErr error
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, isHijacker = w.(http.Hijacker)
		_, _, hijackErr = http.NewResponseController(w).Hijack()
		flushErr = http.NewResponseController(w).Flush()
	}))
	w := get(h, "k", "/")
	assert.False(t, isHijacker)
	assert.ErrorIs(t, hijackErr, http.ErrNotSupported)
	assert.NoError(t, flushErr)
	assert.True(t, w.Flushed)

	// A writer that cannot flush either: the error says so.
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(keyHeader, "k")
	h.ServeHTTP(plainWriter{httptest.NewRecorder()}, r)
	assert.ErrorIs(t, flushErr, http.ErrNotSupported)
}

// plainWriter has only the three methods of http.ResponseWriter.
type plainWriter struct{ rec *httptest.ResponseRecorder }

func (p plainWriter) Header() http.Header         { return p.rec.Header() }
func (p plainWriter) Write(b []byte) (int, error) { return p.rec.Write(b) }
func (p plainWriter) WriteHeader(code int)        { p.rec.WriteHeader(code) }

// Without WithRefund the handler gets the server's writer itself.
func TestNoWrapperWithoutRefund(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	for _, opts := range [][]httplimit.Option{nil, {httplimit.WithSettle()}} {
		m, err := httplimit.NewMiddleware(newFakeBucket(10, time.Second, clock), httplimit.KeyByHeader(keyHeader), opts...)
		require.NoError(t, err)
		rec := httptest.NewRecorder()
		var got http.ResponseWriter
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { got = w }))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set(keyHeader, "k")
		h.ServeHTTP(rec, r)
		assert.Same(t, rec, got)
	}
}

// A handler that reports more than the request took puts the key in debt:
// later requests are denied until it is paid.
func TestSetCostSettlesMore(t *testing.T) {
	for _, kind := range adjustables {
		t.Run(kind.name, func(t *testing.T) {
			l, clock := kind.new(t, 10, 500*time.Millisecond) // 2 a second
			h, next := adjusting(t, l, httplimit.WithSettle())

			w := get(h, "alice", "/?cost=14")
			assert.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, allowedRL(kind.foreign, `"default";r=9;t=1`), w.Header().Get("RateLimit"), "set before the handler ran")
			assert.True(t, next.recorded.Load())

			// 4 in debt: 5 units, 2.5 s, until one request can pass.
			w = get(h, "alice", "/")
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "3", w.Header().Get("Retry-After"))
			assert.Equal(t, `"default";r=0;t=3`, w.Header().Get("RateLimit"))

			clock.Advance(2499 * time.Millisecond)
			w = get(h, "alice", "/")
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "1", w.Header().Get("Retry-After"))

			clock.Advance(time.Millisecond)
			w = get(h, "alice", "/")
			assert.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, "0", w.Header().Get("RateLimit-Remaining"))
			assert.Equal(t, int64(2), next.calls.Load())

			if calls, ok := fakeCalls(l); ok {
				require.Len(t, calls, 1)
				assert.Equal(t, adjustCall{method: "Settle", key: "alice", taken: 1, cost: 14, opts: 2, deadline: true, timeout: calls[0].timeout}, calls[0])
			}
		})
	}
}

// A handler that reports less than the request took gives the difference
// back.
func TestSetCostSettlesLess(t *testing.T) {
	for _, kind := range adjustables {
		t.Run(kind.name, func(t *testing.T) {
			l, _ := kind.new(t, 10, 500*time.Millisecond)
			h, _ := adjusting(t, l, httplimit.WithSettle(), httplimit.WithCost(func(*http.Request) (int, error) { return 5, nil }))

			w := get(h, "alice", "/?cost=2")
			assert.Equal(t, allowedRL(kind.foreign, `"default";r=5;t=1`), w.Header().Get("RateLimit"))
			w = get(h, "alice", "/?cost=0")
			assert.Equal(t, allowedRL(kind.foreign, `"default";r=3;t=1`), w.Header().Get("RateLimit"), "2 used, then 5 more taken")
			assert.Equal(t, "4", w.Header().Get("RateLimit-Reset"), "7 to refill, 3.5 s")
			w = get(h, "alice", "/")
			assert.Equal(t, allowedRL(kind.foreign, `"default";r=3;t=1`), w.Header().Get("RateLimit"), "the last 5 were given back")
			w = get(h, "alice", "/")
			assert.Equal(t, http.StatusTooManyRequests, w.Code, "the estimate is taken before the handler reports")

			if calls, ok := fakeCalls(l); ok {
				require.Len(t, calls, 2)
				assert.Equal(t, [2]int{5, 2}, [2]int{calls[0].taken, calls[0].cost})
				assert.Equal(t, [2]int{5, 0}, [2]int{calls[1].taken, calls[1].cost})
			}
		})
	}
}

func TestSetCostRules(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)

	t.Run("without WithSettle", func(t *testing.T) {
		l := newFakeBucket(10, time.Second, clock)
		h, next := adjusting(t, l)
		get(h, "k", "/?cost=3")
		assert.False(t, next.recorded.Load())
		assert.Empty(t, l.calls())
	})
	t.Run("outside a request", func(t *testing.T) {
		assert.False(t, httplimit.SetCost(context.Background(), 1))
		var none context.Context
		assert.False(t, httplimit.SetCost(none, 1), "a nil context")
	})
	t.Run("negative", func(t *testing.T) {
		l := newFakeBucket(10, time.Second, clock)
		h, next := adjusting(t, l, httplimit.WithSettle())
		get(h, "k", "/?cost=-1")
		assert.False(t, next.recorded.Load())
		assert.Empty(t, l.calls())
	})
	t.Run("the cost taken", func(t *testing.T) {
		l := newFakeBucket(10, time.Second, clock)
		h, next := adjusting(t, l, httplimit.WithSettle())
		get(h, "k", "/?cost=1")
		assert.True(t, next.recorded.Load())
		assert.Empty(t, l.calls(), "nothing to settle")
	})
	t.Run("the last counts, from any goroutine", func(t *testing.T) {
		l := newFakeBucket(10, time.Second, clock)
		m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithSettle())
		require.NoError(t, err)
		h := m.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancel(r.Context()) // a derived context finds it too
			defer cancel()
			assert.True(t, httplimit.SetCost(ctx, 3))
			var wg sync.WaitGroup
			wg.Go(func() { assert.True(t, httplimit.SetCost(ctx, 7)) })
			wg.Wait()
		}))
		get(h, "k", "/")
		calls := l.calls()
		require.Len(t, calls, 1)
		assert.Equal(t, 7, calls[0].cost)
	})
	t.Run("too late", func(t *testing.T) {
		l := newFakeBucket(10, time.Second, clock)
		m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithSettle())
		require.NoError(t, err)
		var kept context.Context
		h := m.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { kept = r.Context() }))
		get(h, "k", "/")
		assert.False(t, httplimit.SetCost(kept, 5))
		assert.Empty(t, l.calls())
	})
	t.Run("request context values and cancellation", func(t *testing.T) {
		l := newFakeBucket(10, time.Second, clock)
		m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithSettle())
		require.NoError(t, err)
		type ctxKey struct{}
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "v"))
		h := m.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			assert.Equal(t, "v", r.Context().Value(ctxKey{}))
			assert.NoError(t, r.Context().Err())
			cancel() // the client goes away
			<-r.Context().Done()
			assert.ErrorIs(t, r.Context().Err(), context.Canceled)
			assert.True(t, httplimit.SetCost(r.Context(), 4))
		}))
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		r.Header.Set(keyHeader, "k")
		h.ServeHTTP(httptest.NewRecorder(), r)
		calls := l.calls()
		require.Len(t, calls, 1)
		assert.NoError(t, calls[0].ctxErr, "the adjustment does not inherit the cancellation")
		assert.True(t, calls[0].deadline)
		assert.Greater(t, calls[0].timeout, time.Duration(0))
		assert.LessOrEqual(t, calls[0].timeout, httplimit.DefaultAdjustTimeout)
	})
}

func TestAdjustTimeout(t *testing.T) {
	l := newFakeBucket(10, time.Second, ratelimittest.NewClock(epoch))
	h, _ := adjusting(t, l, httplimit.WithRefund(serverErrors), httplimit.WithAdjustTimeout(time.Minute))
	get(h, "k", "/?status=500")
	calls := l.calls()
	require.Len(t, calls, 1)
	assert.Greater(t, calls[0].timeout, httplimit.DefaultAdjustTimeout)
	assert.LessOrEqual(t, calls[0].timeout, time.Minute)
}

// A refund wins over a reported cost: the response does not count at all.
func TestRefundWinsOverSetCost(t *testing.T) {
	l := newFakeBucket(10, time.Second, ratelimittest.NewClock(epoch))
	h, next := adjusting(t, l, httplimit.WithRefund(serverErrors), httplimit.WithSettle())
	get(h, "k", "/?cost=5&status=500")
	assert.True(t, next.recorded.Load())
	calls := l.calls()
	require.Len(t, calls, 1)
	assert.Equal(t, "Refund", calls[0].method)
	assert.Equal(t, 1, calls[0].taken)

	get(h, "k", "/?cost=5&status=200")
	calls = l.calls()
	require.Len(t, calls, 2)
	assert.Equal(t, "Settle", calls[1].method)
	assert.Equal(t, 5, calls[1].cost)
}

// A request of cost 0 took 1 to run, which it gives back after its
// handler: refunded by the refund rule, or else settled at its cost, 0.
func TestACostOfZeroIsGivenBackAfterItsHandler(t *testing.T) {
	l := newFakeBucket(10, time.Second, ratelimittest.NewClock(epoch))
	h, _ := adjusting(t, l, httplimit.WithRefund(serverErrors), httplimit.WithCost(func(*http.Request) (int, error) { return 0, nil }))
	get(h, "k", "/?status=500")
	get(h, "k", "/?status=200")
	assert.Equal(t, []adjustCall{
		{method: "Refund", key: "k", taken: 1, opts: 2, deadline: true},
		{method: "Settle", key: "k", taken: 1, cost: 0, opts: 2, deadline: true},
	}, withoutTimeouts(l.calls()))
}

// Nested middlewares built WithSettle each settle the reported cost on
// their own limiter.
func TestSetCostReachesNestedMiddlewares(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	outerLimiter, innerLimiter := newFakeBucket(100, time.Second, clock), newFakeBucket(10, time.Second, clock)
	outer, err := httplimit.NewMiddleware(outerLimiter, httplimit.KeyByHeader(keyHeader), httplimit.WithSettle())
	require.NoError(t, err)
	inner, err := httplimit.NewMiddleware(innerLimiter, httplimit.KeyByHeader(keyHeader), httplimit.WithSettle(),
		httplimit.WithCost(func(*http.Request) (int, error) { return 2, nil }))
	require.NoError(t, err)
	next := &statusHandler{}
	h := outer.Handler(inner.Handler(next))
	get(h, "k", "/?cost=6")
	assert.True(t, next.recorded.Load())
	assert.Equal(t, []adjustCall{{method: "Settle", key: "k", taken: 1, cost: 6, opts: 2, deadline: true}}, withoutTimeouts(outerLimiter.calls()))
	assert.Equal(t, []adjustCall{{method: "Settle", key: "k", taken: 2, cost: 6, opts: 2, deadline: true}}, withoutTimeouts(innerLimiter.calls()))
}

// withoutTimeouts returns calls with their timeouts zeroed, to compare.
func withoutTimeouts(calls []adjustCall) []adjustCall {
	for i := range calls {
		calls[i].timeout = 0
	}
	return calls
}

// Requests that took nothing are never adjusted: denied, failed open,
// above the limit, skipped.
func TestNoAdjustmentWithoutAnAllowedRequest(t *testing.T) {
	opts := func(extra ...httplimit.Option) []httplimit.Option {
		return append([]httplimit.Option{httplimit.WithRefund(serverErrors), httplimit.WithSettle()}, extra...)
	}

	t.Run("denied", func(t *testing.T) {
		l := newFakeBucket(1, time.Minute, ratelimittest.NewClock(epoch))
		h, next := adjusting(t, l, opts()...)
		require.Equal(t, http.StatusOK, get(h, "k", "/").Code)
		w := get(h, "k", "/?status=500&cost=0")
		assert.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, int64(1), next.calls.Load())
		assert.Empty(t, l.calls())
	})
	t.Run("limiter error", func(t *testing.T) {
		l := newFakeBucket(1, time.Minute, ratelimittest.NewClock(epoch))
		l.allowErr = errBackend
		var log errorLog
		h, next := adjusting(t, l, opts(httplimit.WithOnError(log.hook))...)
		w := get(h, "k", "/?status=500&cost=0")
		assert.Equal(t, http.StatusInternalServerError, w.Code, "failed open: the handler answered")
		assert.Equal(t, int64(1), next.calls.Load())
		assert.False(t, next.recorded.Load(), "no cost slot")
		assert.Empty(t, l.calls())
		require.Len(t, log.errs, 1)
		assert.NotErrorIs(t, log.errs[0], httplimit.ErrAdjustment)
	})
	t.Run("cost above the limit", func(t *testing.T) {
		l := newFakeBucket(1, time.Minute, ratelimittest.NewClock(epoch))
		h, next := adjusting(t, l, opts(httplimit.WithCost(func(*http.Request) (int, error) { return 2, nil }))...)
		assert.Equal(t, http.StatusRequestEntityTooLarge, get(h, "k", "/?status=500").Code)
		assert.Equal(t, int64(0), next.calls.Load())
		assert.Empty(t, l.calls())
	})
	t.Run("skipped", func(t *testing.T) {
		l := newFakeBucket(1, time.Minute, ratelimittest.NewClock(epoch))
		h, next := adjusting(t, l, opts(httplimit.WithSkip(func(*http.Request) bool { return true }))...)
		assert.Equal(t, http.StatusInternalServerError, get(h, "k", "/?status=500&cost=0").Code)
		assert.False(t, next.recorded.Load())
		assert.Empty(t, l.calls())
	})
}

// A failed adjustment goes to the error hook; the response is unchanged.
func TestAdjustmentErrorsGoToTheHook(t *testing.T) {
	l := newFakeBucket(10, time.Second, ratelimittest.NewClock(epoch))
	l.adjustErr = errBackend
	var log errorLog
	h, next := adjusting(t, l, httplimit.WithRefund(serverErrors), httplimit.WithSettle(), httplimit.WithOnError(log.hook))

	w := get(h, "alice", "/?status=502")
	assert.Equal(t, http.StatusBadGateway, w.Code)
	w = get(h, "bob", "/?cost=3")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, int64(2), next.calls.Load())

	require.Len(t, log.errs, 2)
	for _, err := range log.errs {
		assert.ErrorIs(t, err, httplimit.ErrAdjustment)
		assert.ErrorIs(t, err, errBackend)
	}
	assert.Equal(t, "httplimit: adjusting the units of a served request failed: Refund of 1: redis: connection refused", log.errs[0].Error())
	assert.Equal(t, "httplimit: adjusting the units of a served request failed: Settle of 1 at cost 3: redis: connection refused", log.errs[1].Error())
	assert.Equal(t, []string{"alice", "bob"}, log.keys)

	// Without a hook, nothing happens.
	h, _ = adjusting(t, l, httplimit.WithRefund(serverErrors))
	assert.Equal(t, http.StatusBadGateway, get(h, "alice", "/?status=502").Code)
}

// A handler that panics is not adjusted; the panic goes on up.
func TestNoAdjustmentWhenTheHandlerPanics(t *testing.T) {
	l := newFakeBucket(10, time.Second, ratelimittest.NewClock(epoch))
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithRefund(serverErrors), httplimit.WithSettle())
	require.NoError(t, err)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httplimit.SetCost(r.Context(), 5)
		w.WriteHeader(http.StatusInternalServerError)
		panic(http.ErrAbortHandler)
	}))
	assert.PanicsWithValue(t, http.ErrAbortHandler, func() { get(h, "k", "/") })
	assert.Empty(t, l.calls())
}

func TestRefundAndSettleNeedAnAdjuster(t *testing.T) {
	key := httplimit.KeyByHeader(keyHeader)
	cases := []struct {
		name string
		opts []httplimit.Option
		want string
	}{
		{"WithRefund", []httplimit.Option{httplimit.WithRefund(serverErrors)}, "httplimit: WithRefund needs a limiter that can give units back, a ratelimit.Adjuster; *httplimit_test.stubLimiter is not one"},
		{"WithSettle", []httplimit.Option{httplimit.WithSettle()}, "httplimit: WithSettle needs a limiter that can give units back, a ratelimit.Adjuster; *httplimit_test.stubLimiter is not one"},
		{"nil refund", []httplimit.Option{httplimit.WithRefund(nil)}, "WithRefund: nil func"},
		{"zero timeout", []httplimit.Option{httplimit.WithAdjustTimeout(0)}, "WithAdjustTimeout: 0s must be > 0"},
		{"negative timeout", []httplimit.Option{httplimit.WithAdjustTimeout(-time.Second)}, "WithAdjustTimeout: -1s must be > 0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := httplimit.NewMiddleware(&stubLimiter{}, key, tc.opts...)
			require.Error(t, err)
			assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, m)
		})
	}
}

// A refund on a limiter of several policies gives the units back to every
// one.
func TestCompositeRefund(t *testing.T) {
	for _, kind := range composites {
		t.Run(kind.name, func(t *testing.T) {
			l, _ := kind.new(t)
			h, next := adjusting(t, l, httplimit.WithRefund(serverErrors), httplimit.WithSettle())
			first := `"per-second";r=1;t=1, "per-minute";r=2;t=20`
			if kind.foreign {
				first = withoutT(first)
			}
			for i := range 4 {
				w := get(h, "alice", "/?status=500")
				require.Equal(t, http.StatusInternalServerError, w.Code, "request %d", i)
				assert.Equal(t, first, w.Header().Get("RateLimit"), "request %d", i)
			}
			w := get(h, "alice", "/?cost=2")
			assert.Equal(t, first, w.Header().Get("RateLimit"))
			// per-second: 0 left; per-minute: 1 left after 2.
			w = get(h, "alice", "/")
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, `"per-second";r=0;t=1`, w.Header().Get("RateLimit"))
			assert.Equal(t, int64(5), next.calls.Load())
		})
	}
}

// A refund goes only to the window that counted the request: a request
// that outlives its window gives nothing back to the next one. The time of
// the decision is read from the limiter's clock (WithClock).
func TestRefundReachesOnlyTheWindowThatCounted(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	window, err := ratelimit.NewFixedWindow(2, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	m, err := httplimit.NewMiddleware(window, httplimit.KeyByHeader(keyHeader), httplimit.WithRefund(serverErrors), httplimit.WithClock(clock))
	require.NoError(t, err)
	var h http.Handler
	h = m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			clock.Advance(61 * time.Second) // the window that counted this request ends
			inner := get(h, "k", "/ok")     // and another opens, counting 1
			assert.Equal(t, `"default";r=1;t=60`, inner.Header().Get("RateLimit"))
			w.WriteHeader(http.StatusInternalServerError)
		case "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))

	assert.Equal(t, `"default";r=1;t=60`, get(h, "k", "/slow").Header().Get("RateLimit"))
	w := get(h, "k", "/fail")
	assert.Equal(t, `"default";r=0;t=60`, w.Header().Get("RateLimit"), "the slow request's refund did not reach the new window")
	// Within one window, refunds land.
	for range 3 {
		w = get(h, "k", "/fail")
		assert.Equal(t, `"default";r=0;t=60`, w.Header().Get("RateLimit"))
	}
	assert.Equal(t, `"default";r=0;t=60`, get(h, "k", "/ok").Header().Get("RateLimit"))
	assert.Equal(t, http.StatusTooManyRequests, get(h, "k", "/ok").Code)
}

func TestWithClockRejectsNil(t *testing.T) {
	for _, c := range []ratelimit.Clock{nil, (*ratelimittest.Clock)(nil)} {
		_, err := httplimit.NewMiddleware(&stubLimiter{}, httplimit.KeyByHeader(keyHeader), httplimit.WithClock(c))
		require.Error(t, err)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "WithClock: nil clock")
	}
}
