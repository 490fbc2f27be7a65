package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/httplimit"
)

// KeyByBearer reads RFC 6750's syntax (the scheme in any case, one space
// or more, a b64token with its padding) and keys by a hash of the token:
// the same token gives the same key, another token another, and the key
// never holds the token.
func TestKeyByBearerKeysByTheTokensHash(t *testing.T) {
	key := httplimit.KeyByBearer()
	keyOf := func(auth string) string {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Authorization", auth)
		k, err := key(r)
		require.NoError(t, err, auth)
		return k
	}
	const token = "mF_9.B5f-4.1JqM"
	k := keyOf("Bearer " + token)
	assert.True(t, strings.HasPrefix(k, "bearer:"), k)
	assert.Len(t, k, len("bearer:")+22)
	assert.NotContains(t, k, token)
	for _, auth := range []string{"bearer " + token, "BEARER   " + token, "BeArEr " + token} {
		assert.Equal(t, k, keyOf(auth), auth)
	}
	assert.NotEqual(t, k, keyOf("Bearer "+token+"x"))
	assert.NotEqual(t, keyOf("Bearer abc=="), keyOf("Bearer abc"))
	assert.NotEqual(t, "", keyOf("Bearer a+/~=="))
}

// A request without a Bearer credential gets an error of class
// ErrMissingCredential, one with a malformed credential one of class
// ErrMalformedCredential; both wrap ErrNoKey.
func TestKeyByBearerErrorClasses(t *testing.T) {
	key := httplimit.KeyByBearer()
	for auth, class := range map[string]error{
		"":             httplimit.ErrMissingCredential,
		"Basic abc":    httplimit.ErrMissingCredential,
		"Bearerabc":    httplimit.ErrMissingCredential,
		"Bearer":       httplimit.ErrMalformedCredential,
		"Bearer ":      httplimit.ErrMalformedCredential,
		"Bearer a=b":   httplimit.ErrMalformedCredential,
		"Bearer a\tb":  httplimit.ErrMalformedCredential,
		"Bearer\tabc":  httplimit.ErrMissingCredential,
		"Bearer abc ;": httplimit.ErrMalformedCredential,
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if auth != "" {
			r.Header["Authorization"] = []string{auth}
		}
		_, err := key(r)
		assert.ErrorIs(t, err, class, "%q", auth)
		assert.ErrorIs(t, err, httplimit.ErrNoKey, "%q", auth)
	}
}

// KeyByBearer allocates the key alone.
func TestKeyByBearerAllocations(t *testing.T) {
	key := httplimit.KeyByBearer()
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("Authorization", "Bearer abcdef")
	allocs := testing.AllocsPerRun(100, func() { _, _ = key(r) })
	assert.LessOrEqual(t, allocs, 1.0)
	r.Header.Del("Authorization")
	assert.Equal(t, 0.0, testing.AllocsPerRun(100, func() { _, _ = key(r) }))
}

// challengeError is a KeyFunc's error that names its challenge.
type challengeError struct{ error }

func (challengeError) Challenge() string { return `Basic realm="api"` }

func (e challengeError) Unwrap() error { return e.error }

// A KeyFunc's own missing-credential error names its challenge with a
// Challenge method, which the 401 sends in WWW-Authenticate.
func TestOwnMissingCredentialSendsItsChallenge(t *testing.T) {
	m, err := httplimit.NewMiddleware(&stubLimiter{}, func(*http.Request) (string, error) {
		return "", challengeError{fmt.Errorf("%w: no basic credentials", httplimit.ErrMissingCredential)}
	})
	require.NoError(t, err)
	w := do(m.Handler(&counter{}), "", "")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Equal(t, `Basic realm="api"`, w.Header().Get("WWW-Authenticate"))
}
