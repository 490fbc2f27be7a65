package promratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/promratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// leasesHeld is the exposition of ratelimit_leases_held{limiter="jobs"} at n.
func leasesHeld(n string) *strings.Reader {
	return strings.NewReader(`
# HELP ratelimit_leases_held Leases of concurrency limiters acquired and not yet given back by a Release, by limiter: a lease that expired without one stays counted.
# TYPE ratelimit_leases_held gauge
ratelimit_leases_held{limiter="jobs"} ` + n + "\n")
}

func TestReleasingALeaseTwiceTakesItOffTheLeasesHeldOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	hooks, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	jobs, err := ratelimit.NewConcurrency(2, time.Minute, ratelimit.WithHooks(hooks), ratelimit.WithName("jobs"))
	require.NoError(t, err)
	ctx := context.Background()
	first, _, err := jobs.Acquire(ctx, "user:1", 1)
	require.NoError(t, err)
	second, _, err := jobs.Acquire(ctx, "user:1", 1)
	require.NoError(t, err)

	require.NoError(t, first.Release(ctx))
	require.NoError(t, first.Release(ctx)) // frees nothing
	assert.NoError(t, testutil.GatherAndCompare(reg, leasesHeld("1"), promratelimit.LeasesHeldName))

	require.NoError(t, second.Release(ctx))
	assert.NoError(t, testutil.GatherAndCompare(reg, leasesHeld("0"), promratelimit.LeasesHeldName))
	// Three releases, two units given back.
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP ratelimit_adjustment_units_total Units of the adjustments that succeeded, by limiter, op and units: taken (those they replaced) and cost (those they charged instead).
# TYPE ratelimit_adjustment_units_total counter
ratelimit_adjustment_units_total{limiter="jobs",op="release",units="cost"} 0
ratelimit_adjustment_units_total{limiter="jobs",op="release",units="taken"} 2
`), promratelimit.AdjustmentUnitsName))
}

func TestALeaseReleasedAfterItExpiredStaysCountedAsHeld(t *testing.T) {
	reg := prometheus.NewRegistry()
	hooks, err := promratelimit.NewHooks(reg)
	require.NoError(t, err)
	clock := ratelimittest.NewClock(epoch)
	jobs, err := ratelimit.NewConcurrency(1, time.Minute, ratelimit.WithHooks(hooks), ratelimit.WithName("jobs"), ratelimit.WithClock(clock))
	require.NoError(t, err)
	ctx := context.Background()
	expired, _, err := jobs.Acquire(ctx, "user:1", 1)
	require.NoError(t, err)

	// Two minutes later the lease has expired: its unit is granted again.
	clock.Advance(2 * time.Minute)
	held, d, err := jobs.Acquire(ctx, "user:1", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, expired.Release(ctx)) // frees nothing

	assert.NoError(t, testutil.GatherAndCompare(reg, leasesHeld("2"), promratelimit.LeasesHeldName))
	require.NoError(t, held.Release(ctx))
	assert.NoError(t, testutil.GatherAndCompare(reg, leasesHeld("1"), promratelimit.LeasesHeldName))
}
