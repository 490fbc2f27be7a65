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

// monthStart is the first of a month of 30 days, at midnight UTC.
var monthStart = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// rpsAndMonthly returns a Composite of "rps", 5 a second, and "monthly",
// 1000 a month in UTC, in process (client nil) or on Redis.
func rpsAndMonthly(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) ratelimit.Limiter {
	t.Helper()
	month := ratelimit.Calendar{Period: ratelimit.CalendarMonth, Location: time.UTC}
	var rps, monthly ratelimit.Limiter
	var err error
	if client == nil {
		rps, err = ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 5, ratelimit.WithClock(clock))
		require.NoError(t, err)
		monthly, err = ratelimit.NewCalendarWindow(1000, month, ratelimit.WithClock(clock))
	} else {
		rps, err = ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(5), 5, ratelimit.WithCallerClock(clock))
		require.NoError(t, err)
		monthly, err = ratelimit.NewRedisCalendarWindow(client, 1000, month, ratelimit.WithCallerClock(clock), ratelimit.WithClock(clock))
	}
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(ratelimit.Part{Name: "rps", Limiter: rps}, ratelimit.Part{Name: "monthly", Limiter: monthly})
	require.NoError(t, err)
	return c
}

// Each policy's t is its own effective window, the draft's: a per-second
// bucket's is the second its next unit takes at most, not the 27 days
// until a monthly quota beside it is full again; the monthly quota's is
// the time until its month ends. A denial's one item carries the
// Retry-After.
func TestEachPolicyCarriesItsOwnEffectiveWindow(t *testing.T) {
	at := monthStart.Add(3 * 24 * time.Hour) // 27 days before the month ends
	run := func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock, advance func(time.Duration)) {
		m, err := httplimit.NewMiddleware(rpsAndMonthly(t, client, clock), httplimit.KeyByHeader(keyHeader))
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
		assert.Equal(t, `"rps";r=4;t=1, "monthly";r=999;t=2332800`, w.Header().Get("RateLimit"))
		assert.Equal(t, "2332800", w.Header().Get("RateLimit-Reset"), "the legacy field: until both are full")
		for range 4 {
			require.Equal(t, http.StatusOK, get().Code)
		}
		w = get()
		require.Equal(t, http.StatusTooManyRequests, w.Code)
		assert.Equal(t, `"rps";r=0;t=1`, w.Header().Get("RateLimit"))
		assert.Equal(t, "1", w.Header().Get("Retry-After"))

		advance(time.Hour)
		w = get()
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, `"rps";r=4;t=1, "monthly";r=994;t=2329200`, w.Header().Get("RateLimit"))
	}
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
