package otelratelimit

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimit-go/ratelimit"
)

func TestTheCacheIsBoundedAndDecisionsPastItAreRecorded(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h, err := NewHooks(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	require.NoError(t, err)
	const names = maxCached + 10
	for i := range names {
		for range 2 {
			h.Decided(ratelimit.Event{Limiter: fmt.Sprint("l", i)})
		}
	}
	assert.Len(t, *h.sets.Load(), maxCached)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	var points int
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != DecisionsName {
			continue
		}
		for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
			points++
			assert.Equal(t, int64(2), dp.Value, "%v", dp.Attributes)
		}
	}
	assert.Equal(t, names, points)
}
