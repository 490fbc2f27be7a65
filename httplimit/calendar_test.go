package httplimit_test

import (
	"net/http"
	"testing"
	"time"
	_ "time/tzdata" // the zone the test names, whatever the machine has

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

func TestCalendarWindowHeadersTellTheWindowOpenNow(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	// 2026-10-25 in Berlin lasts 25 hours: from 22:00 UTC on the 24th
	// to 23:00 UTC on the 25th.
	clock := ratelimittest.NewClock(time.Date(2026, 10, 25, 22, 0, 0, 0, time.UTC))
	l, err := ratelimit.NewCalendarWindow(2, ratelimit.Calendar{Period: ratelimit.CalendarDay, Location: berlin}, ratelimit.WithClock(clock))
	require.NoError(t, err)
	h, _ := limited(t, l)

	res := do(h, "k", "")
	assert.Equal(t, http.StatusOK, res.Code)
	assert.Equal(t, `"default";q=2;w=90000`, res.Header().Get("RateLimit-Policy"), "w: 25 hours")
	assert.Equal(t, `"default";r=1;t=3600`, res.Header().Get("RateLimit"), "t: the hour left")
	do(h, "k", "")
	denied := do(h, "k", "")
	assert.Equal(t, http.StatusTooManyRequests, denied.Code)
	assert.Equal(t, "3600", denied.Header().Get("Retry-After"))

	clock.Set(time.Date(2026, 10, 25, 23, 0, 0, 0, time.UTC))
	res = do(h, "k", "")
	assert.Equal(t, `"default";q=2;w=86400`, res.Header().Get("RateLimit-Policy"), "the next day has 24 hours")
	assert.Equal(t, `"default";r=1;t=86400`, res.Header().Get("RateLimit"))
}
