package redistest

import (
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Miniredis starts a miniredis whose TIME reads start, and returns it, a
// client to it (closed when the test ends) and a function that moves its
// time: TIME through SetTime, and TTLs through FastForward. Real Redis keeps
// expiry as absolute times, so a clock stepping back lengthens every TTL by
// the step; FastForward with a negative duration does the same.
func Miniredis(tb testing.TB, start time.Time) (*miniredis.Miniredis, *redis.Client, func(time.Duration)) {
	tb.Helper()
	m := miniredis.RunT(tb)
	now := start
	m.SetTime(now)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	tb.Cleanup(func() { _ = client.Close() })
	return m, client, func(d time.Duration) {
		now = now.Add(d)
		m.SetTime(now)
		m.FastForward(d)
	}
}
