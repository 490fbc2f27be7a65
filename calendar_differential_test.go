package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// calendarPair is a CalendarWindow and a RedisCalendarWindow on miniredis
// of one calendar, whose clocks (the in-process clock, the Redis client's
// and the server's TIME) move together.
type calendarPair struct {
	local   *CalendarWindow
	remote  *RedisCalendarWindow
	advance func(time.Duration)
}

func newCalendarPair(t *testing.T, limit int, cal Calendar, at time.Time, opts ...Option) calendarPair {
	t.Helper()
	clock := ratelimittest.NewClock(at)
	_, client, move := redistest.Miniredis(t, at)
	local, err := NewCalendarWindow(limit, cal, append(opts[:len(opts):len(opts)], WithClock(clock))...)
	require.NoError(t, err)
	remote, err := NewRedisCalendarWindow(client, limit, cal, append(redisOpts(opts), WithClock(clock))...)
	require.NoError(t, err)
	return calendarPair{local, remote, func(d time.Duration) {
		clock.Advance(d)
		move(d)
	}}
}

// calendarOp is one call of a differential schedule on both limiters.
func calendarOp(ctx context.Context, l interface {
	Decider
	Adjuster
}, kind int, key string, n int, takenAt time.Time) (Decision, error) {
	switch kind {
	case 0:
		res, err := l.Refund(ctx, key, n, TakenAt(takenAt))
		return Decision{Result: res}, err
	case 1:
		res, err := l.Settle(ctx, key, n, n+2)
		return Decision{Result: res}, err
	case 2:
		return Decision{}, l.Reset(ctx, key)
	}
	return l.Decide(ctx, key, n)
}

func TestCalendarWindowInProcessAndOnMiniredisDecideAlike(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	berlin := zone(t, "Europe/Berlin")
	sydney := zone(t, "Australia/Sydney")
	cases := []struct {
		cal  Calendar
		at   time.Time
		step time.Duration // the most a step moves the clocks
	}{
		{Calendar{Period: CalendarHour, Location: berlin}, utc(2026, 10, 24, 23, 0), 7 * time.Minute},
		{Calendar{Period: CalendarDay, Location: berlin}, utc(2026, 3, 28, 12, 0), 2 * time.Hour},
		{Calendar{Period: CalendarHour, Location: sydney}, utc(2026, 10, 3, 14, 0), 7 * time.Minute},
		{Calendar{Period: CalendarMinute, Location: sydney}, utc(2026, 4, 4, 15, 55), 5 * time.Second},
		{Calendar{Period: CalendarWeek, FirstWeekday: time.Monday}, utc(2026, 11, 27, 0, 0), 9 * time.Hour},
		{Calendar{Period: CalendarMonth}, utc(2028, 2, 27, 0, 0), 11 * time.Hour},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%v %v", tc.cal.Period, tc.cal.location()), func(t *testing.T) {
			p := newCalendarPair(t, 5, tc.cal, tc.at)
			rng := rand.New(rand.NewPCG(uint64(tc.at.Unix()), 7))
			now := tc.at
			seen := map[bool]int{}
			for i := range sized(150, 300) {
				// Whole milliseconds, the unit of Redis expiry.
				d := time.Duration(rng.Int64N(int64(tc.step/time.Millisecond))) * time.Millisecond
				p.advance(d)
				now = now.Add(d)
				kind := 3 + rng.IntN(6) // mostly Decides
				if rng.IntN(10) == 0 {
					kind = rng.IntN(3)
				}
				key := string(rune('a' + rng.IntN(3)))
				n := rng.IntN(4)
				takenAt := now.Add(-time.Duration(rng.Int64N(int64(2 * tc.step))))
				want, werr := calendarOp(ctx, p.local, kind, key, n, takenAt)
				got, gerr := calendarOp(ctx, p.remote, kind, key, n, takenAt)
				msg := fmt.Sprintf("call %d at %v: op %d, key %q, n %d", i, now, kind, key, n)
				require.Equal(t, werr, gerr, msg)
				require.Equal(t, want.Result, got.Result, msg)
				require.Equal(t, want.Policies, got.Policies, msg)
				if kind >= 3 && n > 0 {
					seen[got.Allowed]++
				}
			}
			assert.Positive(t, seen[true], "allowed some")
			assert.Positive(t, seen[false], "denied some")
		})
	}
}

func TestRedisCalendarWindowFailsOnClockSkew(t *testing.T) {
	ctx := context.Background()
	_, client, _ := redistest.Miniredis(t, epoch)
	clock := ratelimittest.NewClock(epoch.Add(-2 * time.Hour))
	w, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarHour}, WithClock(clock))
	require.NoError(t, err)
	_, err = w.Allow(ctx, "k", 1)
	require.ErrorIs(t, err, ErrBackend)
	assert.Contains(t, err.Error(), "clock skew")
	clock.Set(epoch.Add(-time.Hour + time.Second)) // one window apart: fine
	res, err := w.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 2, time.Hour), res, "the server's hour")
}

func TestRedisCalendarWindowRefusesOtherState(t *testing.T) {
	ctx := context.Background()
	m, client, _ := redistest.Miniredis(t, epoch)
	w, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarHour}, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:cal:3:hour:UTC:", w.KeyPrefix())
	for name, set := range map[string]func(key string){
		"a count alone":   func(key string) { require.NoError(t, m.Set(key, "3")); m.SetTTL(key, time.Hour) },
		"a count of 0":    func(key string) { require.NoError(t, m.Set(key, "1764460800000000:0")); m.SetTTL(key, time.Hour) },
		"no TTL":          func(key string) { require.NoError(t, m.Set(key, "1764460800000000:1")) },
		"another type":    func(key string) { m.HSet(key, "a", "1") },
		"a signed count":  func(key string) { require.NoError(t, m.Set(key, "1764460800000000:-1")); m.SetTTL(key, time.Hour) },
		"trailing spaces": func(key string) { require.NoError(t, m.Set(key, "1764460800000000:1 ")); m.SetTTL(key, time.Hour) },
	} {
		key := storedKey(w.KeyPrefix(), name)
		set(key)
		before := m.Dump()
		_, err := w.Allow(ctx, name, 1)
		require.ErrorIs(t, err, ErrCorruptState, name)
		_, err = w.Settle(ctx, name, 1, 2)
		require.ErrorIs(t, err, ErrCorruptState, name)
		require.ErrorIs(t, w.Reset(ctx, name), ErrCorruptState, name)
		assert.Equal(t, before, m.Dump(), name+": left as it was")
	}
}

func TestRedisCalendarWindowKeepsStartAndCountUntilTheWindowEnds(t *testing.T) {
	ctx := context.Background()
	m, client, _ := redistest.Miniredis(t, epoch.Add(30*time.Minute+time.Microsecond))
	w, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarHour}, WithClock(ratelimittest.NewClock(epoch.Add(30*time.Minute))))
	require.NoError(t, err)
	_, err = w.Allow(ctx, "k", 2)
	require.NoError(t, err)
	v, err := m.Get(storedKey(w.KeyPrefix(), "k"))
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d:2", epoch.UnixMicro()), v)
	assert.Equal(t, 30*time.Minute, m.TTL(storedKey(w.KeyPrefix(), "k")), "until the hour ends, whole ms rounded up")
}
