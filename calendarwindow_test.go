package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newCalendarAt returns a CalendarWindow of limit per cal on a ratelimittest.Clock
// reading at.
func newCalendarAt(t *testing.T, limit int, cal Calendar, at time.Time, opts ...Option) (*CalendarWindow, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.NewClock(at)
	w, err := NewCalendarWindow(limit, cal, append(opts, WithClock(clock))...)
	require.NoError(t, err)
	return w, clock
}

func TestCalendarWindowResetsEveryKeyAtTheBoundary(t *testing.T) {
	ctx := context.Background()
	// epoch is midnight UTC: a day window opened at 23:00 ends an hour
	// later, whenever the key's first request came.
	w, clock := newCalendarAt(t, 2, Calendar{Period: CalendarDay}, epoch.Add(23*time.Hour))
	res, err := w.Allow(ctx, "a", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, time.Hour), res)
	clock.Advance(30 * time.Minute)
	res, _ = w.Allow(ctx, "a", 1)
	assert.Equal(t, no(2, 0, 30*time.Minute, 30*time.Minute), res)
	res, _ = w.Allow(ctx, "b", 1)
	assert.Equal(t, ok(2, 1, 30*time.Minute), res)
	res, _ = w.Allow(ctx, "c", 0)
	assert.Equal(t, ok(2, 2, 0), res, "a peek of an unused key")
	clock.Advance(30 * time.Minute)
	res, _ = w.Allow(ctx, "a", 2)
	assert.Equal(t, ok(2, 0, 24*time.Hour), res, "the next day")
	res, _ = w.Allow(ctx, "b", 0)
	assert.Equal(t, ok(2, 2, 0), res, "b's count of yesterday is gone")
}

func TestCalendarWindowRefusesBadCosts(t *testing.T) {
	w, _ := newCalendarAt(t, 3, Calendar{Period: CalendarHour}, epoch)
	res, err := w.Allow(context.Background(), "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
	assert.Equal(t, Result{Limit: 3}, res)
	res, err = w.Allow(context.Background(), "k", 4)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.Equal(t, Result{Limit: 3}, res)
}

func TestCalendarWindowDayOfTwentyFiveHoursInBerlin(t *testing.T) {
	ctx := context.Background()
	berlin := zone(t, "Europe/Berlin")
	// 2026-10-25 03:00 CEST becomes 02:00 CET: the day runs from 22:00
	// UTC on the 24th to 23:00 UTC on the 25th.
	w, clock := newCalendarAt(t, 1, Calendar{Period: CalendarDay, Location: berlin}, utc(2026, 10, 24, 22, 0))
	d, err := w.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(1, 0, 25*time.Hour), d.Result)
	assert.Equal(t, Policy{Limit: 1, Window: 25 * time.Hour}, d.Policy.Policy, "the Decision tells the window's true length")
	assert.Equal(t, Policy{Limit: 1, Window: 24 * time.Hour}, w.Policy(), "the Policy is the nominal day")
	policies, err := w.Policies(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, d.Policies, policies, "Policies tell the window open now")
	clock.Set(utc(2026, 10, 25, 22, 59))
	d, _ = w.Decide(ctx, "k", 1)
	assert.Equal(t, no(1, 0, time.Minute, time.Minute), d.Result)
	clock.Set(utc(2026, 10, 25, 23, 0))
	d, _ = w.Decide(ctx, "k", 1)
	assert.Equal(t, ok(1, 0, 24*time.Hour), d.Result)
	assert.Equal(t, 24*time.Hour, d.Policy.Window)
}

func TestCalendarWindowSpringForwardHourInSydney(t *testing.T) {
	ctx := context.Background()
	syd := zone(t, "Australia/Sydney")
	// 2026-10-04 02:00 AEST becomes 03:00 AEDT: hour 1 ends at 16:00
	// UTC and hour 3 follows at once.
	w, clock := newCalendarAt(t, 1, Calendar{Period: CalendarHour, Location: syd}, utc(2026, 10, 3, 15, 30))
	res, _ := w.Allow(ctx, "k", 1)
	assert.Equal(t, ok(1, 0, 30*time.Minute), res)
	clock.Set(utc(2026, 10, 3, 16, 0))
	res, _ = w.Allow(ctx, "k", 1)
	assert.Equal(t, ok(1, 0, time.Hour), res)
}

func TestCalendarWindowLeapFebruary(t *testing.T) {
	ctx := context.Background()
	w, clock := newCalendarAt(t, 5, Calendar{Period: CalendarMonth}, utc(2028, 2, 1, 0, 0))
	d, _ := w.Decide(ctx, "k", 5)
	assert.Equal(t, ok(5, 0, 29*24*time.Hour), d.Result)
	assert.Equal(t, 29*24*time.Hour, d.Policy.Window)
	assert.Equal(t, 30*24*time.Hour, w.Policy().Window)
	clock.Set(utc(2028, 2, 29, 23, 59))
	res, _ := w.Allow(ctx, "k", 1)
	assert.Equal(t, no(5, 0, time.Minute, time.Minute), res)
	clock.Set(utc(2028, 3, 1, 0, 0))
	res, _ = w.Allow(ctx, "k", 1)
	assert.Equal(t, ok(5, 4, 31*24*time.Hour), res)
}

func TestCalendarWindowClockSteppingBackCreatesNothing(t *testing.T) {
	ctx := context.Background()
	w, clock := newCalendarAt(t, 2, Calendar{Period: CalendarMinute}, epoch.Add(59*time.Second))
	res, _ := w.Allow(ctx, "k", 2)
	assert.Equal(t, ok(2, 0, time.Second), res)
	clock.Advance(time.Second)
	res, _ = w.Allow(ctx, "k", 2)
	assert.Equal(t, ok(2, 0, time.Minute), res, "the next minute")
	clock.Advance(-2 * time.Second)
	res, _ = w.Allow(ctx, "k", 1)
	assert.Equal(t, no(2, 0, time.Minute+2*time.Second, time.Minute+2*time.Second), res, "the previous minute is not open again")
}

func TestCalendarWindowRefundGoesOnlyToTheWindowThatTookIt(t *testing.T) {
	ctx := context.Background()
	w, clock := newCalendarAt(t, 3, Calendar{Period: CalendarHour}, epoch.Add(30*time.Minute))
	_, _ = w.Allow(ctx, "k", 3)
	res, err := w.Refund(ctx, "k", 1, TakenAt(epoch.Add(30*time.Minute)))
	require.NoError(t, err)
	assert.Equal(t, ok(3, 1, 30*time.Minute), res)
	res, _ = w.Refund(ctx, "k", 1, TakenAt(epoch.Add(-time.Minute)))
	assert.Equal(t, ok(3, 1, 30*time.Minute), res, "taken in the hour before: not given back")
	res, _ = w.Refund(ctx, "k", 2)
	assert.Equal(t, ok(3, 3, 0), res, "a count of 0 is forgotten")
	clock.Advance(20 * time.Minute)
	_, _ = w.Allow(ctx, "k", 2)
	clock.Advance(20 * time.Minute) // the next hour
	res, _ = w.Refund(ctx, "k", 2, TakenAt(epoch.Add(50*time.Minute)))
	assert.Equal(t, ok(3, 3, 0), res, "the units' hour has ended")
}

func TestCalendarWindowSettleCountsIntoTheWindowOpenNow(t *testing.T) {
	ctx := context.Background()
	w, clock := newCalendarAt(t, 3, Calendar{Period: CalendarHour}, epoch.Add(30*time.Minute))
	res, err := w.Settle(ctx, "k", 1, 10)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 0, 30*time.Minute), res, "into debt as far as one more limit")
	res, _ = w.Allow(ctx, "k", 1)
	assert.Equal(t, no(3, 0, 30*time.Minute, 30*time.Minute), res)
	clock.Advance(30 * time.Minute)
	res, _ = w.Allow(ctx, "k", 3)
	assert.Equal(t, ok(3, 0, time.Hour), res, "the debt ends with its window")
	require.NoError(t, w.Reset(ctx, "k"))
	res, _ = w.Allow(ctx, "k", 0)
	assert.Equal(t, ok(3, 3, 0), res)
}

func TestCalendarWindowPolicyFuncNamesPeriodsByNominalLength(t *testing.T) {
	ctx := context.Background()
	plans := map[string]Policy{
		"daily":   {Limit: 2, Window: 24 * time.Hour},
		"monthly": {Limit: 3, Window: 720 * time.Hour},
		"bad":     {Limit: 2, Window: 2 * time.Hour},
	}
	w, _ := newCalendarAt(t, 1, Calendar{Period: CalendarHour}, utc(2028, 2, 10, 12, 0),
		WithPolicyFunc(func(_ context.Context, key string) (Policy, error) { return plans[key], nil }))
	d, err := w.Decide(ctx, "daily", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, 12*time.Hour), d.Result)
	assert.Equal(t, Policy{Limit: 2, Window: 24 * time.Hour}, d.Policy.Policy)
	d, err = w.Decide(ctx, "monthly", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 2, (19*24+12)*time.Hour), d.Result)
	assert.Equal(t, Policy{Limit: 3, Window: 29 * 24 * time.Hour}, d.Policy.Policy)
	d, err = w.Decide(ctx, "other", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(1, 0, time.Hour), d.Result, "the limiter's own: an hour")
	_, err = w.Allow(ctx, "bad", 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "168h0m0s (week)")
}

func TestCalendarWindowHotKeyAllocatesNothing(t *testing.T) {
	w, _ := newCalendarAt(t, 1<<40, Calendar{Period: CalendarDay, Location: zone(t, "Europe/Berlin")}, epoch)
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = w.Allow(ctx, "k", 1)
		_, _ = w.Decide(ctx, "k", 1)
	})
	assert.Equal(t, 0.0, allocs)
}

func TestCalendarWindowAtTheEndOfALeapYearPastTheZonesTable(t *testing.T) {
	t.Parallel()
	// Past the last offset change a zone lists, its changes follow a
	// yearly rule, and time.ZoneBounds ends a leap year's last period a day
	// early: every window open then must still be the one the wall clock
	// shows, as the model reads it.
	for _, name := range []string{"Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe"} {
		loc := zone(t, name)
		for _, year := range []int{2028, 2040, 2044} {
			for p := CalendarHour; p <= CalendarMonth; p++ {
				c := Calendar{Period: p, Location: loc}
				m := newCalendarModel(1, c, time.Time{})
				for _, at := range []time.Time{
					utc(year, 12, 13, 15, 30), utc(year, 12, 30, 23, 45), utc(year, 12, 31, 0, 0),
					utc(year, 12, 31, 0, 15), utc(year, 12, 31, 12, 30), utc(year, 12, 31, 23, 45),
				} {
					start, end := c.window(at)
					wantStart, wantEnd := m.window(at)
					assert.Equal(t, wantStart, start.UTC(), "%s %v at %v: start", name, p, at)
					assert.Equal(t, wantEnd, end.UTC(), "%s %v at %v: end", name, p, at)
				}
			}
		}
	}
}
