package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realCalendar is the calendar of the tests on a real server, whose clock
// is real: minutes, in a zone of a half-hour offset.
func realCalendar(t *testing.T) Calendar {
	return Calendar{Period: CalendarMinute, Location: zone(t, "Asia/Kolkata")}
}

// withinOneWindow runs f until a run starts and ends in one window of cal
// on the system clock (at most three runs), so that a boundary passing
// during a run cannot make its decisions differ.
func withinOneWindow(t *testing.T, cal Calendar, f func(t *testing.T, run int) bool) {
	for run := range 3 {
		before, _ := cal.window(time.Now())
		done := f(t, run)
		after, _ := cal.window(time.Now())
		if before.Equal(after) && done {
			return
		}
	}
	t.Fatal("a window boundary passed during each of three runs")
}

func TestRealRedisCalendarWindowDecidesAsInProcess(t *testing.T) {
	server := redistest.Shared(t)
	client := server.Client(t)
	ctx := context.Background()
	cal := realCalendar(t)
	withinOneWindow(t, cal, func(t *testing.T, run int) bool {
		prefix := fmt.Sprintf("run%d:", run)
		local, err := NewCalendarWindow(5, cal)
		require.NoError(t, err)
		remote, err := NewRedisCalendarWindow(client, 5, cal, WithKeyPrefix(prefix))
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(uint64(run), 24))
		for i := range 60 {
			kind := 3 + rng.IntN(6)
			if rng.IntN(8) == 0 {
				kind = rng.IntN(3)
			}
			key, n := string(rune('a'+rng.IntN(3))), rng.IntN(4)
			want, werr := calendarOp(ctx, local, kind, key, n, time.Now())
			got, gerr := calendarOp(ctx, remote, kind, key, n, time.Now())
			msg := fmt.Sprintf("call %d: op %d, key %q, n %d", i, kind, key, n)
			require.Equal(t, werr, gerr, msg)
			assert.Equal(t, want.Allowed, got.Allowed, msg)
			assert.Equal(t, want.Remaining, got.Remaining, msg)
			assert.InDelta(t, want.ResetAfter, got.ResetAfter, float64(time.Second), msg)
			assert.InDelta(t, want.RetryAfter, got.RetryAfter, float64(time.Second), msg)
			assert.Equal(t, want.Policies, got.Policies, msg)
		}
		// Every key's state: the window's start and the count, until the
		// window's end.
		start, end := cal.window(time.Now())
		for _, key := range []string{"a", "b", "c"} {
			res, err := local.Allow(ctx, key, 0)
			require.NoError(t, err)
			v, err := client.Get(ctx, storedKey(remote.KeyPrefix(), key)).Result()
			if res.Remaining == 5 {
				assert.ErrorIs(t, err, redis.Nil, key)
				continue
			}
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("%d:%d", start.UnixMicro(), 5-res.Remaining), v, key)
			// Read before PTTL, so that the TTL read after it can only be
			// shorter: the key expires at the window's end, rounded up to
			// whole ms. The server's PTTL reads its cached time, which a
			// loaded machine (CI under -race) has seen lag by a few ms:
			// 50 ms of slack, far below a minute window's length.
			until := time.Until(end)
			ttl, err := client.PTTL(ctx, storedKey(remote.KeyPrefix(), key)).Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, until+50*time.Millisecond, key, "until the window ends")
		}
		return true
	})
}

func TestRealRedisCalendarWindowFailsOnClockSkewAndWritesNothing(t *testing.T) {
	server := redistest.Shared(t)
	client := server.Client(t)
	ctx := context.Background()
	cal := Calendar{Period: CalendarHour}
	w, err := NewRedisCalendarWindow(client, 3, cal, WithClock(ratelimittest.NewClock(time.Now().Add(-3*time.Hour))))
	require.NoError(t, err)
	_, err = w.Allow(ctx, "k", 1)
	require.ErrorIs(t, err, ErrBackend)
	assert.Contains(t, err.Error(), "clock skew")
	_, err = w.Settle(ctx, "k", 0, 1)
	require.ErrorIs(t, err, ErrBackend)
	size, err := client.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, size)
}

func TestRealRedisCalendarWindowOnACluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	ctx := context.Background()
	cal := Calendar{Period: CalendarDay}
	withinOneWindow(t, cal, func(t *testing.T, run int) bool {
		w, err := NewRedisCalendarWindow(client, 2, cal, WithKeyPrefix(fmt.Sprintf("cal%d:", run)))
		require.NoError(t, err)
		for i := range 60 {
			key := strconv.Itoa(i)
			for j := range 3 {
				res, err := w.Allow(ctx, key, 1)
				require.NoError(t, err)
				assert.Equal(t, j < 2, res.Allowed, "key %s, call %d", key, j)
			}
		}
		return true
	})
	sizes := masterSizes(t, client)
	for _, n := range sizes {
		assert.Positive(t, n, "every master holds keys: %v", sizes)
	}
}
