package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// getWithToken sends one GET of target for key through h, with an
// Idempotency-Key header when token is not empty.
func getWithToken(h http.Handler, key, token, target string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.Header.Set(keyHeader, key)
	if token != "" {
		r.Header.Set("Idempotency-Key", token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// A request retried with its Idempotency-Key is settled once on Redis: the
// retry's Allow counts, its Settle changes nothing.
func TestSettleWithAnIdempotencyKeyAppliesOnce(t *testing.T) {
	_, client, _ := redistest.Miniredis(t, epoch)
	l, err := ratelimit.NewRedisTokenBucket(client, 100, 0.001) // nothing refills during the test
	require.NoError(t, err)
	var log errorLog
	h, _ := adjusting(t, l, httplimit.WithSettle(), httplimit.WithAdjustToken(httplimit.TokenFromHeader("idempotency-key")),
		httplimit.WithOnError(log.hook))

	getWithToken(h, "alice", "req-1", "/?cost=30") // 1 taken, settled at 30
	w := getWithToken(h, "alice", "", "/")
	assert.Equal(t, "69", w.Header().Get("RateLimit-Remaining"), "100 - 30 - 1")
	getWithToken(h, "alice", "req-1", "/?cost=30") // the retry: 1 taken, the settle changes nothing
	w = getWithToken(h, "alice", "", "/")
	assert.Equal(t, "67", w.Header().Get("RateLimit-Remaining"), "69 - 1 (the retry's Allow) - 1")
	getWithToken(h, "alice", "req-2", "/?cost=30") // another token: 1 taken, settled at 30
	w = getWithToken(h, "alice", "", "/")
	assert.Equal(t, "36", w.Header().Get("RateLimit-Remaining"), "67 - 30 - 1")
	assert.Empty(t, log.errs)

	// A token the limiter would refuse is reported, and the request is
	// settled without it all the same.
	getWithToken(h, "alice", strings.Repeat("x", 129), "/?cost=5")
	require.Len(t, log.errs, 1)
	assert.ErrorIs(t, log.errs[0], httplimit.ErrAdjustment)
	w = getWithToken(h, "alice", "", "/")
	assert.Equal(t, "30", w.Header().Get("RateLimit-Remaining"), "36 - 5 (settled without the token) - 1")
}

func TestAdjustTokenConfigurationErrors(t *testing.T) {
	l, err := ratelimit.NewTokenBucket(10, 1)
	require.NoError(t, err)
	_, err = httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithAdjustToken(nil), httplimit.WithSettle())
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "a nil func")
	_, err = httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithAdjustToken(httplimit.TokenFromHeader("Idempotency-Key")))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "without WithRefund or WithSettle")
}
