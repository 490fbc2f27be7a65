package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// A Composite of a RedisConcurrency and a rate on real redis-servers: 64
// goroutines on one server and on a 3-master cluster, and parts whose keys
// are in different hash slots.

func TestRealRedisCompositeHoldsUnitsInFlightAndTheRateWith64Goroutines(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	checkCompositeInFlight(t, client)
}

func TestRealRedisClusterCompositeHoldsUnitsInFlightAndTheRateWith64Goroutines(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	checkCompositeInFlight(t, client)
	sizes := masterSizes(t, client)
	for _, n := range sizes {
		assert.Positive(t, n, "every master holds users' rate keys: %v", sizes)
	}
}

// checkCompositeInFlight runs 64 goroutines on two Composites (their parts
// in either order) of 3 in flight per tenant and 5 an hour per user (so
// nothing refills during the test), 8 tenants of 4 users, each goroutine
// holding its lease for a random few ms. A counter per tenant, raised
// inside the work and lowered before the release, never passes 3; each
// user's rate part has taken exactly one unit per call allowed, none for
// a denial; and every tenant's slots come back.
func checkCompositeInFlight(t *testing.T, client redis.Scripter) {
	ctx := context.Background()
	const inFlight, perHour, tenants, users, goroutines, rounds = 3, 5, 8, 4, 64, 30
	slots, err := NewRedisConcurrency(client, inFlight, 10*time.Second)
	require.NoError(t, err)
	rate, err := NewRedisGCRA(client, perHour, time.Hour)
	require.NoError(t, err)
	tenantOf := func(key string) string { return key[:len("{t0}")] }
	a, err := NewComposite(Part{Name: "inflight", Limiter: slots, Key: tenantOf}, Part{Name: "hour", Limiter: rate})
	require.NoError(t, err)
	b, err := NewComposite(Part{Name: "hour", Limiter: rate}, Part{Name: "inflight", Limiter: slots, Key: tenantOf})
	require.NoError(t, err)

	var held, peak [tenants]atomic.Int64
	var allowed [tenants][users]atomic.Int64
	var bySlot, byRate atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			c, slotsPart := a, 0
			if g%2 == 1 {
				c, slotsPart = b, 1
			}
			r := rand.New(rand.NewPCG(uint64(g), 2323))
			for range rounds {
				tn, u := r.IntN(tenants), r.IntN(users)
				key := "{t" + strconv.Itoa(tn) + "}:u" + strconv.Itoa(u)
				lease, d, err := c.Acquire(ctx, key, 1)
				if !assert.NoError(t, err) {
					return
				}
				if !d.Allowed {
					if d.Parts[slotsPart].RetryAfter > 0 {
						bySlot.Add(1)
					} else {
						byRate.Add(1)
					}
					assert.False(t, lease.Held())
					time.Sleep(time.Duration(r.IntN(300)) * time.Microsecond)
					continue
				}
				allowed[tn][u].Add(1)
				v := held[tn].Add(1)
				assert.LessOrEqual(t, v, int64(inFlight), "tenant %d", tn)
				for p := peak[tn].Load(); v > p && !peak[tn].CompareAndSwap(p, v); p = peak[tn].Load() {
				}
				time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond) // the work
				held[tn].Add(-1)
				assert.NoError(t, lease.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.Positive(t, bySlot.Load(), "calls were denied for want of a slot")
	assert.Positive(t, byRate.Load(), "calls were denied by the rate")
	reached := 0
	for tn := range tenants {
		if peak[tn].Load() == inFlight {
			reached++
		}
		tenant := "{t" + strconv.Itoa(tn) + "}"
		assert.Equal(t, Result{Limit: inFlight, Remaining: inFlight}, peek(t, slots, tenant).withoutAllowed(), "tenant %d: every slot came back", tn)
		for u := range users {
			n := allowed[tn][u].Load()
			assert.LessOrEqual(t, n, int64(perHour), "tenant %d user %d", tn, u)
			key := tenant + ":u" + strconv.Itoa(u)
			assert.Equal(t, perHour-int(n), peek(t, rate, key).Remaining, "%s: one unit per call allowed, none per denial", key)
		}
	}
	assert.Positive(t, reached, "some tenant held its whole limit in flight")
	t.Logf("denied %d for a slot, %d by the rate; %d of %d tenants reached their limit", bySlot.Load(), byRate.Load(), reached, tenants)
}

// TestRealRedisClusterCompositeWithUnitsInFlightRefusesPartsInDifferentSlots:
// one script call cannot touch keys of two slots, so an Acquire whose
// parts' keys are not under one hash tag is refused with ErrKeysApart, and
// nothing is held or spent.
func TestRealRedisClusterCompositeWithUnitsInFlightRefusesPartsInDifferentSlots(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	ctx := context.Background()
	slots, err := NewRedisConcurrency(client, 5, time.Minute)
	require.NoError(t, err)
	tenant, err := NewRedisTokenBucket(client, PerSecond(1), 50)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "inflight", Limiter: slots},
		Part{Name: "tenant", Limiter: tenant, Key: func(string) string { return "acme" }})
	require.NoError(t, err)
	lease, _, err := c.Acquire(ctx, "alice", 1)
	require.ErrorIs(t, err, ErrKeysApart)
	assert.False(t, lease.Held())
	_, err = c.Allow(ctx, "alice", 1)
	require.ErrorIs(t, err, ErrKeysApart)
	assert.Equal(t, []int64{0, 0, 0}, masterSizes(t, client), "nothing was written")

	together, err := NewComposite(Part{Name: "inflight", Limiter: slots},
		Part{Name: "tenant", Limiter: tenant, Key: func(string) string { return "{acme}" }})
	require.NoError(t, err)
	lease, d, err := together.Acquire(ctx, "{acme}:alice", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	require.NoError(t, lease.Release(ctx))
}
