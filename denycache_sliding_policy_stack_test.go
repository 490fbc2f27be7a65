package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDenyCacheForgetsASlidingDenialOnceTheKeysPolicyChanges: a sliding
// window's denial of n is remembered for n alone, and, as every denial,
// only while the key's policy is the one it was made under: once the
// key's plan is raised, the same call goes to the backend, which allows
// it. In process and on miniredis, for the sliding log and the counter.
func TestDenyCacheForgetsASlidingDenialOnceTheKeysPolicyChanges(t *testing.T) {
	for _, c := range []struct {
		name  string
		build func(t *testing.T, plans *planMap, clock Clock) Limiter
	}{
		{"SlidingLog", func(t *testing.T, plans *planMap, clock Clock) Limiter {
			l, err := NewSlidingLog(2, time.Minute, WithClock(clock), WithPolicyFunc(plans.f))
			require.NoError(t, err)
			return l
		}},
		{"SlidingCounter", func(t *testing.T, plans *planMap, clock Clock) Limiter {
			l, err := NewSlidingCounter(2, time.Minute, WithClock(clock), WithPolicyFunc(plans.f))
			require.NoError(t, err)
			return l
		}},
		{"RedisSlidingLog", func(t *testing.T, plans *planMap, _ Clock) Limiter {
			_, client, _ := miniredisClock(t)
			l, err := NewRedisSlidingLog(client, 2, time.Minute, WithPolicyFunc(plans.f))
			require.NoError(t, err)
			return l
		}},
		{"RedisSlidingCounter", func(t *testing.T, plans *planMap, _ Clock) Limiter {
			_, client, _ := miniredisClock(t)
			l, err := NewRedisSlidingCounter(client, 2, time.Minute, WithPolicyFunc(plans.f))
			require.NoError(t, err)
			return l
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plans := newPlanMap()
			plans.set("k", Policy{Limit: 2, Window: time.Minute})
			clock := ratelimittest.NewClock(epoch)
			cache, err := NewDenyCache(c.build(t, plans, clock), DenyCacheConfig{Clock: clock, MaxAge: time.Minute})
			require.NoError(t, err)
			ctx := context.Background()
			for _, want := range []bool{true, true, false} {
				d, err := cache.Decide(ctx, "k", 1)
				require.NoError(t, err)
				require.Equal(t, want, d.Allowed)
			}
			d, err := cache.Decide(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, FromDenyCache, d.Source, "remembered while the policy holds")

			plans.set("k", Policy{Limit: 10, Window: time.Minute})
			d, err = cache.Decide(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, FromBackend, d.Source, "a raised plan may allow what the old one denied")
			assert.True(t, d.Allowed)
			assert.Equal(t, Policy{Limit: 10, Window: time.Minute}, d.Policy.Policy)
		})
	}
}
