package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// loginAndAPI returns a Composite of "login", a sliding log of 5 per 10 s,
// and "api", a sliding counter of 5 per 10 s, in process (client nil) or
// on Redis deciding on clock.
func loginAndAPI(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) ratelimit.Limiter {
	t.Helper()
	var login, api ratelimit.Limiter
	var err error
	if client == nil {
		login, err = ratelimit.NewSlidingLog(5, 10*time.Second, ratelimit.WithClock(clock))
		require.NoError(t, err)
		api, err = ratelimit.NewSlidingCounter(5, 10*time.Second, ratelimit.WithClock(clock))
	} else {
		login, err = ratelimit.NewRedisSlidingLog(client, 5, 10*time.Second, ratelimit.WithCallerClock(clock))
		require.NoError(t, err)
		api, err = ratelimit.NewRedisSlidingCounter(client, 5, 10*time.Second, ratelimit.WithCallerClock(clock))
	}
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(ratelimit.Part{Name: "login", Limiter: login}, ratelimit.Part{Name: "api", Limiter: api})
	require.NoError(t, err)
	return c
}

// A sliding log and a sliding counter with units taken send t: the log of
// 5 per 10 s with requests at 0, 2 s and 5 s, at 6 s, the 4 s until the
// first leaves; the counter, the seconds until one request more than r can
// have been made (the units left, made at once, count after the window's
// roll at 10 s, weighted down). A denial's one item carries the
// Retry-After. In process, on miniredis and on a real server.
func TestSlidingWindowsSendTheirEffectiveWindow(t *testing.T) {
	run := func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock, advance func(time.Duration)) {
		m, err := httplimit.NewMiddleware(loginAndAPI(t, client, clock), httplimit.KeyByHeader(keyHeader))
		require.NoError(t, err)
		h := m.Handler(&counter{})
		get := func() *httptest.ResponseRecorder {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set(keyHeader, "alice")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			return w
		}
		w := get()
		require.Equal(t, http.StatusOK, w.Code)
		// The counter: 1 counted, 4 left; 5 weigh 4 after 2 s of the
		// next window: 12 s.
		assert.Equal(t, `"login";r=4;t=10, "api";r=4;t=12`, w.Header().Get("RateLimit"))
		advance(2 * time.Second)
		get()
		advance(3 * time.Second)
		get()
		advance(time.Second)
		w = get()
		require.Equal(t, http.StatusOK, w.Code)
		// The log: 0, 2, 5 and 6 s, the first leaving at 10 s. The
		// counter: 4 counted, 1 left, 5 weighing 4 at 12 s again.
		assert.Equal(t, `"login";r=1;t=4, "api";r=1;t=6`, w.Header().Get("RateLimit"))
		get()
		w = get()
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		// Both deny; the counter waits longer (5 counted weigh 4 at 12 s)
		// and binds.
		assert.Equal(t, `"api";r=0;t=6`, w.Header().Get("RateLimit"), "a denial: the Retry-After")
		assert.Equal(t, "6", w.Header().Get("Retry-After"))
	}
	at := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	t.Run("in process", func(t *testing.T) {
		clock := ratelimittest.NewClock(at)
		run(t, nil, clock, clock.Advance)
	})
	t.Run("miniredis", func(t *testing.T) {
		_, client, move := redistest.Miniredis(t, at)
		clock := ratelimittest.NewClock(at)
		run(t, client, clock, func(d time.Duration) { clock.Advance(d); move(d) })
	})
	t.Run("redis-server", func(t *testing.T) {
		client := redistest.Start(t).Client(t)
		clock := ratelimittest.NewClock(at)
		run(t, client, clock, clock.Advance)
	})
}
