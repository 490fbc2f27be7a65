package httplimit_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// observation is one call of an Observer.
type observation struct {
	pattern string
	allowed bool
	err     error
}

// The observer sees each decided request once, with the request (its
// route) and the Decision: allowed, denied, and a limiter error that
// failed open; never a skipped request.
func TestObserverSeesEachDecidedRequest(t *testing.T) {
	l, err := ratelimit.NewGCRA(1, time.Minute)
	require.NoError(t, err)
	var seen []observation
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader),
		httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }),
		httplimit.WithObserver(func(r *http.Request, d ratelimit.Decision, err error) {
			seen = append(seen, observation{r.Pattern, d.Allowed, err})
		}))
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", m.Handler(&counter{}))
	mux.Handle("GET /healthz", m.Handler(&counter{}))
	for _, path := range []string{"/items/1", "/items/2", "/healthz"} {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.Header.Set(keyHeader, "k")
		mux.ServeHTTP(httptest.NewRecorder(), r)
	}
	assert.Equal(t, []observation{
		{"GET /items/{id}", true, nil},
		{"GET /items/{id}", false, nil},
	}, seen)
}

// A limiter error reaches the observer with the Decision the limiter gave,
// whether the request then fails open or is answered 503.
func TestObserverSeesLimiterErrors(t *testing.T) {
	down := fmt.Errorf("%w: connection refused", ratelimit.ErrBackend)
	for _, closed := range []bool{false, true} {
		stub := &stubLimiter{err: down}
		var seen []error
		opts := []httplimit.Option{
			httplimit.WithOnError(func(*http.Request, error) {}),
			httplimit.WithObserver(func(_ *http.Request, _ ratelimit.Decision, err error) { seen = append(seen, err) }),
		}
		if closed {
			opts = append(opts, httplimit.WithFailClosed(0))
		}
		m, err := httplimit.NewMiddleware(stub, httplimit.KeyByHeader(keyHeader), opts...)
		require.NoError(t, err)
		w := do(m.Handler(&counter{}), "k", "")
		if closed {
			assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		} else {
			assert.Equal(t, http.StatusOK, w.Code)
		}
		require.Len(t, seen, 1)
		assert.ErrorIs(t, seen[0], ratelimit.ErrBackend)
	}
}

// Without an observer, a decided request allocates no more than with the
// observer's check in place: nothing is built for an observer that is not
// there.
func TestNoObserverAllocatesNothing(t *testing.T) {
	l, err := ratelimit.NewGCRA(1000000, time.Second)
	require.NoError(t, err)
	count := func(opts ...httplimit.Option) float64 {
		m, err := httplimit.NewMiddleware(l, func(*http.Request) (string, error) { return "k", nil }, opts...)
		require.NoError(t, err)
		h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		w := &discardWriter{h: http.Header{}}
		return testing.AllocsPerRun(200, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
	}
	without := count()
	with := count(httplimit.WithObserver(func(*http.Request, ratelimit.Decision, error) {}))
	assert.Equal(t, with, without)
}

// discardWriter is an http.ResponseWriter that keeps nothing but its
// header.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// Without WithOnError, a limiter error is logged at Warn with the error,
// method and route (the ServeMux pattern; see ExampleWithLogger), never the
// key; the lines are at most one per 10 s,
// the next one counting those suppressed. WithOnError replaces the log.
func TestLimiterErrorsAreLoggedOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	clock := ratelimittest.NewClock(epoch)
	stub := &stubLimiter{err: fmt.Errorf("%w: connection refused", ratelimit.ErrBackend)}
	m, err := httplimit.NewMiddleware(stub, httplimit.KeyByHeader(keyHeader), httplimit.WithLogger(logger), httplimit.WithClock(clock))
	require.NoError(t, err)
	h := m.Handler(&counter{})
	for range 5 {
		assert.Equal(t, http.StatusOK, do(h, "secret-api-key", "").Code, "fails open")
		clock.Advance(time.Second)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 1)
	assert.Contains(t, lines[0], "level=WARN")
	assert.Contains(t, lines[0], `msg="httplimit: rate limiter error"`)
	assert.Contains(t, lines[0], "connection refused")
	assert.Contains(t, lines[0], "method=GET")
	assert.NotContains(t, lines[0], "route=", "no ServeMux pattern matched: the path, which the client chooses, is not logged")
	assert.NotContains(t, lines[0], "suppressed")
	clock.Advance(5 * time.Second) // 10 s after the first line
	do(h, "secret-api-key", "")
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	assert.Contains(t, lines[1], "suppressed=4")
	assert.NotContains(t, buf.String(), "secret-api-key")

	// A method the client made up is not logged as sent.
	buf.Reset()
	clock.Advance(10 * time.Second)
	r := httptest.NewRequest("X-INJECTED-BY-CLIENT", "/", nil)
	r.Header.Set(keyHeader, "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	assert.Contains(t, buf.String(), "method=other")
	assert.NotContains(t, buf.String(), "X-INJECTED")

	buf.Reset()
	var hooked []error
	m, err = httplimit.NewMiddleware(stub, httplimit.KeyByHeader(keyHeader), httplimit.WithLogger(logger),
		httplimit.WithOnError(func(_ *http.Request, err error) { hooked = append(hooked, err) }))
	require.NoError(t, err)
	do(m.Handler(&counter{}), "k", "")
	assert.Empty(t, buf.String(), "WithOnError replaces the log")
	assert.Len(t, hooked, 1)
}

// The default log goes to slog.Default(), read when a line is written.
func TestLimiterErrorsGoToTheDefaultLogger(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	t.Cleanup(func() { slog.SetDefault(old) })
	m, err := httplimit.NewMiddleware(&stubLimiter{err: errors.New("other package's limiter failed")}, httplimit.KeyByHeader(keyHeader))
	require.NoError(t, err)
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	assert.Equal(t, http.StatusOK, do(m.Handler(&counter{}), "k", "").Code)
	assert.Contains(t, buf.String(), "other package's limiter failed")
}

// WithObserver and WithLogger refuse nil.
func TestObserverAndLoggerRefuseNil(t *testing.T) {
	for _, opt := range []httplimit.Option{httplimit.WithObserver(nil), httplimit.WithLogger(nil)} {
		_, err := httplimit.NewMiddleware(&stubLimiter{}, httplimit.KeyByHeader(keyHeader), opt)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	}
}
