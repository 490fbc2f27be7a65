package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// Every class of KeyFunc and CostFunc error has a status of its own, with a
// problem document: a request without its credential is 401 with the
// challenge its KeyFunc names (400 when it names none, since a 401 must
// carry one), the client's other mistakes (a malformed credential, a
// request without its key header, a cost that is not valid) are 400, the server's (its KeyFunc or CostFunc failing, its
// set-up) 500. The limiter is never asked.
func TestKeyAndCostErrorStatusByClass(t *testing.T) {
	errLookup := errors.New("user store down")
	constant := func(n int, err error) httplimit.CostFunc {
		return func(*http.Request) (int, error) { return n, err }
	}
	failing := func(err error) httplimit.KeyFunc {
		return func(*http.Request) (string, error) { return "", err }
	}
	auth := func(v ...string) func(*http.Request) {
		return func(r *http.Request) { r.Header["Authorization"] = v }
	}
	withValue := func(v any) func(*http.Request) {
		return func(r *http.Request) { *r = *r.WithContext(context.WithValue(r.Context(), ctxKey{}, v)) }
	}
	const (
		unauthorized = "Unauthorized"
		badRequest   = "Bad Request"
		serverError  = "Internal Server Error"
	)
	cases := []struct {
		name      string
		key       httplimit.KeyFunc
		cost      httplimit.CostFunc
		request   func(*http.Request)
		status    int
		title     string
		challenge string
	}{
		{"KeyByBearer, no Authorization", httplimit.KeyByBearer(), nil, nil, 401, unauthorized, "Bearer"},
		{"KeyByBearer, another scheme", httplimit.KeyByBearer(), nil, auth("Basic dXNlcjpwYXNz"), 401, unauthorized, "Bearer"},
		{"KeyByBearer, no token", httplimit.KeyByBearer(), nil, auth("Bearer"), 400, badRequest, `Bearer error="invalid_request"`},
		{"KeyByBearer, token not a b64token", httplimit.KeyByBearer(), nil, auth("Bearer a b"), 400, badRequest, `Bearer error="invalid_request"`},
		{"KeyByBearer, two Authorization lines", httplimit.KeyByBearer(), nil, auth("Bearer a", "Bearer b"), 400, badRequest, `Bearer error="invalid_request"`},
		{"KeyByHeader, header missing", httplimit.KeyByHeader("X-Other"), nil, nil, 400, badRequest, ""},
		{"KeyByHeader, invalid field name", httplimit.KeyByHeader("X Api Key"), nil, nil, 500, serverError, ""},
		{"KeyByContext, no value", httplimit.KeyByContext(ctxKey{}), nil, nil, 400, badRequest, ""},
		{"KeyByContext, empty value", httplimit.KeyByContext(ctxKey{}), nil, withValue(""), 400, badRequest, ""},
		{"KeyByContext, value of another type", httplimit.KeyByContext(ctxKey{}), nil, withValue(42), 500, serverError, ""},
		{"KeyByIP, RemoteAddr not an address", mustKeyByIP(t), nil, func(r *http.Request) { r.RemoteAddr = "@unix" }, 500, serverError, ""},
		{"KeyFunc's own error", failing(errLookup), nil, nil, 500, serverError, ""},
		{"KeyFunc's error of class ErrMissingCredential", failing(fmt.Errorf("%w: no session", httplimit.ErrMissingCredential)), nil, nil, 400, badRequest, ""},
		{"KeyFunc's error of class ErrMissingCredential naming a challenge", failing(challenged{fmt.Errorf("%w: no session", httplimit.ErrMissingCredential)}), nil, nil, 401, unauthorized, `Basic realm="api"`},
		{"KeyFunc's error of class ErrMalformedCredential", failing(fmt.Errorf("%w: bad cookie", httplimit.ErrMalformedCredential)), nil, nil, 400, badRequest, ""},
		{"KeyFunc's error of class ErrInvalidRequest", failing(fmt.Errorf("%w: unsigned token", httplimit.ErrInvalidRequest)), nil, nil, 400, badRequest, ""},
		{"negative cost", nil, constant(-1, nil), nil, 400, badRequest, ""},
		{"CostFunc error wrapping ErrInvalidCost", nil, constant(0, fmt.Errorf("estimate %q: %w", "x", ratelimit.ErrInvalidCost)), nil, 400, badRequest, ""},
		{"CostFunc error wrapping ErrInvalidRequest", nil, constant(0, fmt.Errorf("%w: no max_tokens", httplimit.ErrInvalidRequest)), nil, 400, badRequest, ""},
		{"CostFunc error wrapping ErrMissingCredential", nil, constant(0, fmt.Errorf("%w: no account", httplimit.ErrMissingCredential)), nil, 400, badRequest, ""},
		{"CostFunc's own error", nil, constant(0, errLookup), nil, 500, serverError, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 10, Remaining: 9}}
			key := tc.key
			if key == nil {
				key = httplimit.KeyByHeader(keyHeader)
			}
			var observed []error
			opts := []httplimit.Option{httplimit.WithObserver(func(_ *http.Request, d ratelimit.Decision, err error) {
				assert.Nil(t, d.Policies)
				observed = append(observed, err)
			})}
			if tc.cost != nil {
				opts = append(opts, httplimit.WithCost(tc.cost))
			}
			m, err := httplimit.NewMiddleware(stub, key, opts...)
			require.NoError(t, err)
			next := &counter{}
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set(keyHeader, "k")
			r.Header.Set("Accept", "application/json")
			if tc.request != nil {
				tc.request(r)
			}
			w := httptest.NewRecorder()
			m.Handler(next).ServeHTTP(w, r)
			assert.Equal(t, tc.status, w.Code)
			assert.Equal(t, tc.challenge, w.Header().Get("WWW-Authenticate"))
			assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			var doc problemDoc
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
			assert.Equal(t, "about:blank", doc.Type)
			assert.Equal(t, tc.title, doc.Title)
			assert.Equal(t, tc.status, doc.Status)
			assert.NotEmpty(t, doc.Detail)
			assert.Empty(t, fields(w.Header()))
			assert.Equal(t, 0, stub.callCount(), "the limiter is not asked")
			assert.Equal(t, int64(0), next.calls.Load())
			if assert.Len(t, observed, 1, "the observer sees the request once") {
				assert.Error(t, observed[0])
			}
		})
	}
}

// A key longer than the limiter takes is the client's mistake: 400, and
// the observer sees the limiter's ErrInvalidKey.
func TestKeyTooLongIs400(t *testing.T) {
	l, err := ratelimit.NewGCRA(10, time.Second, ratelimit.WithMaxKeyLength(8))
	require.NoError(t, err)
	var observed error
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithObserver(func(_ *http.Request, _ ratelimit.Decision, err error) { observed = err }))
	require.NoError(t, err)
	next := &counter{}
	w := do(m.Handler(next), "a-key-longer-than-8-bytes", "")
	assert.Equal(t, http.StatusBadRequest, w.Code)
	assert.ErrorIs(t, observed, ratelimit.ErrInvalidKey)
	assert.Equal(t, int64(0), next.calls.Load())
}

// mustKeyByIP returns KeyByIP's KeyFunc trusting no proxy.
func mustKeyByIP(t *testing.T) httplimit.KeyFunc {
	t.Helper()
	k, err := httplimit.KeyByIP(httplimit.IPConfig{})
	require.NoError(t, err)
	return k
}

// A KeyByContext value of another type is the server's mistake.
func TestKeyByContextOfAnotherTypeIs500(t *testing.T) {
	stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 10, Remaining: 9}}
	m, err := httplimit.NewMiddleware(stub, httplimit.KeyByContext(ctxKey{}))
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, 42))
	w := httptest.NewRecorder()
	m.Handler(&counter{}).ServeHTTP(w, r)
	assert.Equal(t, http.StatusInternalServerError, w.Code)
}

// challenged is an error that names the challenge of its 401.
type challenged struct{ error }

func (challenged) Challenge() string { return `Basic realm="api"` }
func (c challenged) Unwrap() error   { return c.error }
