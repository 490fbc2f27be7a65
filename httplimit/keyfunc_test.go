package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/httplimit"
)

func TestKeyByHeader(t *testing.T) {
	cases := []struct {
		name    string
		field   string   // as given to KeyByHeader
		values  []string // X-Api-Key field lines
		want    string
		wantErr string
	}{
		{"present", "X-Api-Key", []string{"abc"}, "abc", ""},
		{"name matched case-insensitively", "x-api-key", []string{"abc"}, "abc", ""},
		{"first of several", "X-API-KEY", []string{"first", "second"}, "first", ""},
		{"absent", "X-Api-Key", nil, "", "header X-Api-Key is missing or empty"},
		{"empty", "X-Api-Key", []string{""}, "", "header X-Api-Key is missing or empty"},
		{"invalid name", "X Api Key", []string{"abc"}, "", "not a valid header field name"},
		{"empty name", "", []string{"abc"}, "", "not a valid header field name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			for _, v := range tc.values {
				r.Header.Add("X-Api-Key", v)
			}
			got, err := httplimit.KeyByHeader(tc.field)(r)
			assertKey(t, tc.want, tc.wantErr, got, err)
		})
	}
}

// assertKey checks a KeyFunc's answer: key want and no error when wantErr is
// empty, or else no key and an error wrapping ErrNoKey that contains wantErr.
func assertKey(t *testing.T, want, wantErr, got string, err error) {
	t.Helper()
	if wantErr != "" {
		require.Error(t, err)
		assert.ErrorIs(t, err, httplimit.ErrNoKey)
		assert.Contains(t, err.Error(), wantErr)
		assert.Empty(t, got)
		return
	}
	require.NoError(t, err)
	assert.Equal(t, want, got)
}

// ctxKey is the context key of the tests' user ids.
type ctxKey struct{}

// userID is a fmt.Stringer.
type userID struct{ n int }

func (u *userID) String() string {
	if u.n == 0 {
		return ""
	}
	return "user-" + string(rune('0'+u.n))
}

func TestKeyByContext(t *testing.T) {
	cases := []struct {
		name    string
		value   any // nil: nothing stored
		want    string
		wantErr string
	}{
		{"string", "user-42", "user-42", ""},
		{"Stringer", &userID{n: 7}, "user-7", ""},
		{"absent", nil, "", "no value in the request's context"},
		{"empty string", "", "", "no value in the request's context"},
		{"Stringer saying nothing", &userID{}, "", "no value in the request's context"},
		{"nil Stringer", (*userID)(nil), "", "no value in the request's context"},
		{"other type", 42, "", "is a int, not a string or fmt.Stringer"},
		{"byte slice", []byte("user-42"), "", "is a []uint8"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			if tc.value != nil {
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, tc.value))
			}
			got, err := httplimit.KeyByContext(ctxKey{})(r)
			assertKey(t, tc.want, tc.wantErr, got, err)
		})
	}
}

func TestKeyByContextNilKey(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	_, err := httplimit.KeyByContext(nil)(r)
	assert.ErrorIs(t, err, httplimit.ErrNoKey)
}

func TestKeyByHeaderDoesNotAllocate(t *testing.T) {
	key := httplimit.KeyByHeader(keyHeader)
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set(keyHeader, "abc")
	bare := httptest.NewRequest(http.MethodGet, "/", nil)
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = key(r)
		_, _ = key(bare)
	})
	assert.Equal(t, 0.0, allocs)
}
