package httplimit_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// WithQuotaUnit names the unit of every policy that counts units, as qu in
// RateLimit-Policy; a policy that counts calls keeps the default unit,
// requests, and one in flight its own.
func TestQuotaUnitNamesThePoliciesThatCountUnits(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	requests, err := ratelimit.NewGCRA(60, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	tokens, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(100000), 100000, ratelimit.WithClock(clock))
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "requests", Limiter: requests, PerCall: true},
		ratelimit.Part{Name: "tokens", Limiter: tokens},
	)
	require.NoError(t, err)
	h, _ := limited(t, c, httplimit.WithQuotaUnit("tokens"), httplimit.WithCost(func(*http.Request) (int, error) { return 500, nil }))
	w := do(h, "alice", "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"requests";q=60;w=60, "tokens";q=100000;w=60;qu="tokens"`, w.Header().Get("RateLimit-Policy"))

	bucket, _ := tokenBucket(t, ratelimit.Per(65535, 10*time.Second), 65535)
	h, _ = limited(t, bucket, httplimit.WithQuotaUnit("content-bytes"))
	w = do(h, "alice", "")
	assert.Equal(t, `"default";q=65535;w=10;qu="content-bytes"`, w.Header().Get("RateLimit-Policy"))

	l, _ := concurrency(t, 2, time.Minute)
	h, _ = limited(t, l, httplimit.WithLeases(), httplimit.WithQuotaUnit("tokens"))
	w = do(h, "alice", "")
	assert.Equal(t, `"default";q=2;qu="concurrent-requests"`, w.Header().Get("RateLimit-Policy"))
}

// WithPartitionKey sends, on every RateLimit item, pk: a keyed hash of the
// request's key, never the key; the same key under the same secret gives
// the same pk, another key or another secret another.
func TestPartitionKeyIsAKeyedHashOfTheKey(t *testing.T) {
	secret := []byte("0123456789abcdef-secret")
	want := func(secret []byte, key string) string {
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(key))
		return ";pk=:" + base64.StdEncoding.EncodeToString(mac.Sum(nil)[:16]) + ":"
	}
	c, _ := realComposite(t)
	h, _ := limited(t, c, httplimit.WithPartitionKey(secret))
	w := do(h, "alice-api-key", "")
	require.Equal(t, http.StatusOK, w.Code)
	pk := want(secret, "alice-api-key")
	assert.Equal(t, `"per-second";r=1;t=1`+pk+`, "per-minute";r=2;t=20`+pk, w.Header().Get("RateLimit"))
	assert.NotContains(t, w.Header().Get("RateLimit"), "alice")
	assert.NotContains(t, w.Header().Get("RateLimit-Policy"), "pk=")

	w = do(h, "bob-api-key", "")
	assert.Contains(t, w.Header().Get("RateLimit"), want(secret, "bob-api-key"))
	assert.NotEqual(t, want(secret, "bob-api-key"), pk)

	// A denial's item, and RateLimit-Shadow's, carry it too.
	do(h, "alice-api-key", "")
	w = do(h, "alice-api-key", "")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, `"per-second";r=0;t=1`+pk, w.Header().Get("RateLimit"))

	s, _ := shadowed(t, nil)
	h, _ = limited(t, s, httplimit.WithPartitionKey(secret), httplimit.WithShadowHeader())
	for range 3 {
		w = do(h, "alice-api-key", "")
	}
	assert.Equal(t, `"default";r=0;t=1`+pk, w.Header().Get("RateLimit-Shadow"))

	other := []byte(strings.Repeat("x", 16))
	h, _ = limited(t, c, httplimit.WithPartitionKey(other))
	w = do(h, "carol", "")
	assert.Contains(t, w.Header().Get("RateLimit"), want(other, "carol"))
}

// The options refuse what they cannot send.
func TestQuotaUnitAndPartitionKeyRefuseBadValues(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(1), 10)
	key := httplimit.KeyByHeader(keyHeader)
	for _, opt := range []httplimit.Option{
		httplimit.WithQuotaUnit(""),
		httplimit.WithQuotaUnit("Tokens"),
		httplimit.WithQuotaUnit("to kens"),
		httplimit.WithQuotaUnit(`to"kens`),
		httplimit.WithQuotaUnit("-tokens"),
		httplimit.WithQuotaUnit(strings.Repeat("a", 65)),
		httplimit.WithPartitionKey(nil),
		httplimit.WithPartitionKey(make([]byte, 15)),
	} {
		_, err := httplimit.NewMiddleware(l, key, opt)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	}
	_, err := httplimit.NewMiddleware(l, key, httplimit.WithQuotaUnit(strings.Repeat("a", 64)), httplimit.WithPartitionKey(make([]byte, 16)))
	assert.NoError(t, err)
}
