package promratelimit_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
)

func TestRecordingAllocatesNothingOnceTheSeriesExist(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h, err := promratelimit.NewHooks(prometheus.NewRegistry())
	require.NoError(t, err)
	allowed := ratelimit.Event{Limiter: "api", Cost: 1, Decision: ratelimit.Decision{Result: ratelimit.Result{Allowed: true}}}
	denied := ratelimit.Event{Limiter: "api", Cost: 1, Decision: ratelimit.Decision{Enforced: ratelimit.Result{RetryAfter: 1}}}
	settle := ratelimit.AdjustEvent{Limiter: "api", Op: ratelimit.AdjustSettle, Taken: 2, Cost: 1}
	for name, record := range map[string]func(){
		"an allowed decision": func() { h.Decided(allowed) },
		"a denial":            func() { h.Decided(denied) },
		"a settle":            func() { h.Adjusted(settle) },
		"a request observed":  func() { h.Observe("/search", allowed.Decision, nil) },
	} {
		record()
		assert.Zero(t, testing.AllocsPerRun(100, record), name)
	}
}
