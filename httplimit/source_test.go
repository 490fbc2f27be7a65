package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// downAdjuster is a backend that fails every Allow and counts the
// adjustments it is asked for.
type downAdjuster struct{ adjusted atomic.Int64 }

var errBackendDown = errors.New("backend down")

func (d *downAdjuster) Allow(context.Context, string, int) (ratelimit.Result, error) {
	return ratelimit.Result{}, errBackendDown
}

func (d *downAdjuster) Refund(ctx context.Context, key string, n int, opts ...ratelimit.AdjustOption) (ratelimit.Result, error) {
	return d.Settle(ctx, key, n, 0, opts...)
}

func (d *downAdjuster) Settle(context.Context, string, int, int, ...ratelimit.AdjustOption) (ratelimit.Result, error) {
	d.adjusted.Add(1)
	return ratelimit.Result{Allowed: true, Limit: 10, Remaining: 10}, nil
}

func (d *downAdjuster) Reset(context.Context, string) error { return nil }

// A request a Guard let through by FailOpen took nothing from its backend,
// so it is never refunded or settled there.
func TestRequestsAGuardFailedOpenAreNotAdjusted(t *testing.T) {
	backend := &downAdjuster{}
	guard, err := ratelimit.NewGuard(backend, ratelimit.GuardConfig{OnFailure: ratelimit.FailOpen})
	require.NoError(t, err)
	shadow, err := ratelimit.NewShadow(guard, ratelimit.ShadowConfig{Enforce: true})
	require.NoError(t, err)
	for _, l := range []ratelimit.Limiter{guard, shadow} {
		h, next := adjusting(t, l, httplimit.WithRefund(serverErrors), httplimit.WithSettle())
		w := get(h, "k", "/?status=500")
		assert.Equal(t, http.StatusInternalServerError, w.Code, "%T: the handler ran", l)
		w = get(h, "k", "/?cost=3")
		assert.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, int64(2), next.calls.Load())
		assert.Zero(t, backend.adjusted.Load(), "%T: nothing was adjusted", l)
		next.calls.Store(0)
	}
}
