package otelratelimit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

func TestAdjustmentsAreCountedByOperationAndOutcomeWithTheirUnits(t *testing.T) {
	h, reader := newHooks(t)
	ctx := context.Background()
	l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 10, ratelimit.WithHooks(h), ratelimit.WithName("api"),
		ratelimit.WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	_, err = l.Allow(ctx, "user:1", 3)
	require.NoError(t, err)

	_, err = l.Settle(ctx, "user:1", 3, 5, ratelimit.WithToken("req-1"))
	require.NoError(t, err)
	_, err = l.Settle(ctx, "user:1", 2, 1)
	require.NoError(t, err)
	_, err = l.Refund(ctx, "user:1", 1)
	require.NoError(t, err)
	_, err = l.Settle(ctx, "user:1", -1, 4)
	require.ErrorIs(t, err, ratelimit.ErrInvalidCost)
	require.NoError(t, l.Reset(ctx, "user:1"))

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=api,ratelimit.operation=settle,ratelimit.outcome=ok":                            2,
		"ratelimit.limiter=api,ratelimit.operation=refund,ratelimit.outcome=ok":                            1,
		"error.type=invalid_cost,ratelimit.limiter=api,ratelimit.operation=settle,ratelimit.outcome=error": 1,
		"ratelimit.limiter=api,ratelimit.operation=reset,ratelimit.outcome=ok":                             1,
	}, sums(t, got[otelratelimit.AdjustmentsName]))
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=api,ratelimit.operation=settle,ratelimit.units=taken": 3 + 2,
		"ratelimit.limiter=api,ratelimit.operation=settle,ratelimit.units=cost":  5 + 1,
		"ratelimit.limiter=api,ratelimit.operation=refund,ratelimit.units=taken": 1,
	}, sums(t, got[otelratelimit.AdjustmentUnitsName]), "a failed adjustment counts no units, nor does a Reset")
}

func TestAFailedAdjustmentOfTheBackendIsAnErrorOfTypeBackend(t *testing.T) {
	h, reader := newHooks(t)
	h.Adjusted(ratelimit.AdjustEvent{Limiter: "redis", Op: ratelimit.AdjustSettle, Key: "user:1", Taken: 1, Cost: 4,
		Err: fmt.Errorf("ratelimit: %w: connection refused", ratelimit.ErrBackend)})
	h.Adjusted(ratelimit.AdjustEvent{Limiter: "redis", Op: ratelimit.AdjustRefund, Key: "user:1", Taken: 1,
		Err: fmt.Errorf("ratelimit: %w: %w", ratelimit.ErrBackend, context.DeadlineExceeded)})

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"error.type=backend,ratelimit.limiter=redis,ratelimit.operation=settle,ratelimit.outcome=error":           1,
		"error.type=deadline_exceeded,ratelimit.limiter=redis,ratelimit.operation=refund,ratelimit.outcome=error": 1,
	}, sums(t, got[otelratelimit.AdjustmentsName]), "the key is never an attribute")
	assert.NotContains(t, got, otelratelimit.AdjustmentUnitsName, "a failed adjustment counts no units")
}

func TestAdjustmentsCarryWithAttributes(t *testing.T) {
	h, reader := newHooks(t, otelratelimit.WithAttributes(attribute.String("region", "eu")))
	h.Adjusted(ratelimit.AdjustEvent{Limiter: "api", Op: ratelimit.AdjustRefund, Taken: 2})

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=api,ratelimit.operation=refund,ratelimit.outcome=ok,region=eu": 1,
	}, sums(t, got[otelratelimit.AdjustmentsName]))
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=api,ratelimit.operation=refund,ratelimit.units=taken,region=eu": 2,
	}, sums(t, got[otelratelimit.AdjustmentUnitsName]))
}

func TestAdjustedDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h, _ := newHooks(t)
	ev := ratelimit.AdjustEvent{Limiter: "api", Op: ratelimit.AdjustSettle, Key: "user:1", Taken: 3, Cost: 5,
		Latency: 80 * time.Nanosecond}
	h.Adjusted(ev) // builds the attribute sets
	assert.Equal(t, 0.0, testing.AllocsPerRun(1000, func() { h.Adjusted(ev) }))
}

func BenchmarkAdjusted(b *testing.B) {
	h, _ := newHooks(b)
	ev := ratelimit.AdjustEvent{Limiter: "api", Op: ratelimit.AdjustSettle, Key: "user:1", Taken: 3, Cost: 5}
	b.ReportAllocs()
	for b.Loop() {
		h.Adjusted(ev)
	}
}
