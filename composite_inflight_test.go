package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fiveInFlightAndHundredAMinute returns a Composite of at most 5 in flight
// (leases of a minute) and 100 a minute, with its parts.
func fiveInFlightAndHundredAMinute(t *testing.T, clock Clock) (*Composite, *Concurrency, *FixedWindow) {
	t.Helper()
	slots, err := NewConcurrency(5, time.Minute, WithClock(clock))
	require.NoError(t, err)
	rate, err := NewFixedWindow(100, time.Minute, WithClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "inflight", Limiter: slots}, Part{Name: "rpm", Limiter: rate})
	require.NoError(t, err)
	return c, slots, rate
}

// peek returns what l's key has left, deciding nothing.
func peek(t *testing.T, l Decider, key string) Result {
	t.Helper()
	d, err := l.Decide(context.Background(), key, 0)
	require.NoError(t, err)
	return d.Result
}

func TestCompositeAcquireTakesNoRateUnitsWithoutASlot(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	c, slots, rate := fiveInFlightAndHundredAMinute(t, clock)

	var leases []Lease
	for i := range 5 {
		lease, d, err := c.Acquire(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "call %d", i)
		assert.Equal(t, []NamedPolicy{
			{Name: "inflight", Policy: Policy{Limit: 5, Window: time.Minute}, InFlight: true},
			{Name: "rpm", Policy: Policy{Limit: 100, Window: time.Minute}},
		}, d.Policies)
		leases = append(leases, lease)
	}
	_, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "inflight", d.Policy.Name)
	assert.Equal(t, no(5, 0, time.Minute, time.Minute), d.Parts[0])
	assert.Equal(t, Result{Limit: 100, Remaining: 95, ResetAfter: time.Minute}, d.Parts[1], "untouched, nothing to wait for")
	assert.Equal(t, 95, peek(t, rate, "k").Remaining, "the denial took no rate unit")

	clock.Advance(time.Second)
	require.NoError(t, leases[0].Release(ctx))
	assert.Equal(t, 95, peek(t, rate, "k").Remaining, "a release gives back the slot alone")
	lease, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 94, peek(t, rate, "k").Remaining)
	assert.Equal(t, 0, peek(t, slots, "k").Remaining)
	require.NoError(t, lease.Release(ctx))
	assert.Equal(t, 1, peek(t, slots, "k").Remaining)
}

func TestCompositeAcquireTakesNoSlotWhenTheRateDenies(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	c, slots, rate := fiveInFlightAndHundredAMinute(t, clock)

	for i := range 100 {
		lease, d, err := c.Acquire(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed, "call %d", i)
		require.NoError(t, lease.Release(ctx))
	}
	clock.Advance(10 * time.Second)
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

// withoutAllowed returns r with Allowed false, to compare a peek's state.
func (r Result) withoutAllowed() Result {
	r.Allowed = false
	return r
}

func TestCompositeAllowHoldsItsSlotUntilTheTTL(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	c, slots, rate := fiveInFlightAndHundredAMinute(t, clock)

	res, err := c.Allow(ctx, "k", 2)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, 3, peek(t, slots, "k").Remaining, "two units held, by no lease")
	assert.Equal(t, 98, peek(t, rate, "k").Remaining)
	clock.Advance(time.Minute)
	assert.Equal(t, 5, peek(t, slots, "k").Remaining, "back at the TTL")
}

func TestCompositeRefundAndSettleLeaveUnitsInFlight(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	h := &adjustRecorder{}
	slots, err := NewConcurrency(5, time.Minute, WithClock(clock), WithHooks(h), WithName("slots"))
	require.NoError(t, err)
	rate, err := NewTokenBucket(PerMinute(100), 100, WithClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "inflight", Limiter: slots}, Part{Name: "rpm", Limiter: rate})
	require.NoError(t, err)

	checkAdjustsTheRatePartsOnly(t, c, slots, rate, h)
}

func TestCompositeConcurrencyPartKeyedPerPlan(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	plans := map[string]int{"free": 2, "pro": 5, "team": 20}
	planOf := func(_ context.Context, key string) (Policy, error) {
		limit, ok := plans[key[:len(key)-2]]
		if !ok {
			return Policy{}, fmt.Errorf("no plan for %q", key)
		}
		return Policy{Limit: limit, Window: 30 * time.Second}, nil
	}
	h := &recordingHooks{}
	slots, err := NewConcurrency(1, time.Minute, WithClock(clock), WithPolicyFunc(planOf), WithHooks(h))
	require.NoError(t, err)
	rate, err := NewTokenBucket(PerMinute(1000), 1000, WithClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "inflight", Limiter: slots}, Part{Name: "rpm", Limiter: rate})
	require.NoError(t, err)

	for plan, limit := range plans {
		key := plan + "-1"
		want := Policy{Limit: limit, Window: 30 * time.Second}
		policies, err := c.Policies(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, NamedPolicy{Name: "inflight", Policy: want, InFlight: true}, policies[0])
		var leases []Lease
		for {
			lease, d, err := c.Acquire(ctx, key, 1)
			require.NoError(t, err)
			if !d.Allowed {
				assert.Equal(t, NamedPolicy{Name: "inflight", Policy: want, InFlight: true}, d.Policy)
				assert.Equal(t, 30*time.Second, d.RetryAfter)
				assert.True(t, d.inFlight())
				break
			}
			assert.Equal(t, 30*time.Second, lease.TTL())
			assert.Equal(t, lease, h.last().Lease, "the part reports its lease")
			assert.Equal(t, want, h.last().Policy.Policy)
			assert.True(t, h.last().Policy.InFlight)
			leases = append(leases, lease)
		}
		assert.Len(t, leases, limit, "plan %s", plan)
		_, err = leases[0].Extend(ctx)
		require.NoError(t, err)
		for _, l := range leases {
			require.NoError(t, l.Release(ctx))
		}
	}
	_, _, err = c.Acquire(ctx, "unknown-1", 1)
	require.ErrorIs(t, err, ErrPolicy)
	assert.Contains(t, err.Error(), `part "inflight"`)
}

func TestCompositeRefusesASecondConcurrencyOrRedisParts(t *testing.T) {
	a, err := NewConcurrency(1, time.Second)
	require.NoError(t, err)
	b, err := NewConcurrency(2, time.Second)
	require.NoError(t, err)
	_, err = NewComposite(Part{Name: "one", Limiter: a}, Part{Name: "two", Limiter: b})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), `["one" "two"]`)

	_, client, _ := miniredisClock(t)
	r, err := NewRedisTokenBucket(client, PerSecond(1), 10)
	require.NoError(t, err)
	_, err = NewComposite(Part{Name: "slots", Limiter: a}, Part{Name: "rate", Limiter: r})
	require.ErrorIs(t, err, ErrInvalidConfig, "an in-process Concurrency among Redis parts")
}

func TestACompositesLeaseIsReleasedThroughItsConcurrencyPart(t *testing.T) {
	ctx := context.Background()
	c, _, _ := fiveInFlightAndHundredAMinute(t, ratelimittest.NewClock(epoch))
	require.NoError(t, (Lease{}).Release(ctx))

	own, _, err := c.Acquire(ctx, "k", 5)
	require.NoError(t, err)
	_, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "the five slots are held")
	require.NoError(t, own.Release(ctx), "the part granted it")
	_, d, err = c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "the release gave the slots back")

	rate, err := NewTokenBucket(PerSecond(1), 2)
	require.NoError(t, err)
	plain, err := NewComposite(Part{Name: "rate", Limiter: rate})
	require.NoError(t, err)
	lease, d, err := plain.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.False(t, lease.Held(), "no part holds units in flight")
	require.NoError(t, lease.Release(ctx))
}

func TestCompositePerCallConcurrencyPartHoldsOneUnitPerCall(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	slots, err := NewConcurrency(2, time.Minute, WithClock(clock))
	require.NoError(t, err)
	tokens, err := NewTokenBucket(PerMinute(1000), 1000, WithClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "requests", Limiter: slots, PerCall: true}, Part{Name: "tokens", Limiter: tokens})
	require.NoError(t, err)
	lease, d, err := c.Acquire(ctx, "k", 300)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, 1, lease.Units())
	assert.Equal(t, 1, peek(t, slots, "k").Remaining)
	assert.Equal(t, 700, peek(t, tokens, "k").Remaining)
}

func TestCompositeAcquireErrorsTakeNothing(t *testing.T) {
	ctx := context.Background()
	c, slots, rate := fiveInFlightAndHundredAMinute(t, ratelimittest.NewClock(epoch))
	lease, d, err := c.Acquire(ctx, "k", 6)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.False(t, lease.Held())
	assert.Equal(t, "inflight", d.Policy.Name)
	_, _, err = c.Acquire(ctx, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
	var nilCtx context.Context
	_, _, err = c.Acquire(nilCtx, "k", 1)
	require.True(t, errors.Is(err, ErrCaller))
	assert.Equal(t, 5, peek(t, slots, "k").Remaining)
	assert.Equal(t, 100, peek(t, rate, "k").Remaining)
}

// checkAdjustsTheRatePartsOnly checks, on c, a Composite of slots (5 in
// flight, reporting to h as "slots") and rate (100 a minute), that Refund
// and Settle adjust the rate part alone and Reset drops the leases too.
func checkAdjustsTheRatePartsOnly(t *testing.T, c *Composite, slots, rate Decider, h *adjustRecorder) {
	t.Helper()
	ctx := context.Background()
	lease, d, err := c.Acquire(ctx, "k", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, 98, peek(t, rate, "k").Remaining)
	h.take(t, nil)

	res, err := c.Refund(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, 100, peek(t, rate, "k").Remaining, "the rate part got its units back")
	assert.Equal(t, 3, peek(t, slots, "k").Remaining, "the units in flight stay held")
	assert.Equal(t, ok(5, 3, time.Minute), res, "the slots bind the combined Result")
	res, err = c.Settle(ctx, "k", 0, 10)
	require.NoError(t, err)
	assert.Equal(t, 90, peek(t, rate, "k").Remaining)
	assert.Equal(t, 3, peek(t, slots, "k").Remaining)
	assert.True(t, res.Allowed)
	assert.Empty(t, h.take(t, nil), "the concurrency part hears of no Refund or Settle")

	require.NoError(t, c.Reset(ctx, "k"))
	assert.Equal(t, []AdjustEvent{{Limiter: "slots", Op: AdjustReset, Key: KeyDigest("k")}}, h.take(t, nil))
	assert.Equal(t, 5, peek(t, slots, "k").Remaining, "a Reset drops the key's leases")
	assert.Equal(t, 100, peek(t, rate, "k").Remaining)
	_, err = lease.Extend(ctx)
	require.ErrorIs(t, err, ErrLeaseExpired)
}
