package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCalendarWindowsReportDecisionsAndAdjustmentsToTheirHooks(t *testing.T) {
	ctx := context.Background()
	berlin := zone(t, "Europe/Berlin")
	at := utc(2026, 10, 25, 22, 0) // an hour before Berlin's 25-hour day ends
	cal := Calendar{Period: CalendarDay, Location: berlin}
	_, client, _ := redistest.Miniredis(t, at)
	build := map[string]func(h Hooks) (interface {
		Decider
		Adjuster
	}, error){
		"CalendarWindow": func(h Hooks) (interface {
			Decider
			Adjuster
		}, error) {
			return NewCalendarWindow(2, cal, WithHooks(h), WithClock(ratelimittest.NewClock(at)))
		},
		"RedisCalendarWindow": func(h Hooks) (interface {
			Decider
			Adjuster
		}, error) {
			return NewRedisCalendarWindow(client, 2, cal, WithHooks(h), WithClock(ratelimittest.NewClock(at)))
		},
	}
	for name, newLimiter := range build {
		t.Run(name, func(t *testing.T) {
			h := &adjustRecorder{}
			l, err := newLimiter(h)
			require.NoError(t, err)
			_, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			ev := h.last()
			assert.Equal(t, name, ev.Limiter)
			assert.Equal(t, KeyDigest("k"), ev.Key)
			assert.Equal(t, ok(2, 1, time.Hour), ev.Result)
			assert.Equal(t, Policy{Limit: 2, Window: 25 * time.Hour}, ev.Policy.Policy, "the window's true length")
			_, err = l.Allow(ctx, "k", 3)
			require.ErrorIs(t, err, ErrCostExceedsLimit)
			assert.ErrorIs(t, h.last().Err, ErrCostExceedsLimit)

			_, err = l.Refund(ctx, "k", 1)
			require.NoError(t, err)
			require.NoError(t, l.Reset(ctx, "k"))
			got := h.take(t, nil)
			require.Len(t, got, 2)
			assert.Equal(t, AdjustEvent{Limiter: name, Op: AdjustRefund, Key: KeyDigest("k"), Taken: 1, Result: ok(2, 2, 0)}, got[0])
			assert.Equal(t, AdjustEvent{Limiter: name, Op: AdjustReset, Key: KeyDigest("k")}, got[1])
		})
	}
}

func TestDenyCacheAnswersACalendarWindowsDenialUntilTheWindowEnds(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch.Add(23 * time.Hour))
	w, err := NewCalendarWindow(1, Calendar{Period: CalendarDay}, WithClock(clock))
	require.NoError(t, err)
	cache, err := NewDenyCache(w, DenyCacheConfig{Clock: clock, MaxAge: time.Hour})
	require.NoError(t, err)
	_, err = cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	d, err := cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	clock.Advance(30 * time.Minute)
	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromDenyCache, d.Source, "the same window: the denial holds")
	assert.Equal(t, no(1, 0, 30*time.Minute, 30*time.Minute), d.Result)
	clock.Advance(30 * time.Minute)
	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.True(t, d.Allowed, "the next day")
}
