package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGuardQuotaFailsClosedWhileThePerSecondPartFailsOver: a Composite of
// a per-second part and a monthly quota, the quota failing closed: while
// Redis is away every call is denied by the quota, with its RetryAfter,
// and nothing is asked of the fallback; Parts, Policies and Source say so.
func TestGuardQuotaFailsClosedWhileThePerSecondPartFailsOver(t *testing.T) {
	q := newQuotaFleet(t, 1, GuardConfig{
		OnFailure: FailOver, PartFailure: map[string]FailurePolicy{"month": FailClosed},
		FailClosedRetryAfter: 30 * time.Second,
	})
	g := q.guards[0]
	q.spend(t, "acme", 10)
	q.m.Close()
	ctx := context.Background()
	for i := range 10 {
		wait := 30 * time.Second // FailClosedRetryAfter
		if i >= 3 {
			wait = time.Hour // the rest of the open breaker's cool-down
		}
		d, err := g.Decide(ctx, "acme", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed)
		assert.Equal(t, FromFailClosed, d.Source)
		assert.Equal(t, "month", d.Policy.Name)
		assert.Equal(t, 1, d.PolicyIndex)
		assert.Equal(t, []Result{{Limit: 30}, {Limit: 120, RetryAfter: wait, ResetAfter: wait}}, d.Parts)
		assert.Equal(t, Result{Limit: 120, RetryAfter: wait, ResetAfter: wait}, d.Result)
	}
	d, err := g.Decide(ctx, "acme", 0)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a peek is allowed")
	assert.Equal(t, FromFallback, d.Source, "and answered by the parts that fail over")
}

// TestGuardQuotaFailsOpenWhileThePerSecondPartFailsOver: the quota fails
// open, the per-second part fails over: while Redis is away, calls are
// limited by the per-second part's fallback alone (its share, 10 of 30 in a
// burst, over three replicas), and each answer names it.
func TestGuardQuotaFailsOpenWhileThePerSecondPartFailsOver(t *testing.T) {
	q := newQuotaFleet(t, 3, GuardConfig{
		OnFailure: FailOver, PartFailure: map[string]FailurePolicy{"month": FailOpen},
	})
	g := q.guards[0]
	q.spend(t, "acme", 118) // the quota is nearly spent; failing open, it does not bind
	q.m.Close()
	ctx := context.Background()
	q.step(time.Minute) // the per-second part is full again
	allowed := 0
	for range 20 {
		d, err := g.Decide(ctx, "acme", 1)
		require.NoError(t, err)
		assert.Equal(t, FromFallback, d.Source)
		assert.Equal(t, "rps", d.Policy.Name, "the part whose numbers are known")
		require.Len(t, d.Parts, 2)
		assert.Equal(t, 30, d.Parts[0].Limit)
		assert.Equal(t, Result{Allowed: d.Allowed, Limit: 120}, d.Parts[1], "the quota fails open: its Limit alone")
		if d.Allowed {
			allowed++
		}
	}
	assert.Equal(t, 10, allowed, "the per-second part's share")
}

// TestGuardPartFailureWithEveryPartOnOnePolicyAnswersAsAWhole: a
// PartFailure that gives every part the same policy answers as OnFailure
// of that policy would, whatever OnFailure says.
func TestGuardPartFailureWithEveryPartOnOnePolicyAnswersAsAWhole(t *testing.T) {
	q := newQuotaFleet(t, 1, GuardConfig{
		OnFailure:   FailOver,
		PartFailure: map[string]FailurePolicy{"rps": FailClosed, "month": FailClosed},
	})
	q.m.Close()
	d, err := q.guards[0].Decide(context.Background(), "acme", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFailClosed, d.Source)
	assert.Equal(t, "rps", d.Policy.Name, "the tightest policy, as a Guard failing closed names")
}

func TestNewGuardRefusesABadPartFailure(t *testing.T) {
	_, client, _ := miniredisClock(t)
	rps, err := NewRedisTokenBucket(client, PerSecond(30), 30)
	require.NoError(t, err)
	month, err := NewRedisCalendarWindow(client, 120, Calendar{Period: CalendarMonth, Location: time.UTC})
	require.NoError(t, err)
	backend, err := NewComposite(Part{Name: "rps", Limiter: rps}, Part{Name: "month", Limiter: month})
	require.NoError(t, err)
	f := &Fleet{client: client}
	f.live.Store(1)
	fallback, err := f.Fallback(backend)
	require.NoError(t, err)
	bucket, err := NewTokenBucket(PerSecond(30), 30)
	require.NoError(t, err)
	for name, c := range map[string]struct {
		backend Limiter
		cfg     GuardConfig
		want    string
	}{
		"not a Composite":              {rps, GuardConfig{PartFailure: map[string]FailurePolicy{"default": FailClosed}}, "is none"},
		"an unknown part":              {backend, GuardConfig{PartFailure: map[string]FailurePolicy{"day": FailClosed}}, `names "day"`},
		"an unknown policy":            {backend, GuardConfig{PartFailure: map[string]FailurePolicy{"month": 7}}, "unknown failure policy 7"},
		"fail over without a fallback": {backend, GuardConfig{PartFailure: map[string]FailurePolicy{"rps": FailOver}}, "FailOver needs a Fallback"},
		"a fallback, and no part fails over": {backend, GuardConfig{OnFailure: FailOver, Fallback: fallback,
			PartFailure: map[string]FailurePolicy{"rps": FailOpen, "month": FailClosed}}, "used only with OnFailure: FailOver"},
		"a fallback that is no Composite": {backend, GuardConfig{Fallback: bucket,
			PartFailure: map[string]FailurePolicy{"rps": FailOver}}, "must be a Composite"},
		"a negative RememberKeys": {backend, GuardConfig{RememberKeys: -1}, "RememberKeys"},
	} {
		t.Run(name, func(t *testing.T) {
			g, err := NewGuard(c.backend, c.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), c.want)
			assert.Nil(t, g)
		})
	}
	// Through a DenyCache, the Composite's parts are found.
	cached, err := NewDenyCache(backend, DenyCacheConfig{})
	require.NoError(t, err)
	_, err = NewGuard(cached, GuardConfig{Fallback: fallback, PartFailure: map[string]FailurePolicy{"rps": FailOver}})
	require.NoError(t, err)
}
