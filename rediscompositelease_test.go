package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Redis Composite with a RedisConcurrency part, on miniredis: one script
// request per call, all or nothing, the part's leases released by the
// part, and what its hooks, a DenyCache and the constructor make of it.

// redisFiveInFlightAndHundredAMinute returns, on client, a Composite of at
// most 5 in flight (leases of a minute) and 100 a minute, with its parts.
func redisFiveInFlightAndHundredAMinute(t *testing.T, client redis.Scripter, opts ...Option) (*Composite, *RedisConcurrency, *RedisFixedWindow) {
	t.Helper()
	slots, err := NewRedisConcurrency(client, 5, time.Minute, redisOpts(opts)...)
	require.NoError(t, err)
	rate, err := NewRedisFixedWindow(client, 100, time.Minute)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "inflight", Limiter: slots}, Part{Name: "rpm", Limiter: rate})
	require.NoError(t, err)
	return c, slots, rate
}

func TestRedisCompositeAcquireIsOneScriptRequestThatTakesNoRateUnitsWithoutASlot(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	evals := &evalCounter{}
	client.AddHook(evals)
	c, slots, rate := redisFiveInFlightAndHundredAMinute(t, client)

	var leases []Lease
	for i := range 5 {
		lease, d, err := c.Acquire(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "call %d", i)
		assert.Equal(t, []NamedPolicy{
			{Name: "inflight", Policy: Policy{Limit: 5, Window: time.Minute}, InFlight: true},
			{Name: "rpm", Policy: Policy{Limit: 100, Window: time.Minute}},
		}, d.Policies)
		assert.Equal(t, "k", lease.Key())
		assert.Equal(t, time.Minute, lease.TTL())
		leases = append(leases, lease)
		if i == 0 {
			evals.calls.Store(0) // the first loaded the script (NOSCRIPT, then EVAL)
		}
	}
	assert.Equal(t, int64(4), evals.calls.Load(), "one script request per Acquire")
	_, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "inflight", d.Policy.Name)
	assert.Equal(t, no(5, 0, time.Minute, time.Minute), d.Parts[0])
	assert.Equal(t, Result{Limit: 100, Remaining: 95, ResetAfter: time.Minute}, d.Parts[1], "untouched, nothing to wait for")
	assert.Equal(t, 95, peek(t, rate, "k").Remaining, "the denial took no rate unit")

	require.NoError(t, leases[0].Release(ctx))
	require.NoError(t, leases[1].Release(ctx))
	require.NoError(t, leases[2].Release(ctx), "the part granted it")
	assert.Equal(t, 3, peek(t, slots, "k").Remaining, "each release gave back a slot")
	assert.Equal(t, 95, peek(t, rate, "k").Remaining, "and no rate unit")
	extended, err := leases[3].Extend(ctx)
	require.NoError(t, err)
	assert.Equal(t, time.Minute, extended.TTL())
}

func TestRedisCompositeAcquireTakesNoSlotWhenTheRateDenies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, client, advance := miniredisClock(t)
	c, slots, rate := redisFiveInFlightAndHundredAMinute(t, client)

	for i := range 100 {
		lease, d, err := c.Acquire(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "call %d", i)
		require.NoError(t, lease.Release(ctx))
	}
	advance(10 * time.Second)
	lease, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.False(t, lease.Held())
	assert.Equal(t, "rpm", d.Policy.Name)
	assert.Equal(t, 50*time.Second, d.RetryAfter, "the minute's window ends")
	assert.Equal(t, Result{Limit: 5, Remaining: 5}, d.Parts[0], "the slot was free and stays so")
	assert.Equal(t, Result{Limit: 5, Remaining: 5}, peek(t, slots, "k").withoutAllowed(), "the denial held no slot")
	assert.Equal(t, 0, peek(t, rate, "k").Remaining)
}

func TestRedisCompositeAllowHoldsItsSlotUntilTheTTL(t *testing.T) {
	ctx := context.Background()
	_, client, advance := miniredisClock(t)
	c, slots, rate := redisFiveInFlightAndHundredAMinute(t, client)

	res, err := c.Allow(ctx, "k", 2)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, 3, peek(t, slots, "k").Remaining, "two units held, by no lease")
	assert.Equal(t, 98, peek(t, rate, "k").Remaining)
	advance(time.Minute - time.Microsecond)
	assert.Equal(t, 3, peek(t, slots, "k").Remaining)
	advance(time.Microsecond)
	assert.Equal(t, 5, peek(t, slots, "k").Remaining, "back at the TTL")
}

func TestRedisCompositeRefundAndSettleLeaveUnitsInFlightAndResetDropsThem(t *testing.T) {
	_, client, _ := miniredisClock(t)
	h := &adjustRecorder{}
	slots, err := NewRedisConcurrency(client, 5, time.Minute, WithHooks(h), WithName("slots"))
	require.NoError(t, err)
	rate, err := NewRedisTokenBucket(client, PerMinute(100), 100)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "inflight", Limiter: slots}, Part{Name: "rpm", Limiter: rate})
	require.NoError(t, err)

	checkAdjustsTheRatePartsOnly(t, c, slots, rate, h)
}

func TestRedisCompositeConcurrencyPartReportsItsShareWithItsLease(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	h := &recordingHooks{}
	c, _, _ := redisFiveInFlightAndHundredAMinute(t, client, WithHooks(h), WithName("slots"))

	lease, _, err := c.Acquire(ctx, "k", 2)
	require.NoError(t, err)
	ev := h.last()
	assert.Equal(t, "slots", ev.Limiter)
	assert.Equal(t, KeyDigest("k"), ev.Key)
	assert.Equal(t, 2, ev.Cost)
	assert.Equal(t, lease, ev.Lease, "the part's share carries the lease")
	assert.Equal(t, []NamedPolicy{{Name: "default", Policy: Policy{Limit: 5, Window: time.Minute}, InFlight: true}}, ev.Policies)
	assert.Equal(t, ok(5, 3, time.Minute), ev.Result)

	_, err = c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, h.last().Lease.Held(), "an Allow's units are no one's to release")
}

func TestDenyCacheNeverRemembersARedisCompositesDenialOfUnitsInFlight(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	c, _, _ := redisFiveInFlightAndHundredAMinute(t, client)
	cache, err := NewDenyCache(c, DenyCacheConfig{})
	require.NoError(t, err)

	var leases []Lease
	for range 5 {
		lease, _, err := cache.Acquire(ctx, "k", 1)
		require.NoError(t, err)
		leases = append(leases, lease)
	}
	_, d, err := cache.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.NoError(t, leases[0].Release(ctx))
	lease, d, err := cache.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the freed slot is taken at once: the denial was not remembered")
	assert.Equal(t, FromBackend, d.Source)
	assert.True(t, lease.Held())
}

func TestRedisCompositeRefusesTwoConcurrencyPartsAndAMix(t *testing.T) {
	_, client, _ := miniredisClock(t)
	a, err := NewRedisConcurrency(client, 1, time.Second)
	require.NoError(t, err)
	b, err := NewRedisConcurrency(client, 2, time.Second)
	require.NoError(t, err)
	_, err = NewComposite(Part{Name: "one", Limiter: a}, Part{Name: "two", Limiter: b})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), `["one" "two"]`)

	local, err := NewConcurrency(1, time.Second)
	require.NoError(t, err)
	rate, err := NewRedisTokenBucket(client, PerSecond(1), 10)
	require.NoError(t, err)
	_, err = NewComposite(Part{Name: "slots", Limiter: local}, Part{Name: "rate", Limiter: rate})
	require.ErrorIs(t, err, ErrInvalidConfig, "an in-process Concurrency among Redis parts")
	tokens, err := NewTokenBucket(PerSecond(1), 10)
	require.NoError(t, err)
	_, err = NewComposite(Part{Name: "slots", Limiter: a}, Part{Name: "rate", Limiter: tokens})
	require.ErrorIs(t, err, ErrInvalidConfig, "a RedisConcurrency among in-process parts")
	_, err = NewComposite(Part{Name: "slots", Limiter: &RedisConcurrency{}}, Part{Name: "rate", Limiter: rate})
	require.ErrorIs(t, err, ErrInvalidConfig, "a zero-value RedisConcurrency")

	_, other, _ := miniredisClock(t)
	elsewhere, err := NewRedisTokenBucket(other, PerSecond(1), 10)
	require.NoError(t, err)
	_, err = NewComposite(Part{Name: "slots", Limiter: a}, Part{Name: "rate", Limiter: elsewhere})
	require.ErrorIs(t, err, ErrInvalidConfig, "parts on two clients")
}
