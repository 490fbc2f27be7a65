package otelratelimit_test

import (
	"context"
	"testing"
	"time"
	_ "time/tzdata" // the zone the calendar test names, whatever the machine has

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// newLimiter is a limiter of the sliding log, the sliding counter and the
// calendar window: each decides, adjusts and resets.
type newLimiter interface {
	ratelimit.Decider
	ratelimit.Adjuster
}

func TestTheNewLimitersDecisionsAndAdjustmentsAreCounted(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(ratelimit.Clock, ...ratelimit.Option) (newLimiter, error)
	}{
		{"sliding-log", func(c ratelimit.Clock, o ...ratelimit.Option) (newLimiter, error) {
			return ratelimit.NewSlidingLog(2, time.Minute, append(o, ratelimit.WithClock(c))...)
		}},
		{"sliding-counter", func(c ratelimit.Clock, o ...ratelimit.Option) (newLimiter, error) {
			return ratelimit.NewSlidingCounter(2, time.Minute, append(o, ratelimit.WithClock(c))...)
		}},
		{"calendar", func(c ratelimit.Clock, o ...ratelimit.Option) (newLimiter, error) {
			return ratelimit.NewCalendarWindow(2, ratelimit.Calendar{Period: ratelimit.CalendarHour}, append(o, ratelimit.WithClock(c))...)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, reader := newHooks(t)
			ctx := context.Background()
			l, err := c.build(ratelimittest.NewClock(epoch), ratelimit.WithHooks(h), ratelimit.WithName(c.name))
			require.NoError(t, err)
			for _, want := range []bool{true, true, false} {
				d, err := l.Decide(ctx, "user:1", 1)
				require.NoError(t, err)
				require.Equal(t, want, d.Allowed)
			}
			_, err = l.Decide(ctx, "user:1", 3)
			require.ErrorIs(t, err, ratelimit.ErrCostExceedsLimit)
			_, err = l.Settle(ctx, "user:1", 2, 1)
			require.NoError(t, err)
			_, err = l.Refund(ctx, "user:1", 1)
			require.NoError(t, err)
			_, err = l.Settle(ctx, "user:1", -1, 4)
			require.ErrorIs(t, err, ratelimit.ErrInvalidCost)
			require.NoError(t, l.Reset(ctx, "user:1"))

			got := collect(t, reader)
			name := "ratelimit.limiter=" + c.name
			assert.Equal(t, map[string]int64{
				name + ",ratelimit.outcome=allowed,ratelimit.source=backend":                                  2,
				name + ",ratelimit.outcome=denied,ratelimit.source=backend":                                   1,
				"error.type=cost_exceeds_limit," + name + ",ratelimit.outcome=error,ratelimit.source=backend": 1,
			}, sums(t, got[otelratelimit.DecisionsName]))
			assert.Equal(t, map[string]int64{
				name + ",ratelimit.operation=settle,ratelimit.outcome=ok":                                 1,
				name + ",ratelimit.operation=refund,ratelimit.outcome=ok":                                 1,
				"error.type=invalid_cost," + name + ",ratelimit.operation=settle,ratelimit.outcome=error": 1,
				name + ",ratelimit.operation=reset,ratelimit.outcome=ok":                                  1,
			}, sums(t, got[otelratelimit.AdjustmentsName]))
			assert.Equal(t, map[string]int64{
				name + ",ratelimit.operation=settle,ratelimit.units=taken": 2,
				name + ",ratelimit.operation=settle,ratelimit.units=cost":  1,
				name + ",ratelimit.operation=refund,ratelimit.units=taken": 1,
			}, sums(t, got[otelratelimit.AdjustmentUnitsName]), "a failed adjustment counts no units, nor does a Reset")
		})
	}
}

// TestACalendarWindowsChangingLengthAddsNoAttributeSet: the policy is on no
// measurement, so a calendar day whose Decision's Window is 23, 24 or 25
// hours (across Berlin's daylight-saving changes) records under one
// attribute set per outcome, however many days pass.
func TestACalendarWindowsChangingLengthAddsNoAttributeSet(t *testing.T) {
	h, reader := newHooks(t)
	ctx := context.Background()
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, berlin))
	l, err := ratelimit.NewCalendarWindow(1, ratelimit.Calendar{Period: ratelimit.CalendarDay, Location: berlin},
		ratelimit.WithClock(clock), ratelimit.WithHooks(h), ratelimit.WithName("daily"))
	require.NoError(t, err)
	windows := map[time.Duration]int{}
	const days = 400
	for range days {
		for range 2 { // allowed, then denied
			d, err := l.Decide(ctx, "user:1", 1)
			require.NoError(t, err)
			windows[d.Policy.Window]++
		}
		clock.Advance(24 * time.Hour)
	}
	assert.Equal(t, map[time.Duration]int{23 * time.Hour: 2, 24 * time.Hour: 2 * (days - 2), 25 * time.Hour: 2}, windows,
		"a year of days: one of 23 hours, one of 25")

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=daily,ratelimit.outcome=allowed,ratelimit.source=backend": days,
		"ratelimit.limiter=daily,ratelimit.outcome=denied,ratelimit.source=backend":  days,
	}, sums(t, got[otelratelimit.DecisionsName]))
	hist, ok := got[otelratelimit.DurationName].Data.(metricdata.Histogram[float64])
	require.True(t, ok)
	assert.Len(t, hist.DataPoints, 2, "one series per outcome")
	for _, dp := range hist.DataPoints {
		for _, kv := range dp.Attributes.ToSlice() {
			assert.Contains(t, []attribute.Key{otelratelimit.LimiterKey, otelratelimit.OutcomeKey, otelratelimit.SourceKey}, kv.Key,
				"no attribute carries the policy")
		}
	}
}
