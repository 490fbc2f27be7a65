package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The differential test of Composites with a part of units in flight: a
// Composite{Concurrency, TokenBucket or FixedWindow} with a fake clock and
// its twin Composite{RedisConcurrency, RedisTokenBucket or
// RedisFixedWindow} on miniredis, given the same random Acquires, Allows,
// Releases, Extends, Refunds and Resets with time moving, must answer
// alike: every Decision, part Result, Lease and error.

// inFlightTwin describes one pair of Composites.
type inFlightTwin struct {
	name   string
	window bool     // the rate part is a fixed window, not a token bucket
	plans  []Policy // the concurrency part's plans per key; nil: its own alone
	// perCall makes the concurrency part PerCall; byTenant keys it by
	// tenant and the rate part by the call's key, rather than the other
	// way round.
	perCall, byTenant bool
}

// twinOpts are the options of the concurrency parts for tw's plans.
func (tw inFlightTwin) twinOpts(table *planMap) []Option {
	if tw.plans == nil {
		return nil
	}
	return []Option{WithPolicyFunc(table.f)}
}

// parts returns the Parts of slots and rate as tw arranges them.
func (tw inFlightTwin) parts(slots, rate Limiter) []Part {
	slotsPart := Part{Name: "inflight", Limiter: slots, PerCall: tw.perCall}
	ratePart := Part{Name: "rate", Limiter: rate}
	if tw.byTenant {
		slotsPart.Key = tenantKey
	} else {
		ratePart.Key = tenantKey
	}
	return []Part{slotsPart, ratePart}
}

// inFlightOwn is the concurrency parts' own policy: 4 in flight, leases
// of 3 s.
var inFlightOwn = Policy{Limit: 4, Window: 3 * time.Second}

// inFlightPlans are the plans of 2, 5 and 20 in flight, each with a TTL
// of its own, and the zero Policy: the part's own.
var inFlightPlans = []Policy{{}, {Limit: 2, Window: 2 * time.Second}, {Limit: 5, Window: 700 * time.Millisecond}, {Limit: 20, Window: 5 * time.Second}}

func TestCompositeWithUnitsInFlightDecidesAlikeInProcessAndOnRedis(t *testing.T) {
	t.Parallel()
	for _, tw := range []inFlightTwin{
		{name: "token bucket"},
		{name: "fixed window", window: true},
		{name: "token bucket, plans", plans: inFlightPlans},
		{name: "fixed window, plans, by tenant", window: true, plans: inFlightPlans, byTenant: true},
		{name: "per call", perCall: true},
	} {
		t.Run(tw.name, func(t *testing.T) {
			for seed := range uint64(sized(1, 3)) {
				t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
					runInFlightTwins(t, tw, rand.New(rand.NewPCG(seed, 2323)), sized(200, 1000))
				})
			}
		})
	}
}

// inFlightGrant is a lease both Composites granted on one step, or the
// units an Allow took (leases that hold nothing).
type inFlightGrant struct {
	local, remote Lease
}

// runInFlightTwins makes steps random steps on tw's two Composites and
// compares their answers after each.
func runInFlightTwins(t *testing.T, tw inFlightTwin, r *rand.Rand, steps int) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	table := newPlanMap()
	_, client, advance := miniredisClock(t)
	local, remote := tw.buildOn(t, clock, table, client)
	keys := []string{"a1", "a2", "b1"}
	var grants []inFlightGrant
	var allowed, expired int
	denied := make([]int, 2) // the denials each part made
	for i := range steps {
		key := keys[r.IntN(len(keys))]
		var step time.Duration
		switch x := r.IntN(20); {
		case x < 7: // a burst: no time passes
		case x == 7:
			step = time.Duration(r.IntN(4000)) * time.Millisecond
		default:
			step = time.Duration(r.IntN(300)) * time.Millisecond
		}
		clock.Advance(step)
		advance(step)
		plan := ""
		if tw.plans != nil && r.IntN(8) == 0 {
			p := tw.plans[r.IntN(len(tw.plans))]
			slotsKey := key
			if tw.byTenant {
				slotsKey = tenantKey(key)
			}
			table.set(slotsKey, p)
			plan = fmt.Sprintf(" plan %d/%v;", p.Limit, p.Window)
		}
		kind := "acquire"
		switch x := r.IntN(20); {
		case x < 8:
		case x < 10:
			kind = "allow"
		case x < 14:
			kind = "release"
		case x < 17:
			kind = "extend"
		case x < 19:
			kind = "refund"
		default:
			kind = "reset"
		}
		if (kind == "release" || kind == "extend") && len(grants) == 0 {
			kind = "acquire"
		}
		n := r.IntN(3)
		if r.IntN(10) == 0 {
			n = r.IntN(8)
		}
		g := 0
		if kind == "release" || kind == "extend" {
			// Mostly recent leases, which may still hold.
			g = len(grants) - 1 - min(r.IntN(len(grants)), r.IntN(6))
		}
		where := fmt.Sprintf("step %d: +%v;%s %s(%q, %d) lease %d", i, step, plan, kind, key, n, g)

		switch kind {
		case "acquire", "allow":
			var ll, lr Lease
			var dl, dr Decision
			var el, er error
			if kind == "acquire" {
				ll, dl, el = local.Acquire(ctx, key, n)
				lr, dr, er = remote.Acquire(ctx, key, n)
			} else {
				dl, el = local.Decide(ctx, key, n)
				dr, er = remote.Decide(ctx, key, n)
			}
			sameErr(t, el, er, where)
			assert.Equal(t, dl.Result, dr.Result, where)
			assert.Equal(t, dl.Parts, dr.Parts, where)
			assert.Equal(t, dl.Policies, dr.Policies, where)
			assert.Equal(t, dl.PolicyIndex, dr.PolicyIndex, where)
			require.True(t, dr.Policies[0].InFlight, where)
			sameLease(t, ll, lr, where)
			if el == nil && dl.Allowed && n > 0 {
				allowed++
				grants = append(grants, inFlightGrant{ll, lr})
			} else if el == nil && !dl.Allowed {
				for i, res := range dl.Parts {
					if res.RetryAfter > 0 {
						denied[i]++
					}
				}
			}
		case "release":
			gr := grants[g]
			assert.Equal(t, gr.local.Held(), gr.remote.Held(), where)
			require.NoError(t, gr.local.Release(ctx), where)
			require.NoError(t, gr.remote.Release(ctx), where)
		case "extend":
			gr := grants[g]
			nl, el := gr.local.Extend(ctx)
			nr, er := gr.remote.Extend(ctx)
			sameErr(t, el, er, where)
			if errors.Is(el, ErrLeaseExpired) {
				expired++
			}
			sameLease(t, nl, nr, where)
			if el == nil {
				grants[g] = inFlightGrant{nl, nr}
			}
		case "refund":
			rl, el := local.Refund(ctx, key, n)
			rr, er := remote.Refund(ctx, key, n)
			sameErr(t, el, er, where)
			assert.Equal(t, rl, rr, where)
		case "reset":
			require.NoError(t, local.Reset(ctx, key), where)
			require.NoError(t, remote.Reset(ctx, key), where)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	// The run saw every kind of answer: each part denied calls.
	assert.Greater(t, allowed, steps/10, "allowed")
	assert.Positive(t, denied[0], "denied for want of a slot")
	assert.Positive(t, denied[1], "denied by the rate")
	assert.Positive(t, expired, "extends of leases no longer held")
}

// buildOn returns tw's two Composites, the Redis one on client.
func (tw inFlightTwin) buildOn(t *testing.T, clock Clock, table *planMap, client redis.Scripter) (*Composite, *Composite) {
	t.Helper()
	opts := tw.twinOpts(table)
	slots, err := NewConcurrency(inFlightOwn.Limit, inFlightOwn.Window, append([]Option{WithClock(clock)}, opts...)...)
	require.NoError(t, err)
	rslots, err := NewRedisConcurrency(client, inFlightOwn.Limit, inFlightOwn.Window, redisOpts(opts)...)
	require.NoError(t, err)
	var rate, rrate Limiter
	if tw.window {
		rate, err = NewFixedWindow(6, 3*time.Second, WithClock(clock))
		require.NoError(t, err)
		rrate, err = NewRedisFixedWindow(client, 6, 3*time.Second)
	} else {
		rate, err = NewTokenBucket(PerSecond(1), 6, WithClock(clock))
		require.NoError(t, err)
		rrate, err = NewRedisTokenBucket(client, PerSecond(1), 6)
	}
	require.NoError(t, err)
	local, err := NewComposite(tw.parts(slots, rate)...)
	require.NoError(t, err)
	remote, err := NewComposite(tw.parts(rslots, rrate)...)
	require.NoError(t, err)
	return local, remote
}

// sameErr checks that el and er are both nil, or both errors of the same
// kind.
func sameErr(t *testing.T, el, er error, where string) {
	t.Helper()
	require.Equal(t, el == nil, er == nil, "%s: in process %v, on Redis %v", where, el, er)
	for _, kind := range []error{ErrCostExceedsLimit, ErrInvalidCost, ErrLeaseExpired, ErrPolicy, ErrBackend} {
		assert.Equal(t, errors.Is(el, kind), errors.Is(er, kind), "%s: %v: in process %v, on Redis %v", where, kind, el, er)
	}
}

// sameLease checks that two leases hold alike: the same key, units and
// TTL.
func sameLease(t *testing.T, l, r Lease, where string) {
	t.Helper()
	assert.Equal(t, l.Held(), r.Held(), where)
	assert.Equal(t, l.Key(), r.Key(), where)
	assert.Equal(t, l.Units(), r.Units(), where)
	assert.Equal(t, l.TTL(), r.TTL(), where)
}
