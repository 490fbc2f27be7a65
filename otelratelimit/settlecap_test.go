package otelratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// TestASettleAboveItsBoundIsAnErrorOfTypeInvalidCost: a Settle above the
// bound on one Settle (ratelimit.WithMaxSettle, ten limits by default) is
// counted as the caller's mistake, error.type invalid_cost, by the limiter
// (each part of a Composite) and by a Guard around it, never as a backend
// error, and counts no units.
func TestASettleAboveItsBoundIsAnErrorOfTypeInvalidCost(t *testing.T) {
	h, reader := newHooks(t)
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	rps, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 5, ratelimit.WithHooks(h), ratelimit.WithName("rps"), ratelimit.WithClock(clock))
	require.NoError(t, err)
	month, err := ratelimit.NewCalendarWindow(120, ratelimit.Calendar{Period: ratelimit.CalendarMonth},
		ratelimit.WithHooks(h), ratelimit.WithName("month"), ratelimit.WithClock(clock))
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(ratelimit.Part{Name: "rps", Limiter: rps}, ratelimit.Part{Name: "month", Limiter: month})
	require.NoError(t, err)
	g, err := ratelimit.NewGuard(c, ratelimit.GuardConfig{Hooks: h, Name: "guard", Timeout: time.Second})
	require.NoError(t, err)
	_, err = g.Allow(ctx, "user:1", 1)
	require.NoError(t, err)
	_, err = g.Settle(ctx, "user:1", 1, 100_000_000)
	require.ErrorIs(t, err, ratelimit.ErrInvalidCost)

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"error.type=invalid_cost,ratelimit.limiter=guard,ratelimit.operation=settle,ratelimit.outcome=error": 1,
		"error.type=invalid_cost,ratelimit.limiter=month,ratelimit.operation=settle,ratelimit.outcome=error": 1,
		"error.type=invalid_cost,ratelimit.limiter=rps,ratelimit.operation=settle,ratelimit.outcome=error":   1,
	}, sums(t, got[otelratelimit.AdjustmentsName]))
	assert.NotContains(t, got, otelratelimit.AdjustmentUnitsName, "a refused Settle counts no units")
}
