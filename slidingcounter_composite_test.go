package ratelimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompositeOfSlidingCountersDecidesAsItsParts runs one schedule on a
// Composite of a sliding counter per user and one per tenant (the key's
// first letter), in process and on miniredis, and on the bare counters'
// models: a call is allowed iff both parts allow it, and then both take
// it; each part's Result is its model's (a part that would allow a denied
// call reports its state untouched).
func TestCompositeOfSlidingCountersDecidesAsItsParts(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 8))
	ctx := context.Background()
	tenant := func(key string) string { return key[:1] }
	for round := 0; round < sized(3, 30); round++ {
		userLimit, tenantLimit := 1+r.IntN(6), 2+r.IntN(10)
		userWindow := time.Duration(1+r.Int64N(3000)) * time.Millisecond
		tenantWindow := time.Duration(1+r.Int64N(3000)) * time.Millisecond
		clock := ratelimittest.NewClock(epoch)
		user, err := NewSlidingCounter(userLimit, userWindow, WithClock(clock))
		require.NoError(t, err)
		ten, err := NewSlidingCounter(tenantLimit, tenantWindow, WithClock(clock))
		require.NoError(t, err)
		local, err := NewComposite(Part{Name: "user", Limiter: user}, Part{Name: "tenant", Limiter: ten, Key: tenant})
		require.NoError(t, err)
		_, client, advance := miniredisClock(t)
		ruser, err := NewRedisSlidingCounter(client, userLimit, userWindow)
		require.NoError(t, err)
		rten, err := NewRedisSlidingCounter(client, tenantLimit, tenantWindow)
		require.NoError(t, err)
		remote, err := NewComposite(Part{Name: "user", Limiter: ruser}, Part{Name: "tenant", Limiter: rten, Key: tenant})
		require.NoError(t, err)

		models := map[string][2]*counterModel{
			"local":  {newCounterModel(userLimit, userWindow, 1), newCounterModel(tenantLimit, tenantWindow, 1)},
			"remote": {newCounterModel(userLimit, userWindow, time.Microsecond), newCounterModel(tenantLimit, tenantWindow, time.Microsecond)},
		}
		for i, c := range randomSchedule(r, 200, min(userLimit, tenantLimit), userWindow/time.Duration(userLimit), false, "a1", "a2", "b1") {
			c.advance = c.advance.Truncate(time.Microsecond)
			clock.Advance(c.advance)
			advance(c.advance)
			n := min(c.n, userLimit, tenantLimit)
			for name, comp := range map[string]*Composite{"local": local, "remote": remote} {
				m := models[name]
				keys := [2]string{c.key, tenant(c.key)}
				var want [2]Result
				both := true
				for j := range m {
					m[j].advance(c.advance)
					m[j].latest = max(m[j].latest, m[j].now)
					both = both && int64(n) <= m[j].left(keys[j], m[j].latest)
				}
				for j := range m {
					if both {
						want[j] = m[j].allow(keys[j], n)
					} else if int64(n) <= m[j].left(keys[j], m[j].latest) {
						want[j] = m[j].allow(keys[j], 0) // untouched, nothing to wait for
						want[j].Allowed = false
					} else {
						want[j] = m[j].allow(keys[j], n)
					}
				}
				d, err := comp.Decide(ctx, c.key, n)
				require.NoError(t, err)
				require.Equal(t, both, d.Allowed, "%s round %d step %d", name, round, i)
				require.Equal(t, want[:], d.Parts, "%s round %d step %d: %+v", name, round, i, c)
			}
		}
	}
}

func TestCompositeOfSlidingCountersRefundsSettlesAndResets(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	a, err := NewSlidingCounter(10, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	b, err := NewFixedWindow(10, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	_, client, advance := miniredisClock(t)
	ra, err := NewRedisSlidingCounter(client, 10, 10*time.Second)
	require.NoError(t, err)
	rb, err := NewRedisFixedWindow(client, 10, 10*time.Second)
	require.NoError(t, err)
	for _, x := range []struct {
		parts   []Limiter
		advance func(time.Duration)
	}{{[]Limiter{a, b}, clock.Advance}, {[]Limiter{ra, rb}, advance}} {
		c, err := NewComposite(Part{Name: "sliding", Limiter: x.parts[0]}, Part{Name: "fixed", Limiter: x.parts[1]})
		require.NoError(t, err)
		_, err = c.Allow(ctx, "k", 8)
		require.NoError(t, err)
		x.advance(10 * time.Second) // the counter's 8 weigh 8; the window has ended
		d, err := c.Decide(ctx, "k", 4)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, []Result{no(10, 2, 2500*ms, 10*time.Second), {Limit: 10, Remaining: 10}}, d.Parts)
		_, err = c.Settle(ctx, "k", 0, 2)
		require.NoError(t, err)
		d, err = c.Decide(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, []Result{ok(10, 0, 20*time.Second), ok(10, 8, 10*time.Second)}, d.Parts, "a Settle counts in both")
		_, err = c.Refund(ctx, "k", 2)
		require.NoError(t, err)
		d, err = c.Decide(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, []Result{ok(10, 2, 10*time.Second), ok(10, 10, 0)}, d.Parts, "a Refund gives back to both")
		require.NoError(t, c.Reset(ctx, "k"))
		d, err = c.Decide(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, []Result{ok(10, 10, 0), ok(10, 10, 0)}, d.Parts, "Reset forgets both")
	}
}
