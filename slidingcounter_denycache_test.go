package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDenyCacheOverASlidingCounterAllowsWhatItsBackendAllows(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	counter, err := NewSlidingCounter(4, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	cache, err := NewDenyCache(counter, DenyCacheConfig{Clock: clock, MaxAge: time.Minute})
	require.NoError(t, err)
	_, err = cache.Allow(ctx, "k", 4)
	require.NoError(t, err)
	clock.Advance(10 * time.Second) // the previous window's 4 weigh 4
	res, err := cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, no(4, 0, 2500*ms, 10*time.Second), res)
	clock.Advance(time.Second)
	res, err = cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, no(4, 0, 1500*ms, 9*time.Second), res, "the same cost, within its RetryAfter, is denied")
	clock.Advance(1500 * ms)
	res, err = cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(4, 0, 17500*ms), res, "once its backend allows, so does the cache, though the estimate is not yet 0")
}
