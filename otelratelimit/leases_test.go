package otelratelimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/otelratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// newConcurrency returns an in-process concurrency limiter of limit per
// key with a TTL of 1 minute, named name, reporting to h, on clock.
func newConcurrency(t testing.TB, h *otelratelimit.Hooks, name string, limit int, clock ratelimit.Clock) *ratelimit.Concurrency {
	t.Helper()
	c, err := ratelimit.NewConcurrency(limit, time.Minute,
		ratelimit.WithHooks(h), ratelimit.WithName(name), ratelimit.WithClock(clock))
	require.NoError(t, err)
	return c
}

// acquire acquires n units for key on c and requires a lease.
func acquire(t testing.TB, c *ratelimit.Concurrency, key string, n int) ratelimit.Lease {
	t.Helper()
	lease, d, err := c.Acquire(context.Background(), key, n)
	require.NoError(t, err)
	require.True(t, d.Allowed, "acquire %d for %s", n, key)
	return lease
}

// held returns the leases-held gauge's values by encoded attribute set.
func held(t *testing.T, got map[string]metricdata.Metrics) map[string]int64 {
	t.Helper()
	m, ok := got[otelratelimit.LeasesHeldName]
	require.True(t, ok, "no %s", otelratelimit.LeasesHeldName)
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a %T", m.Name, m.Data)
	assert.False(t, sum.IsMonotonic, "a gauge of leases held goes down")
	assert.Equal(t, "{lease}", m.Unit)
	return sums(t, m)
}

func TestLeasesHeldCountsTheLeasesAcquiredAndNotReleased(t *testing.T) {
	h, reader := newHooks(t)
	ctx := context.Background()
	c := newConcurrency(t, h, "jobs", 2, ratelimittest.NewClock(epoch))

	a := acquire(t, c, "key:a", 1)
	b := acquire(t, c, "key:a", 1)
	_ = acquire(t, c, "key:b", 2)
	assert.Equal(t, map[string]int64{"ratelimit.limiter=jobs": 3}, held(t, collect(t, reader)))

	_, d, err := c.Acquire(ctx, "key:a", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	_, d, err = c.Acquire(ctx, "key:c", 0)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, err = c.Allow(ctx, "key:c", 1)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"ratelimit.limiter=jobs": 3}, held(t, collect(t, reader)),
		"a denial, a peek and an Allow hold no lease")

	_, err = a.Extend(ctx)
	require.NoError(t, err)
	require.NoError(t, a.Release(ctx))
	assert.Equal(t, map[string]int64{"ratelimit.limiter=jobs": 2}, held(t, collect(t, reader)),
		"an Extend changes nothing; a Release ends a lease")
	require.NoError(t, b.Release(ctx))
	require.NoError(t, (ratelimit.Lease{}).Release(ctx))
	got := collect(t, reader)
	assert.Equal(t, map[string]int64{"ratelimit.limiter=jobs": 1}, held(t, got),
		"the limiter's Release counts as the Lease's; the zero Lease is nothing to release")
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=jobs,ratelimit.operation=release,ratelimit.units=taken": 2,
		"ratelimit.limiter=jobs,ratelimit.operation=extend,ratelimit.units=taken":  1,
		"ratelimit.limiter=jobs,ratelimit.operation=extend,ratelimit.units=cost":   1,
	}, sums(t, got[otelratelimit.AdjustmentUnitsName]), "a release gives its units back; an extend keeps them")
}

func TestALeaseCountsOnceWhateverItsUnits(t *testing.T) {
	h, reader := newHooks(t)
	c := newConcurrency(t, h, "exports", 10, ratelimittest.NewClock(epoch))
	lease := acquire(t, c, "tenant:1", 7)
	assert.Equal(t, map[string]int64{"ratelimit.limiter=exports": 1}, held(t, collect(t, reader)))
	require.NoError(t, lease.Release(context.Background()))
	assert.Equal(t, map[string]int64{"ratelimit.limiter=exports": 0}, held(t, collect(t, reader)))
}

func TestAnExpiredLeaseStaysCountedUntilReleased(t *testing.T) {
	h, reader := newHooks(t)
	clock := ratelimittest.NewClock(epoch)
	c := newConcurrency(t, h, "jobs", 1, clock)
	lease := acquire(t, c, "key:a", 1)

	clock.Advance(2 * time.Minute)
	_ = acquire(t, c, "key:a", 1) // the expired lease's unit is free again
	assert.Equal(t, map[string]int64{"ratelimit.limiter=jobs": 2}, held(t, collect(t, reader)),
		"a lease its holder never released is counted: a leak")

	_, err := lease.Extend(context.Background())
	require.ErrorIs(t, err, ratelimit.ErrLeaseExpired)
	require.NoError(t, lease.Release(context.Background()))
	assert.Equal(t, map[string]int64{"ratelimit.limiter=jobs": 1}, held(t, collect(t, reader)),
		"releasing it late ends it, though its limiter no longer held it")
}

func TestLeasesHeldAreCountedByLimiterName(t *testing.T) {
	h, reader := newHooks(t, otelratelimit.WithAttributes(attribute.String("region", "eu")))
	clock := ratelimittest.NewClock(epoch)
	jobs := newConcurrency(t, h, "jobs", 5, clock)
	streams := newConcurrency(t, h, "streams", 5, clock)
	for i := range 3 {
		_ = acquire(t, jobs, fmt.Sprint("key:", i), 1)
	}
	_ = acquire(t, streams, "key:0", 1)

	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=jobs,region=eu":    3,
		"ratelimit.limiter=streams,region=eu": 1,
	}, held(t, collect(t, reader)))
}

func TestLeasesHeldNeverCarryTheKey(t *testing.T) {
	h, reader := newHooks(t)
	ctx := context.Background()
	c := newConcurrency(t, h, "jobs", 1, ratelimittest.NewClock(epoch))
	const keys = 50
	for i := range keys {
		key := fmt.Sprintf("customer-%03d", i)
		lease := acquire(t, c, key, 1)
		_, _, err := c.Acquire(ctx, key, 1) // denied
		require.NoError(t, err)
		_, err = lease.Extend(ctx)
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, lease.Release(ctx))
		}
	}

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{"ratelimit.limiter=jobs": keys / 2}, held(t, got))
	for name, m := range got {
		for _, set := range attributeSets(t, m) {
			assert.NotContains(t, set.Encoded(attribute.DefaultEncoder()), "customer-", "%s carries a key", name)
		}
	}
}

// attributeSets returns the attribute sets of m's data points.
func attributeSets(t *testing.T, m metricdata.Metrics) []attribute.Set {
	t.Helper()
	var sets []attribute.Set
	switch data := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, dp := range data.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	case metricdata.Histogram[float64]:
		for _, dp := range data.DataPoints {
			sets = append(sets, dp.Attributes)
		}
	default:
		t.Fatalf("%s: unexpected %T", m.Name, m.Data)
	}
	return sets
}

func TestAReleaseThatFailedOnTheBackendEndsTheLeaseButACallersMistakeDoesNot(t *testing.T) {
	h, reader := newHooks(t)
	c := newConcurrency(t, h, "redis-jobs", 5, ratelimittest.NewClock(epoch))
	for range 3 {
		_ = acquire(t, c, "key:a", 1)
	}

	h.Adjusted(ratelimit.AdjustEvent{Limiter: "redis-jobs", Op: ratelimit.AdjustRelease, Key: "key:a", Taken: 1,
		Err: fmt.Errorf("ratelimit: %w: connection refused", ratelimit.ErrBackend)})
	h.Adjusted(ratelimit.AdjustEvent{Limiter: "redis-jobs", Op: ratelimit.AdjustRelease, Key: "key:a", Taken: 1,
		Err: fmt.Errorf("%w: refused", ratelimit.ErrCaller)})
	h.Adjusted(ratelimit.AdjustEvent{Limiter: "redis-jobs", Op: ratelimit.AdjustRelease, Key: "key:a"})

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{"ratelimit.limiter=redis-jobs": 2}, held(t, got),
		"the process holds a lease it failed to release no more (its TTL ends it); "+
			"a release refused as the caller's mistake, or one that held nothing, ends nothing counted")
	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=redis-jobs,ratelimit.operation=release,ratelimit.outcome=ok":                       1,
		"error.type=backend,ratelimit.limiter=redis-jobs,ratelimit.operation=release,ratelimit.outcome=error": 1,
		"error.type=_OTHER,ratelimit.limiter=redis-jobs,ratelimit.operation=release,ratelimit.outcome=error":  1,
	}, sums(t, got[otelratelimit.AdjustmentsName]))
}

func TestConcurrentLeasesAreAllCountedBack(t *testing.T) {
	h, reader := newHooks(t)
	c := newConcurrency(t, h, "jobs", 4, ratelimittest.NewClock(epoch))
	ctx := context.Background()
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				lease, _, err := c.Acquire(ctx, fmt.Sprint("key:", (w+i)%3), 1)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, lease.Release(ctx))
			}
		})
	}
	wg.Wait()

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{"ratelimit.limiter=jobs": 0}, held(t, got))
	var allowed int64
	for set, v := range sums(t, got[otelratelimit.DecisionsName]) {
		if strings.Contains(set, "outcome=allowed") {
			allowed += v
		}
	}
	assert.Positive(t, allowed)
}

func TestLeaseMeasurementsDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	h, _ := newHooks(t)
	c, err := ratelimit.NewConcurrency(1, time.Minute)
	require.NoError(t, err)
	lease := acquire(t, c, "user:1", 1)
	acquired := ratelimit.Event{Limiter: "jobs", Key: "user:1", Cost: 1, Lease: lease,
		Decision: ratelimit.Decision{Result: ratelimit.Result{Allowed: true}}}
	released := ratelimit.AdjustEvent{Limiter: "jobs", Op: ratelimit.AdjustRelease, Key: "user:1", Taken: 1,
		Result: ratelimit.Result{Allowed: true}}
	h.Decided(acquired) // builds the attribute sets
	h.Adjusted(released)
	assert.Equal(t, 0.0, testing.AllocsPerRun(1000, func() {
		h.Decided(acquired)
		h.Adjusted(released)
	}))
}

func TestAFailedExtendIsAnErrorOfTypeLeaseExpired(t *testing.T) {
	h, reader := newHooks(t)
	clock := ratelimittest.NewClock(epoch)
	c := newConcurrency(t, h, "jobs", 1, clock)
	lease := acquire(t, c, "key:a", 1)
	_, err := lease.Extend(context.Background())
	require.NoError(t, err)
	clock.Advance(time.Minute)
	_, err = lease.Extend(context.Background())
	require.ErrorIs(t, err, ratelimit.ErrLeaseExpired)

	assert.Equal(t, map[string]int64{
		"ratelimit.limiter=jobs,ratelimit.operation=extend,ratelimit.outcome=ok":                             1,
		"error.type=lease_expired,ratelimit.limiter=jobs,ratelimit.operation=extend,ratelimit.outcome=error": 1,
	}, sums(t, collect(t, reader)[otelratelimit.AdjustmentsName]))
}
