package httplimit_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// errBackend stands for a Redis outage.
var errBackend = errors.New("redis: connection refused")

// errorLog collects what an OnError hook is given.
type errorLog struct {
	mu   sync.Mutex
	errs []error
	keys []string
}

func (l *errorLog) hook(r *http.Request, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
	l.keys = append(l.keys, r.Header.Get(keyHeader))
}

func TestLimiterErrorFailsOpen(t *testing.T) {
	stub := &stubLimiter{err: fmt.Errorf("ratelimit: Redis token bucket %q: %w", "k", errBackend)}
	var log errorLog
	h, next := limited(t, stub, httplimit.WithOnError(log.hook))

	w := do(h, "k", "")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, "ok", w.Body.String())
	assert.Empty(t, fields(w.Header()), "nothing is known about the key")
	assert.Equal(t, int64(1), next.calls.Load())
	require.Len(t, log.errs, 1)
	assert.ErrorIs(t, log.errs[0], errBackend)
	assert.Equal(t, []string{"k"}, log.keys)
}

func TestLimiterErrorFailsOpenWithoutHook(t *testing.T) {
	h, next := limited(t, &stubLimiter{err: errBackend})
	w := do(h, "k", "")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, int64(1), next.calls.Load())
}

func TestLimiterErrorFailsClosed(t *testing.T) {
	cases := []struct {
		retry time.Duration
		want  string
	}{
		{0, "1"},
		{time.Second, "1"},
		{2500 * time.Millisecond, "3"},
		{time.Minute, "60"},
	}
	for _, tc := range cases {
		t.Run(tc.retry.String(), func(t *testing.T) {
			var log errorLog
			h, next := limited(t, &stubLimiter{err: errBackend}, httplimit.WithFailClosed(tc.retry), httplimit.WithOnError(log.hook))

			w := do(h, "k", "")
			assert.Equal(t, http.StatusServiceUnavailable, w.Code)
			assert.Equal(t, map[string][]string{"Retry-After": {tc.want}}, fields(w.Header()))
			assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			var doc problemDoc
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
			// The draft's type registered for 503 (section 5.2).
			assert.Equal(t, httplimit.TemporaryReducedCapacityType, doc.Type)
			assert.Equal(t, "Temporary Reduced Capacity", doc.Title)
			assert.Equal(t, 503, doc.Status)

			w = do(h, "k", "text/plain")
			assert.Equal(t, http.StatusServiceUnavailable, w.Code)
			assert.Equal(t, "Temporary Reduced Capacity: Rate limiting is unavailable; retry after the number of seconds in Retry-After.\n", w.Body.String())

			assert.Equal(t, int64(0), next.calls.Load())
			assert.Len(t, log.errs, 2)
		})
	}
}

func TestMissingKeyIs400AndSkipsTheLimiter(t *testing.T) {
	stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 1, Remaining: 1}}
	h, next := limited(t, stub)

	w := do(h, "", "") // no X-Api-Key
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Empty(t, fields(w.Header()))
	var doc problemDoc
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
	assert.Equal(t, problemDoc{Type: "about:blank", Title: "Bad Request", Status: 400, Detail: "The request does not carry what its rate limit is keyed by."}, doc)

	w = do(h, "", "text/plain")
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.Equal(t, "Bad Request: The request does not carry what its rate limit is keyed by.\n", w.Body.String())

	assert.Equal(t, 0, stub.callCount())
	assert.Equal(t, int64(0), next.calls.Load())
}

func TestKeyErrorHandler(t *testing.T) {
	stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 1, Remaining: 1}}
	var got error
	h, next := limited(t, stub, httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
		got = err
		http.Error(w, "missing API key", http.StatusUnauthorized)
	}))

	w := do(h, "", "")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, "missing API key\n", w.Body.String())
	assert.ErrorIs(t, got, httplimit.ErrNoKey)
	assert.Equal(t, 0, stub.callCount())
	assert.Equal(t, int64(0), next.calls.Load())
}

func TestCostErrorsGoToTheKeyErrorHandler(t *testing.T) {
	errCost := errors.New("bad batch size")
	cases := []struct {
		name   string
		cost   httplimit.CostFunc
		want   error
		status int
	}{
		{"error", func(*http.Request) (int, error) { return 0, errCost }, errCost, http.StatusInternalServerError},
		{"negative", func(*http.Request) (int, error) { return -1, nil }, ratelimit.ErrInvalidCost, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 1, Remaining: 1}}
			h, _ := limited(t, stub, httplimit.WithCost(tc.cost))
			w := do(h, "k", "")
			assert.Equal(t, tc.status, w.Code)

			var got error
			h, _ = limited(t, stub, httplimit.WithCost(tc.cost), httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
				got = err
				w.WriteHeader(http.StatusBadRequest)
			}))
			w = do(h, "k", "")
			assert.Equal(t, http.StatusBadRequest, w.Code)
			assert.ErrorIs(t, got, tc.want)
			assert.Equal(t, 0, stub.callCount())
		})
	}
}

// A failure of the limiter's backend fails open (WithFailClosed: 503 of
// type temporary-reduced-capacity); any other limiter error leaves the
// request's limit unknown, so it answers 503 (about:blank) with
// Retry-After unless WithPolicyErrorsPass lets it through. The hook gets
// every error.
func TestLimiterErrorsByClass(t *testing.T) {
	errs := []struct {
		name    string
		err     error
		backend bool
	}{
		{"ErrBackend", fmt.Errorf("ratelimit: Redis: %w: %w", ratelimit.ErrBackend, errBackend), true},
		{"of another package", errBackend, true},
		{"ErrPolicy", fmt.Errorf("ratelimit: %w: plans: %w", ratelimit.ErrPolicy, errBackend), false},
		{"ErrInvalidConfig", fmt.Errorf("ratelimit: %w", ratelimit.ErrInvalidConfig), false},
		{"ErrKeysApart", fmt.Errorf("ratelimit: %w", ratelimit.ErrKeysApart), false},
		{"ErrCorruptState", fmt.Errorf("ratelimit: %w", ratelimit.ErrCorruptState), false},
	}
	modes := []struct {
		name string
		opts []httplimit.Option
		// passes reports whether an error of the backend or not passes.
		passes func(backend bool) bool
		retry  string
	}{
		{"default", nil, func(backend bool) bool { return backend }, "1"},
		{"WithPolicyErrorsPass", []httplimit.Option{httplimit.WithPolicyErrorsPass()}, func(bool) bool { return true }, ""},
		{"WithFailClosed", []httplimit.Option{httplimit.WithFailClosed(2 * time.Second)}, func(bool) bool { return false }, "2"},
		{"both", []httplimit.Option{httplimit.WithPolicyErrorsPass(), httplimit.WithFailClosed(2 * time.Second)}, func(bool) bool { return false }, "2"},
	}
	for _, e := range errs {
		for _, mode := range modes {
			t.Run(e.name+"/"+mode.name, func(t *testing.T) {
				var log errorLog
				stub := &stubLimiter{res: ratelimit.Result{Limit: 5}, err: e.err}
				h, next := limited(t, stub, append(mode.opts, httplimit.WithOnError(log.hook))...)
				w := do(h, "k", "")
				require.Len(t, log.errs, 1)
				assert.ErrorIs(t, log.errs[0], e.err)
				if mode.passes(e.backend) {
					assert.Equal(t, http.StatusOK, w.Code)
					assert.Empty(t, fields(w.Header()))
					assert.Equal(t, int64(1), next.calls.Load())
					return
				}
				assert.Equal(t, http.StatusServiceUnavailable, w.Code)
				assert.Equal(t, map[string][]string{"Retry-After": {mode.retry}}, fields(w.Header()))
				assert.Equal(t, int64(0), next.calls.Load())
				// A backend that failed is a temporary reduction of capacity
				// (the draft's type registered for 503); a limit that is not
				// known is not.
				var doc problemDoc
				require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
				if e.backend {
					assert.Equal(t, httplimit.TemporaryReducedCapacityType, doc.Type)
				} else {
					assert.Equal(t, problemDoc{Type: "about:blank", Title: "Service Unavailable", Status: 503,
						Detail: "The request's rate limit cannot be determined; retry after the number of seconds in Retry-After."}, doc)
				}
			})
		}
	}
}
