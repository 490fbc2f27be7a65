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

// TestRealRedisSettleWithATokenAppliesOnceAfterALostReply: a Settle whose
// reply is lost (the server ran it while the client timed out) and that is
// sent again with the same token changes the key once.
func TestRealRedisSettleWithATokenAppliesOnceAfterALostReply(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t, func(o *redis.Options) {
		o.ReadTimeout = 200 * time.Millisecond
		o.MaxRetries = -1
		o.PoolSize = 1
	})
	ctx := context.Background()
	b, err := NewRedisTokenBucket(client, Every(1000*time.Second), 100) // no refill worth counting
	require.NoError(t, err)
	res, err := b.Allow(ctx, "llm", 10)
	require.NoError(t, err)
	require.True(t, res.Allowed)

	server.Pause()
	_, err = b.Settle(ctx, "llm", 10, 40, WithToken("request-7"))
	server.Resume()
	require.Error(t, err, "the reply was lost: the client cannot know whether the Settle ran")

	res, err = b.Settle(ctx, "llm", 10, 40, WithToken("request-7"))
	require.NoError(t, err, "sent again with the same token")
	assert.Equal(t, 60, res.Remaining, "30 more taken once: 100 - 40")
	res, err = b.Allow(ctx, "llm", 0)
	require.NoError(t, err)
	assert.Equal(t, 60, res.Remaining)

	ttl, err := client.PTTL(ctx, "ratelimit:settled:33:ratelimit:tb:100:1000000000:{llm}:request-7").Result()
	require.NoError(t, err)
	assert.InDelta(t, float64(SettleTokenTTL), float64(ttl), float64(5*time.Second), "the token is remembered for SettleTokenTTL")

	res, err = b.Settle(ctx, "llm", 10, 40, WithToken("request-8"))
	require.NoError(t, err)
	assert.Equal(t, 30, res.Remaining, "another token applies")
}

// TestRealRedisCompositeNeverLeaksUnderConcurrency: 64 goroutines on
// composites whose parts share keys; the totals equal the strictest bound.
func TestRealRedisCompositeNeverLeaksUnderConcurrency(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	checkCompositeNeverLeaks(t, client)
}

// TestRealRedisClusterCompositeNeverLeaks runs the same on a 3-master cluster,
// with the parts' keys under one hash tag.
func TestRealRedisClusterCompositeNeverLeaks(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	checkCompositeNeverLeaks(t, client)
	sizes := masterSizes(t, client)
	for _, n := range sizes {
		assert.Positive(t, n, "every master holds keys: %v", sizes)
	}
}

// checkCompositeNeverLeaks runs 64 goroutines on two Composites over the
// same per-user and per-tenant limits (per hour, so nothing refills during
// the test): users of 5 per hour in tenants of 12 per hour. Every tenant's
// total is min(12, 5 × its users), and no user passes 5.
func checkCompositeNeverLeaks(t *testing.T, client redis.Scripter) {
	ctx := context.Background()
	user, err := NewRedisGCRA(client, 5, time.Hour)
	require.NoError(t, err)
	tenant, err := NewRedisFixedWindow(client, 12, time.Hour)
	require.NoError(t, err)
	tenantOf := func(key string) string { return key[:len("{t00}")] }
	a, err := NewComposite(Part{Name: "user", Limiter: user}, Part{Name: "tenant", Limiter: tenant, Key: tenantOf})
	require.NoError(t, err)
	b, err := NewComposite(Part{Name: "tenant", Limiter: tenant, Key: tenantOf}, Part{Name: "user", Limiter: user})
	require.NoError(t, err)

	const tenants, usersPerTenant, goroutines = 20, 4, 64
	var allowed [tenants][usersPerTenant]atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := a
			if g%2 == 1 {
				c = b
			}
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 60 {
				tn, u := r.IntN(tenants), r.IntN(usersPerTenant)
				key := "{t" + twoDigits(tn) + "}:u" + strconv.Itoa(u)
				res, err := c.Allow(ctx, key, 1)
				if !assert.NoError(t, err) {
					return
				}
				if res.Allowed {
					allowed[tn][u].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for tn := range tenants {
		var total int64
		for u := range usersPerTenant {
			n := allowed[tn][u].Load()
			assert.LessOrEqual(t, n, int64(5), "tenant %d user %d", tn, u)
			total += n
		}
		assert.Equal(t, int64(12), total, "tenant %d: its limit, not less (a leak) and not more", tn)
	}
}

// twoDigits formats 0 <= i < 100 with two digits.
func twoDigits(i int) string {
	return string([]byte{byte('0' + i/10), byte('0' + i%10)})
}

// TestRealRedisClusterCompositeRefusesPartsInDifferentSlots: one script call
// cannot touch keys of two slots, so a Composite whose keys are not under one
// hash tag is refused with an error, and nothing is spent.
func TestRealRedisClusterCompositeRefusesPartsInDifferentSlots(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	ctx := context.Background()
	user, err := NewRedisTokenBucket(client, PerSecond(1), 5)
	require.NoError(t, err)
	tenant, err := NewRedisTokenBucket(client, PerSecond(1), 50)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "user", Limiter: user},
		Part{Name: "tenant", Limiter: tenant, Key: func(string) string { return "acme" }})
	require.NoError(t, err)
	_, err = c.Allow(ctx, "alice", 1)
	require.ErrorContains(t, err, "different hash slots")
	assert.Equal(t, []int64{0, 0, 0}, masterSizes(t, client), "nothing was written")

	_, err = c.Settle(ctx, "alice", 1, 0)
	require.ErrorContains(t, err, "different hash slots")
}
