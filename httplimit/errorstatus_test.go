package httplimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// Every class of KeyFunc and CostFunc error has a status of its own, with a
// problem document: the client's mistakes (a request without its key, a
// cost that is not valid) are 400, the server's (its KeyFunc or CostFunc
// failing, its set-up) 500. The limiter is never asked.
func TestKeyAndCostErrorStatusByClass(t *testing.T) {
	errLookup := errors.New("user store down")
	constant := func(n int, err error) httplimit.CostFunc {
		return func(*http.Request) (int, error) { return n, err }
	}
	cases := []struct {
		name   string
		key    httplimit.KeyFunc
		cost   httplimit.CostFunc
		status int
		title  string
	}{
		{"KeyByHeader, header missing", httplimit.KeyByHeader("X-Other"), nil, 400, "Bad Request"},
		{"KeyByHeader, invalid field name", httplimit.KeyByHeader("X Api Key"), nil, 500, "Internal Server Error"},
		{"KeyByContext, no value", httplimit.KeyByContext(ctxKey{}), nil, 500, "Internal Server Error"},
		{"KeyFunc's own error", func(*http.Request) (string, error) { return "", errLookup }, nil, 500, "Internal Server Error"},
		{"KeyFunc's error of class ErrInvalidRequest", func(*http.Request) (string, error) {
			return "", fmt.Errorf("%w: unsigned token", httplimit.ErrInvalidRequest)
		}, nil, 400, "Bad Request"},
		{"negative cost", nil, constant(-1, nil), 400, "Bad Request"},
		{"CostFunc error wrapping ErrInvalidCost", nil, constant(0, fmt.Errorf("estimate %q: %w", "x", ratelimit.ErrInvalidCost)), 400, "Bad Request"},
		{"CostFunc error wrapping ErrInvalidRequest", nil, constant(0, fmt.Errorf("%w: no max_tokens", httplimit.ErrInvalidRequest)), 400, "Bad Request"},
		{"CostFunc's own error", nil, constant(0, errLookup), 500, "Internal Server Error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 10, Remaining: 9}}
			key := tc.key
			if key == nil {
				key = httplimit.KeyByHeader(keyHeader)
			}
			var opts []httplimit.Option
			if tc.cost != nil {
				opts = append(opts, httplimit.WithCost(tc.cost))
			}
			m, err := httplimit.NewMiddleware(stub, key, opts...)
			require.NoError(t, err)
			next := &counter{}
			w := do(m.Handler(next), "k", "")
			assert.Equal(t, tc.status, w.Code)
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
		})
	}
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
