package promratelimit_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
)

func TestANilOrZeroHooksRecordsNothingAndNeverPanics(t *testing.T) {
	for name, h := range map[string]*promratelimit.Hooks{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			assert.NotPanics(t, func() {
				h.IgnoresKeys()
				h.Decided(ratelimit.Event{Limiter: "api", Cost: 1, Err: fmt.Errorf("%w: down", ratelimit.ErrBackend)})
				h.BreakerChanged(ratelimit.BreakerClosed, ratelimit.BreakerOpen)
				h.Adjusted(ratelimit.AdjustEvent{Limiter: "jobs", Op: ratelimit.AdjustRelease, Taken: 1, Result: ratelimit.Result{Allowed: true}})
				h.Observe("/search", ratelimit.Decision{}, nil)
				h.HTTPObserver(nil)(httptest.NewRequest("GET", "/", nil), ratelimit.Decision{}, nil)
				h.GRPCObserver()(context.Background(), "/shop.Orders/Create", ratelimit.Decision{}, nil)
				b, err := h.Breaker("payments")
				require.NoError(t, err)
				b.BreakerChanged(ratelimit.BreakerClosed, ratelimit.BreakerOpen)
			})
		})
	}
}

func TestALimiterWithTheZeroHooksDecidesWithoutPanicking(t *testing.T) {
	limiter, err := ratelimit.NewConcurrency(1, time.Minute, ratelimit.WithHooks(&promratelimit.Hooks{}))
	require.NoError(t, err)
	ctx := context.Background()
	lease, d, err := limiter.Acquire(ctx, "user:1", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.NoError(t, lease.Release(ctx))
}
