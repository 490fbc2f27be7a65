package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDenyCacheAroundACompositeOfKeyedPartsAgesByTheKeysPlan: a DenyCache
// remembers a Composite's denial made under a key's plan, answers it aged
// by that plan's rate exactly as the Composite would, and forgets it once
// the plan changes.
func TestDenyCacheAroundACompositeOfKeyedPartsAgesByTheKeysPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := newKeyedSetup(diffCompositeShapes[0]...)
	clock := ratelimittest.NewClock(epoch)
	c := setup.build(t, nil, WithClock(clock))
	cache, err := NewDenyCache(c, DenyCacheConfig{Clock: clock, MaxAge: time.Minute})
	require.NoError(t, err)

	// tpm: 2 per 1.6 s (800 ms a unit) rather than its own 4 per 800 ms.
	plan := Policy{Limit: 2, Window: 1600 * ms}
	setup.plans[1].set("a1", plan)
	d, err := cache.Decide(ctx, "a1", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = cache.Decide(ctx, "a1", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, FromBackend, d.Source)

	clock.Advance(300 * ms)
	got, err := cache.Decide(ctx, "a1", 1)
	require.NoError(t, err)
	assert.Equal(t, FromDenyCache, got.Source)
	want, err := c.Decide(ctx, "a1", 1)
	require.NoError(t, err)
	assert.Equal(t, want.Result, got.Result)
	assert.Equal(t, want.Parts, got.Parts)
	assert.Equal(t, want.Policies, got.Policies)
	assert.Equal(t, NamedPolicy{Name: "tpm", Policy: plan}, got.Policy)
	assert.Equal(t, 500*ms, got.RetryAfter)

	// Raised: the backend is asked, and allows.
	setup.plans[1].set("a1", Policy{Limit: 10, Window: 8 * time.Second})
	got, err = cache.Decide(ctx, "a1", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, got.Source)
	assert.True(t, got.Allowed)
}

// TestGuardAndShadowAroundACompositeOfKeyedParts: a Guard whose Composite
// of keyed parts is down answers with the key's plans, and a Shadow shows
// a denial under the key's plan.
func TestGuardAndShadowAroundACompositeOfKeyedParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := newKeyedSetup(diffCompositeShapes[0]...)
	mr, client, _ := miniredisClock(t)
	c := setup.build(t, client)
	plan := Policy{Limit: 1, Window: 800 * ms}
	setup.plans[1].set("a1", plan)

	shadow, err := NewShadow(c, ShadowConfig{})
	require.NoError(t, err)
	d, err := shadow.Decide(ctx, "a1", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	d, err = shadow.Decide(ctx, "a1", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.True(t, d.WouldDeny)
	assert.Equal(t, NamedPolicy{Name: "tpm", Policy: plan}, d.Policy)
	assert.False(t, d.Enforced.Allowed)

	guard, err := NewGuard(c, GuardConfig{OnFailure: FailClosed, Timeout: 100 * ms})
	require.NoError(t, err)
	mr.Close()
	d, err = guard.Decide(ctx, "a1", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFailClosed, d.Source)
	assert.Equal(t, setup.policies("a1"), d.Policies)
	assert.Equal(t, 1, d.Limit)
	policies, err := guard.Policies(ctx, "a1")
	require.NoError(t, err)
	assert.Equal(t, setup.policies("a1"), policies)
}

// TestCompositeOfKeyedPartsReportsTheKeysPlanToHooks: a keyed part's hooks
// hear its share of a Composite's decision under the key's plan.
func TestCompositeOfKeyedPartsReportsTheKeysPlanToHooks(t *testing.T) {
	t.Parallel()
	plans := newPlanMap()
	plan := Policy{Limit: 7, Window: 7 * time.Second}
	plans.set("k", plan)
	hooks := &recordingHooks{}
	tpm, err := NewTokenBucket(PerSecond(1), 3, WithPolicyFunc(plans.f), WithHooks(hooks))
	require.NoError(t, err)
	rpm, err := NewGCRA(100, time.Minute)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "rpm", Limiter: rpm, PerCall: true}, Part{Name: "tpm", Limiter: tpm})
	require.NoError(t, err)
	res, err := c.Allow(context.Background(), "k", 5)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	ev := hooks.last()
	assert.Equal(t, plan, ev.Policy.Policy)
	assert.Equal(t, 7, ev.Limit)
	assert.Equal(t, 2, ev.Remaining)
}
