package otelratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// newHooks returns Hooks recording to a ManualReader.
func newHooks(t testing.TB, opts ...otelratelimit.Option) (*otelratelimit.Hooks, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	h, err := otelratelimit.NewHooks(mp, opts...)
	require.NoError(t, err)
	return h, reader
}

// collect returns the metrics of the Hooks' scope by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelratelimit.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// encode renders an attribute set as "k=v,k=v", sorted by key.
func encode(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// sums returns an Int64 sum's values by encoded attribute set.
func sums(t *testing.T, m metricdata.Metrics) map[string]int64 {
	t.Helper()
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T, not an int64 sum", m.Name, m.Data)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		out[encode(dp.Attributes)] = dp.Value
	}
	return out
}

// counts returns a histogram's counts by encoded attribute set.
func counts(t *testing.T, m metricdata.Metrics) map[string]uint64 {
	t.Helper()
	hist, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a %T, not a float64 histogram", m.Name, m.Data)
	out := map[string]uint64{}
	for _, dp := range hist.DataPoints {
		assert.Equal(t, otelratelimit.DurationBuckets, dp.Bounds)
		out[encode(dp.Attributes)] = dp.Count
	}
	return out
}

func TestTokenBucketDecisionsByOutcome(t *testing.T) {
	h, reader := newHooks(t)
	clock := ratelimittest.NewClock(epoch)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 2, ratelimit.WithClock(clock),
		ratelimit.WithHooks(h), ratelimit.WithName("api"))
	require.NoError(t, err)
	ctx := context.Background()

	for range 3 { // two allowed, one denied
		_, err := tb.Allow(ctx, "user:1", 1)
		require.NoError(t, err)
	}
	_, err = tb.Allow(ctx, "user:1", 3)
	require.ErrorIs(t, err, ratelimit.ErrCostExceedsLimit)
	_, err = tb.Allow(ctx, "user:1", -1)
	require.ErrorIs(t, err, ratelimit.ErrInvalidCost)
	clock.Advance(time.Second)
	_, err = tb.Allow(ctx, "user:2", 1)
	require.NoError(t, err)

	want := map[string]int64{
		"ratelimit.limiter=api,ratelimit.outcome=allowed,ratelimit.source=backend":                             3,
		"ratelimit.limiter=api,ratelimit.outcome=denied,ratelimit.source=backend":                              1,
		"error.type=cost_exceeds_limit,ratelimit.limiter=api,ratelimit.outcome=error,ratelimit.source=backend": 1,
		"error.type=invalid_cost,ratelimit.limiter=api,ratelimit.outcome=error,ratelimit.source=backend":       1,
	}
	got := collect(t, reader)
	decisions := got[otelratelimit.DecisionsName]
	assert.Equal(t, "{decision}", decisions.Unit)
	sum, ok := decisions.Data.(metricdata.Sum[int64])
	require.True(t, ok)
	assert.True(t, sum.IsMonotonic)
	assert.Equal(t, want, sums(t, decisions))

	duration := got[otelratelimit.DurationName]
	assert.Equal(t, "s", duration.Unit)
	wantCounts := map[string]uint64{}
	for k, v := range want {
		wantCounts[k] = uint64(v)
	}
	assert.Equal(t, wantCounts, counts(t, duration))
	assert.NotContains(t, got, otelratelimit.BreakerStateName, "no breaker reported")
}

// flaky is a backend that fails while down is set.
type flaky struct{ down atomic.Bool }

var errDown = errors.New("backend down")

func (f *flaky) Allow(_ context.Context, _ string, n int) (ratelimit.Result, error) {
	if f.down.Load() {
		return ratelimit.Result{}, errDown
	}
	return ratelimit.Result{Allowed: true, Limit: 10, Remaining: 10 - n}, nil
}

func TestGuardBreakerStateAndTransitions(t *testing.T) {
	h, reader := newHooks(t, otelratelimit.WithLimiterName("shared"))
	clock := ratelimittest.NewClock(epoch)
	backend := &flaky{}
	backend.down.Store(true)
	g, err := ratelimit.NewGuard(backend, ratelimit.GuardConfig{
		OnFailure: ratelimit.FailClosed, BreakerFailures: 2, BreakerCoolDown: time.Second,
		Clock: clock, Hooks: h, Name: "shared",
	})
	require.NoError(t, err)
	ctx := context.Background()
	allow := func() ratelimit.Result {
		t.Helper()
		res, err := g.Allow(ctx, "user:1", 1)
		require.NoError(t, err)
		return res
	}

	for range 3 { // two failures open the breaker; the third is kept from the backend
		assert.False(t, allow().Allowed)
	}
	require.Equal(t, ratelimit.BreakerOpen, g.BreakerState())
	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.breaker.state=open,ratelimit.limiter=shared": 1,
	}, sums(t, got[otelratelimit.BreakerStateName]))
	assert.Equal(t, "{breaker}", got[otelratelimit.BreakerStateName].Unit)
	state, ok := got[otelratelimit.BreakerStateName].Data.(metricdata.Sum[int64])
	require.True(t, ok)
	assert.False(t, state.IsMonotonic, "an UpDownCounter")
	assert.Equal(t, map[string]int64{
		"ratelimit.breaker.state=open,ratelimit.limiter=shared": 1,
	}, sums(t, got[otelratelimit.BreakerTransitionsName]))

	// After the cool-down a probe goes through and succeeds.
	clock.Advance(time.Second)
	backend.down.Store(false)
	assert.True(t, allow().Allowed)
	require.Equal(t, ratelimit.BreakerClosed, g.BreakerState())

	got = collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.breaker.state=open,ratelimit.limiter=shared":      0,
		"ratelimit.breaker.state=half_open,ratelimit.limiter=shared": 0,
	}, sums(t, got[otelratelimit.BreakerStateName]))
	assert.Equal(t, map[string]int64{
		"ratelimit.breaker.state=open,ratelimit.limiter=shared":      1,
		"ratelimit.breaker.state=half_open,ratelimit.limiter=shared": 1,
		"ratelimit.breaker.state=closed,ratelimit.limiter=shared":    1,
	}, sums(t, got[otelratelimit.BreakerTransitionsName]))
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=shared,ratelimit.outcome=denied,ratelimit.source=fail_closed": 3,
		"ratelimit.limiter=shared,ratelimit.outcome=allowed,ratelimit.source=backend":    1,
	}, sums(t, got[otelratelimit.DecisionsName]))
}

func TestShadowReportsALetThroughDenialAsShadow(t *testing.T) {
	h, reader := newHooks(t)
	clock := ratelimittest.NewClock(epoch)
	tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 1, ratelimit.WithClock(clock))
	require.NoError(t, err)
	s, err := ratelimit.NewShadow(tb, ratelimit.ShadowConfig{Hooks: h, Name: "rollout", Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()

	for range 2 { // the second is denied by the bucket and let through
		res, err := s.Allow(ctx, "user:1", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed)
	}

	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=rollout,ratelimit.outcome=allowed,ratelimit.source=backend": 1,
		"ratelimit.limiter=rollout,ratelimit.outcome=denied,ratelimit.source=shadow":   1,
	}, sums(t, collect(t, reader)[otelratelimit.DecisionsName]))
}

func TestAWouldDenyCountsAsADenialOfSourceShadow(t *testing.T) {
	h, reader := newHooks(t)
	denial := ratelimit.Result{Limit: 1, RetryAfter: time.Second, ResetAfter: time.Second}
	h.Decided(ratelimit.Event{Limiter: "rollout", Cost: 1, Decision: ratelimit.Decision{
		Result:    ratelimit.Result{Allowed: true, Limit: 1, ResetAfter: time.Second},
		Source:    ratelimit.FromShadow,
		WouldDeny: true,
		Enforced:  denial,
	}})
	h.Decided(ratelimit.Event{Limiter: "rollout", Cost: 1, Decision: ratelimit.Decision{
		Result: ratelimit.Result{Allowed: true, Limit: 1}, Enforced: ratelimit.Result{Allowed: true, Limit: 1},
	}})

	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=rollout,ratelimit.outcome=allowed,ratelimit.source=backend": 1,
		"ratelimit.limiter=rollout,ratelimit.outcome=denied,ratelimit.source=shadow":   1,
	}, sums(t, collect(t, reader)[otelratelimit.DecisionsName]))
}

func TestBreakersSharingOneHooksAreCounted(t *testing.T) {
	h, reader := newHooks(t)
	h.BreakerChanged(ratelimit.BreakerClosed, ratelimit.BreakerOpen)
	h.BreakerChanged(ratelimit.BreakerClosed, ratelimit.BreakerOpen)
	h.BreakerChanged(ratelimit.BreakerOpen, ratelimit.BreakerHalfOpen)

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.breaker.state=open":      1,
		"ratelimit.breaker.state=half_open": 1,
	}, sums(t, got[otelratelimit.BreakerStateName]))
	assert.Equal(t, map[string]int64{
		"ratelimit.breaker.state=open":      2,
		"ratelimit.breaker.state=half_open": 1,
	}, sums(t, got[otelratelimit.BreakerTransitionsName]))
}

func TestErrorTypesAndLatency(t *testing.T) {
	h, reader := newHooks(t)
	for _, err := range []error{
		fmt.Errorf("call: %w", context.DeadlineExceeded),
		context.Canceled,
		fmt.Errorf("key k: %w", ratelimit.ErrCorruptState),
		errors.New("connection refused"),
	} {
		h.Decided(ratelimit.Event{Limiter: "redis", Err: err, Latency: 3 * time.Millisecond})
	}
	h.Decided(ratelimit.Event{Limiter: "stepped", Latency: -time.Second})

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"error.type=deadline_exceeded,ratelimit.limiter=redis,ratelimit.outcome=error,ratelimit.source=backend": 1,
		"error.type=canceled,ratelimit.limiter=redis,ratelimit.outcome=error,ratelimit.source=backend":          1,
		"error.type=corrupt_state,ratelimit.limiter=redis,ratelimit.outcome=error,ratelimit.source=backend":     1,
		"error.type=_OTHER,ratelimit.limiter=redis,ratelimit.outcome=error,ratelimit.source=backend":            1,
		"ratelimit.limiter=stepped,ratelimit.outcome=denied,ratelimit.source=backend":                           1,
	}, sums(t, got[otelratelimit.DecisionsName]))
	hist, ok := got[otelratelimit.DurationName].Data.(metricdata.Histogram[float64])
	require.True(t, ok)
	for _, dp := range hist.DataPoints {
		if encode(dp.Attributes) == "ratelimit.limiter=stepped,ratelimit.outcome=denied,ratelimit.source=backend" {
			assert.Equal(t, 0.0, dp.Sum, "a negative latency counts as 0")
			assert.Equal(t, uint64(1), dp.BucketCounts[0])
			continue
		}
		assert.InDelta(t, 0.003, dp.Sum, 1e-12)
		// Bucket i counts values in (Bounds[i-1], Bounds[i]]: 3 ms is in (2.5 ms, 5 ms].
		assert.Equal(t, uint64(1), dp.BucketCounts[10], "bucket (%v, %v]", dp.Bounds[9], dp.Bounds[10])
	}
}

func TestWithAttributesAreOnEveryMeasurement(t *testing.T) {
	h, reader := newHooks(t, otelratelimit.WithAttributes(attribute.String("region", "eu")))
	h.Decided(ratelimit.Event{Limiter: "api", Decision: ratelimit.Decision{Result: ratelimit.Result{Allowed: true}, Source: ratelimit.FromFallback}})
	h.BreakerChanged(ratelimit.BreakerClosed, ratelimit.BreakerOpen)

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=api,ratelimit.outcome=allowed,ratelimit.source=fallback,region=eu": 1,
	}, sums(t, got[otelratelimit.DecisionsName]))
	assert.Equal(t, map[string]int64{
		"ratelimit.breaker.state=open,region=eu": 1,
	}, sums(t, got[otelratelimit.BreakerStateName]))
}

func TestNewHooksRejectsBadArguments(t *testing.T) {
	mp := sdkmetric.NewMeterProvider()
	for name, c := range map[string]struct {
		mp   *sdkmetric.MeterProvider
		opts []otelratelimit.Option
	}{
		"nil provider": {nil, nil},
		"nil option":   {mp, []otelratelimit.Option{nil}},
		"empty name":   {mp, []otelratelimit.Option{otelratelimit.WithLimiterName("")}},
		"reserved key": {mp, []otelratelimit.Option{otelratelimit.WithAttributes(otelratelimit.SourceKey.String("x"))}},
		"operation":    {mp, []otelratelimit.Option{otelratelimit.WithAttributes(otelratelimit.OperationKey.String("x"))}},
		"units":        {mp, []otelratelimit.Option{otelratelimit.WithAttributes(otelratelimit.UnitsKey.String("x"))}},
		"empty key":    {mp, []otelratelimit.Option{otelratelimit.WithAttributes(attribute.String("", "x"))}},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			if c.mp == nil {
				_, err = otelratelimit.NewHooks(nil, c.opts...)
			} else {
				_, err = otelratelimit.NewHooks(c.mp, c.opts...)
			}
			assert.Error(t, err)
		})
	}
}

func TestConcurrentDecisionsAreAllCounted(t *testing.T) {
	h, reader := newHooks(t)
	const workers, each, names = 8, 500, 5
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				h.Decided(ratelimit.Event{
					Limiter:  fmt.Sprintf("l%d", (w+i)%names),
					Decision: ratelimit.Decision{Result: ratelimit.Result{Allowed: i%2 == 0}},
				})
			}
		})
	}
	wg.Wait()

	got := sums(t, collect(t, reader)[otelratelimit.DecisionsName])
	assert.Len(t, got, 2*names)
	var total int64
	for _, v := range got {
		total += v
	}
	assert.Equal(t, int64(workers*each), total)
}

func TestDecidedDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h, _ := newHooks(t)
	d := ratelimit.Event{Limiter: "api", Key: "user:1", Cost: 1,
		Decision: ratelimit.Decision{Result: ratelimit.Result{Allowed: true}}, Latency: 80 * time.Nanosecond}
	h.Decided(d) // builds the attribute set
	assert.Equal(t, 0.0, testing.AllocsPerRun(1000, func() { h.Decided(d) }))
}

func BenchmarkDecided(b *testing.B) {
	h, _ := newHooks(b)
	d := ratelimit.Event{Limiter: "api", Key: "user:1", Cost: 1,
		Decision: ratelimit.Decision{Result: ratelimit.Result{Allowed: true}}, Latency: 80 * time.Nanosecond}
	b.ReportAllocs()
	for b.Loop() {
		h.Decided(d)
	}
}

func BenchmarkDecidedParallel(b *testing.B) {
	h, _ := newHooks(b)
	d := ratelimit.Event{Limiter: "api", Key: "user:1", Cost: 1,
		Decision: ratelimit.Decision{Result: ratelimit.Result{Allowed: true}}, Latency: 80 * time.Nanosecond}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Decided(d)
		}
	})
}

// BenchmarkTokenBucketAllow compares an in-process limiter's Allow without
// hooks and with these.
func BenchmarkTokenBucketAllow(b *testing.B) {
	h, _ := newHooks(b)
	for name, opts := range map[string][]ratelimit.Option{
		"bare":      nil,
		"otelhooks": {ratelimit.WithHooks(h), ratelimit.WithName("api")},
	} {
		b.Run(name, func(b *testing.B) {
			tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e6), 1<<30, opts...)
			require.NoError(b, err)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = tb.Allow(ctx, "user:1", 1)
			}
		})
	}
}
