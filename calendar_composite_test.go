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

// perMinuteAndPerDay is a Composite of 3 a minute (a token bucket) and 5
// a day of Berlin's wall clock, on one ratelimittest.Clock reading at.
func perMinuteAndPerDay(t *testing.T, at time.Time, opts ...Option) (*Composite, *CalendarWindow, *ratelimittest.Clock) {
	t.Helper()
	clock := ratelimittest.NewClock(at)
	minute, err := NewGCRA(3, time.Minute, WithClock(clock))
	require.NoError(t, err)
	day, err := NewCalendarWindow(5, Calendar{Period: CalendarDay, Location: zone(t, "Europe/Berlin")}, append(opts, WithClock(clock))...)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "minute", Limiter: minute}, Part{Name: "day", Limiter: day})
	require.NoError(t, err)
	return c, day, clock
}

func TestCompositeWithACalendarPartTakesAllOrNothing(t *testing.T) {
	ctx := context.Background()
	// 2026-10-25 in Berlin lasts 25 hours, from 22:00 UTC on the 24th.
	c, day, clock := perMinuteAndPerDay(t, utc(2026, 10, 24, 23, 0))
	d, err := c.Decide(ctx, "k", 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, ok(5, 2, 24*time.Hour), d.Parts[1])
	d, _ = c.Decide(ctx, "k", 1)
	assert.False(t, d.Allowed, "the minute is used up")
	assert.Equal(t, Result{Limit: 5, Remaining: 2, ResetAfter: 24 * time.Hour}, d.Parts[1], "the day is untouched")
	clock.Advance(time.Minute)
	d, _ = c.Decide(ctx, "k", 3)
	assert.False(t, d.Allowed, "the day has 2 left")
	assert.Equal(t, "day", d.Policy.Name)
	assert.Equal(t, no(5, 2, 24*time.Hour-time.Minute, 24*time.Hour-time.Minute), d.Parts[1])
	res, err := day.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 2, 24*time.Hour-time.Minute), res, "the part alone sees the Composite's count")

	res, err = c.Refund(ctx, "k", 2, TakenAt(utc(2026, 10, 24, 21, 0)))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Remaining, "taken the day before: the day gives nothing back")
	_, err = c.Refund(ctx, "k", 2)
	require.NoError(t, err)
	res, _ = day.Allow(ctx, "k", 0)
	assert.Equal(t, 4, res.Remaining)
	_, err = c.Settle(ctx, "k", 0, 4)
	require.NoError(t, err)
	res, _ = day.Allow(ctx, "k", 0)
	assert.Equal(t, 0, res.Remaining)
	require.NoError(t, c.Reset(ctx, "k"))
	res, _ = day.Allow(ctx, "k", 0)
	assert.Equal(t, ok(5, 5, 0), res)

	clock.Set(utc(2026, 10, 25, 23, 0)) // the next day, the count is gone
	d, _ = c.Decide(ctx, "j", 1)
	assert.Equal(t, ok(5, 4, 24*time.Hour), d.Parts[1])
}

func TestCompositeCalendarPartWithPolicyFunc(t *testing.T) {
	ctx := context.Background()
	plans := WithPolicyFunc(func(_ context.Context, key string) (Policy, error) {
		if key == "pro" {
			return Policy{Limit: 2, Window: time.Hour}, nil
		}
		return Policy{}, nil
	})
	c, _, clock := perMinuteAndPerDay(t, utc(2026, 11, 30, 10, 30), plans)
	d, err := c.Decide(ctx, "pro", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(2, 0, 30*time.Minute), d.Parts[1], "the pro plan: 2 an hour")
	clock.Advance(30 * time.Minute)
	d, _ = c.Decide(ctx, "pro", 2)
	assert.Equal(t, ok(2, 0, time.Hour), d.Parts[1], "the next hour")
	d, _ = c.Decide(ctx, "free", 2)
	assert.Equal(t, ok(5, 3, 12*time.Hour), d.Parts[1], "the limiter's own: 5 a day of Berlin (UTC+1), at 11:00 UTC")
}

func TestRedisCompositeWithACalendarPartDecidesAsInProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	berlin := zone(t, "Europe/Berlin")
	at := utc(2026, 10, 25, 20, 0) // an hour before the 25-hour day ends
	clock := ratelimittest.NewClock(at)
	_, client, move := redistest.Miniredis(t, at)
	plans := WithPolicyFunc(func(_ context.Context, key string) (Policy, error) {
		if key == "pro" {
			return Policy{Limit: 4, Window: time.Hour}, nil
		}
		return Policy{}, nil
	})
	gcra, err := NewGCRA(3, time.Minute, WithClock(clock))
	require.NoError(t, err)
	day, err := NewCalendarWindow(5, Calendar{Period: CalendarDay, Location: berlin}, plans, WithClock(clock))
	require.NoError(t, err)
	local, err := NewComposite(Part{Name: "minute", Limiter: gcra}, Part{Name: "day", Limiter: day})
	require.NoError(t, err)
	rgcra, err := NewRedisGCRA(client, 3, time.Minute)
	require.NoError(t, err)
	rday, err := NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay, Location: berlin}, plans, WithClock(clock))
	require.NoError(t, err)
	remote, err := NewComposite(Part{Name: "minute", Limiter: rgcra}, Part{Name: "day", Limiter: rday})
	require.NoError(t, err)

	rng := rand.New(rand.NewPCG(25, 10))
	now := at
	for i := range 200 {
		d := time.Duration(rng.Int64N(int64(3*time.Minute/time.Millisecond))) * time.Millisecond
		clock.Advance(d)
		move(d)
		now = now.Add(d)
		kind := 3 + rng.IntN(5)
		if rng.IntN(8) == 0 {
			kind = rng.IntN(3)
		}
		key := []string{"a", "pro"}[rng.IntN(2)]
		n := rng.IntN(4)
		takenAt := now.Add(-time.Duration(rng.Int64N(int64(time.Hour))))
		want, werr := calendarOp(ctx, local, kind, key, n, takenAt)
		got, gerr := calendarOp(ctx, remote, kind, key, n, takenAt)
		msg := fmt.Sprintf("call %d at %v: op %d, key %q, n %d", i, now, kind, key, n)
		require.Equal(t, werr, gerr, msg)
		require.Equal(t, want.Result, got.Result, msg)
		require.Equal(t, want.Parts, got.Parts, msg)
	}
}

func TestFleetFallbackOfACalendarWindowSharesItsLimitInTheSameWindows(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	a, b := newTestFleet(t, m, "a"), newTestFleet(t, m, "b")
	for _, f := range []*Fleet{a, b, a} {
		require.NoError(t, f.Beat(ctx))
	}
	cal := Calendar{Period: CalendarDay, Location: zone(t, "Europe/Berlin")}
	backend, err := NewRedisCalendarWindow(client, 10, cal, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	clock := ratelimittest.NewClock(epoch) // midnight UTC: 01:00 in Berlin
	fb, err := a.Fallback(backend, WithClock(clock))
	require.NoError(t, err)
	require.IsType(t, &CalendarWindow{}, fb)
	res, err := fb.Allow(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 0, 23*time.Hour), res, "half the day's limit, to the end of Berlin's day")
	res, _ = fb.Allow(ctx, "k", 1)
	assert.False(t, res.Allowed)
	clock.Advance(23 * time.Hour)
	res, _ = fb.Allow(ctx, "k", 5)
	assert.True(t, res.Allowed, "the next day")
}
