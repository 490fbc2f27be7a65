package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// PerIP's one call answers as the long form (KeyByIP, NewMiddleware,
// Handler) does on the same limiter state: every status, rate-limit field
// and Retry-After, allowed and denied, for clients behind the trusted
// proxy and for one that connects directly.
func TestPerIPAnswersAsTheLongForm(t *testing.T) {
	newLimiter := func() (ratelimit.Limiter, *ratelimittest.Clock) {
		clock := ratelimittest.NewClock(epoch)
		l, err := ratelimit.NewGCRA(3, 3*time.Second, ratelimit.WithClock(clock))
		require.NoError(t, err)
		return l, clock
	}
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })

	short, shortClock := newLimiter()
	one, err := httplimit.PerIP(short, next, httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))
	require.NoError(t, err)

	long, longClock := newLimiter()
	key, err := httplimit.KeyByIP(httplimit.IPConfig{TrustedProxies: []string{"10.0.0.0/8"}})
	require.NoError(t, err)
	m, err := httplimit.NewMiddleware(long, key)
	require.NoError(t, err)
	two := m.Handler(next)

	send := func(h http.Handler, remote, xff string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	requests := []struct{ remote, xff string }{
		{"10.0.0.1:1234", "203.0.113.7"},
		{"10.0.0.1:1234", "203.0.113.7"},
		{"10.0.0.2:1234", "198.51.100.1, 203.0.113.7"},
		{"10.0.0.1:1234", "203.0.113.7"}, // denied
		{"10.0.0.1:1234", "203.0.113.8"},
		{"192.0.2.1:1234", "203.0.113.8"}, // not a proxy: keyed by 192.0.2.1
	}
	var denied int
	for round := range 2 {
		for i, rq := range requests {
			a, b := send(one, rq.remote, rq.xff), send(two, rq.remote, rq.xff)
			assert.Equal(t, b.Code, a.Code, "round %d request %d", round, i)
			for _, f := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After", "Content-Type"} {
				assert.Equal(t, b.Header().Values(f), a.Header().Values(f), "round %d request %d: %s", round, i, f)
			}
			assert.Equal(t, b.Body.String(), a.Body.String())
			if round == 0 && i == 3 {
				assert.Equal(t, http.StatusTooManyRequests, a.Code, "203.0.113.7's fourth request, through two trusted proxies")
			}
			if a.Code == http.StatusTooManyRequests {
				denied++
				assert.NotEmpty(t, a.Header().Get("Retry-After"))
				assert.NotEmpty(t, a.Header().Get("RateLimit"))
			}
		}
		shortClock.Advance(1500 * time.Millisecond)
		longClock.Advance(1500 * time.Millisecond)
	}
	assert.Positive(t, denied, "the sequence reaches denials")
}

// WithTrustedProxies refuses what KeyByIP refuses (a prefix that trusts
// large parts of the Internet), an invalid prefix, and NewMiddleware;
// PerIP refuses a nil handler.
func TestPerIPRefusesBadConfig(t *testing.T) {
	l, err := ratelimit.NewGCRA(3, time.Second)
	require.NoError(t, err)
	ok := http.NotFoundHandler()
	for name, p := range map[string]netip.Prefix{
		"IPv4 wider than /8":         netip.MustParsePrefix("0.0.0.0/7"),
		"global IPv6 wider than /16": netip.MustParsePrefix("2000::/12"),
		"mapped IPv4 wider than /8":  netip.MustParsePrefix("::ffff:0.0.0.0/100"),
		"zero prefix":                {},
	} {
		_, err := httplimit.PerIP(l, ok, httplimit.WithTrustedProxies(p))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, name)
	}
	_, err = httplimit.PerIP(l, ok, httplimit.WithTrustedProxies(netip.MustParsePrefix("fc00::/7"), netip.MustParsePrefix("10.0.0.0/8")))
	assert.NoError(t, err)
	_, err = httplimit.PerIP(l, nil)
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, err = httplimit.PerIP(nil, ok)
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, err = httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}
