package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// acquireStack is a concurrency limit of 2 in flight per key, leases of
// 10 s, reached through some layers: what a test calls, and who reports.
type acquireStack struct {
	a Acquirer
	// conc hears the Concurrency's own reports: its Acquires and its
	// leases' releases and extends.
	conc *adjustRecorder
	// layer hears the outermost decorator's reports, named layerName; nil
	// when the outermost is the Concurrency or a Composite, which has no
	// hooks of its own. layerDecides is false for a DenyCache, which
	// reports only the calls it answers itself.
	layer        *adjustRecorder
	layerName    string
	layerDecides bool
	// shadowOff: a Shadow that does not enforce lets denials through.
	shadowOff bool
	// partKey is the key the Concurrency keeps for a call's key.
	partKey func(string) string
}

// acquireStacks returns the stacks the table test walks, each on clock.
func acquireStacks() map[string]func(t *testing.T, clock *ratelimittest.Clock) acquireStack {
	conc := func(t *testing.T, clock *ratelimittest.Clock) (*Concurrency, *adjustRecorder) {
		h := &adjustRecorder{}
		c, err := NewConcurrency(2, 10*time.Second, WithClock(clock), WithHooks(h), WithName("conc"))
		require.NoError(t, err)
		return c, h
	}
	same := func(k string) string { return k }
	slot := func(k string) string { return "slot:" + k }
	composite := func(t *testing.T, clock *ratelimittest.Clock) (*Composite, *adjustRecorder) {
		c, h := conc(t, clock)
		rate, err := NewTokenBucket(PerMinute(100), 100, WithClock(clock))
		require.NoError(t, err)
		comp, err := NewComposite(Part{Name: "inflight", Limiter: c, Key: slot}, Part{Name: "rate", Limiter: rate})
		require.NoError(t, err)
		return comp, h
	}
	return map[string]func(t *testing.T, clock *ratelimittest.Clock) acquireStack{
		"Concurrency": func(t *testing.T, clock *ratelimittest.Clock) acquireStack {
			c, h := conc(t, clock)
			return acquireStack{a: c, conc: h, layer: h, layerName: "conc", layerDecides: true, partKey: same}
		},
		"Guard{Concurrency}": func(t *testing.T, clock *ratelimittest.Clock) acquireStack {
			c, h := conc(t, clock)
			lh := &adjustRecorder{}
			g, err := NewGuard(c, GuardConfig{Hooks: lh, Clock: clock})
			require.NoError(t, err)
			return acquireStack{a: g, conc: h, layer: lh, layerName: "Guard", layerDecides: true, partKey: same}
		},
		"Shadow{Concurrency} enforcing": func(t *testing.T, clock *ratelimittest.Clock) acquireStack {
			c, h := conc(t, clock)
			lh := &adjustRecorder{}
			s, err := NewShadow(c, ShadowConfig{Enforce: true, Hooks: lh, Clock: clock})
			require.NoError(t, err)
			return acquireStack{a: s, conc: h, layer: lh, layerName: "Shadow", layerDecides: true, partKey: same}
		},
		"Shadow{Concurrency} shadowing": func(t *testing.T, clock *ratelimittest.Clock) acquireStack {
			c, h := conc(t, clock)
			lh := &adjustRecorder{}
			s, err := NewShadow(c, ShadowConfig{Hooks: lh, Clock: clock})
			require.NoError(t, err)
			return acquireStack{a: s, conc: h, layer: lh, layerName: "Shadow", layerDecides: true, shadowOff: true, partKey: same}
		},
		"DenyCache{Concurrency}": func(t *testing.T, clock *ratelimittest.Clock) acquireStack {
			c, h := conc(t, clock)
			lh := &adjustRecorder{}
			d, err := NewDenyCache(c, DenyCacheConfig{Hooks: lh, Clock: clock})
			require.NoError(t, err)
			return acquireStack{a: d, conc: h, layer: lh, layerName: "DenyCache", partKey: same}
		},
		"Composite{Concurrency, TokenBucket}": func(t *testing.T, clock *ratelimittest.Clock) acquireStack {
			comp, h := composite(t, clock)
			return acquireStack{a: comp, conc: h, partKey: slot}
		},
		"Guard{DenyCache{Composite}}": func(t *testing.T, clock *ratelimittest.Clock) acquireStack {
			comp, h := composite(t, clock)
			d, err := NewDenyCache(comp, DenyCacheConfig{Clock: clock})
			require.NoError(t, err)
			lh := &adjustRecorder{}
			g, err := NewGuard(d, GuardConfig{Hooks: lh, Clock: clock, Timeout: time.Second})
			require.NoError(t, err)
			return acquireStack{a: g, conc: h, layer: lh, layerName: "Guard", layerDecides: true, partKey: slot}
		},
	}
}

// inFlightResult returns the Result of the in-flight policy in d: its
// part's for a Composite, d's own otherwise.
func inFlightResult(t *testing.T, d Decision) Result {
	t.Helper()
	for i, p := range d.Policies {
		if p.InFlight && d.Parts != nil {
			return d.Parts[i]
		}
	}
	return d.Result
}

func TestAcquireThroughEveryLayerHoldsReleasesAndReports(t *testing.T) {
	ctx := context.Background()
	for name, build := range acquireStacks() {
		t.Run(name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			s := build(t, clock)
			key := s.partKey("k")

			// The policies name the limit of units in flight.
			policies, err := s.a.Policies(ctx, "k")
			require.NoError(t, err)
			inFlight := 0
			for _, p := range policies {
				if p.InFlight {
					inFlight++
					assert.Equal(t, Policy{Limit: 2, Window: 10 * time.Second}, p.Policy)
				}
			}
			assert.Equal(t, 1, inFlight, "one policy of units in flight")

			a, d, err := s.a.Acquire(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, a.Held())
			assert.Equal(t, key, a.Key())
			assert.Equal(t, 1, a.Units())
			assert.Equal(t, 10*time.Second, a.TTL())
			assert.True(t, d.Allowed)
			assert.True(t, d.Policy.InFlight, "the slot binds: 1 of 2 left")
			assert.Equal(t, ok(2, 1, 10*time.Second), inFlightResult(t, d))
			s.checkReported(t, a, d)

			clock.Advance(time.Second)
			b, d, err := s.a.Acquire(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, b.Held())
			assert.Equal(t, ok(2, 0, 10*time.Second), inFlightResult(t, d))

			clock.Advance(time.Second)
			none, d, err := s.a.Acquire(ctx, "k", 1)
			require.NoError(t, err)
			assert.False(t, none.Held(), "a denial, let through or not, holds nothing")
			if s.shadowOff {
				assert.True(t, d.Allowed)
				assert.True(t, d.WouldDeny)
				assert.Equal(t, FromShadow, d.Source)
				assert.Equal(t, 8*time.Second, d.Enforced.RetryAfter)
				assert.Zero(t, d.RetryAfter)
			} else {
				assert.False(t, d.Allowed)
				assert.Equal(t, FromBackend, d.Source)
				assert.Equal(t, 8*time.Second, d.RetryAfter, "the first lease expires at 10 s")
				assert.Equal(t, no(2, 0, 8*time.Second, 9*time.Second), inFlightResult(t, d))
			}
			s.checkReported(t, none, d)
			// Again: a denial of units in flight is never remembered.
			_, d, err = s.a.Acquire(ctx, "k", 1)
			require.NoError(t, err)
			assert.NotEqual(t, FromDenyCache, d.Source)

			// Released through the stack, the first lease's unit is free
			// at once.
			s.conc.take(t, nil)
			if s.layer != nil {
				s.layer.take(t, nil)
			}
			require.NoError(t, a.Release(ctx))
			assert.Equal(t, []AdjustEvent{{Limiter: "conc", Op: AdjustRelease, Key: KeyDigest(key), Taken: 1, Result: Result{Allowed: true}}}, s.conc.take(t, nil))
			if s.layer != nil && s.layer != s.conc {
				assert.Empty(t, s.layer.take(t, nil), "a layer leaves a lease's release to the limiter that granted it")
			}
			require.NoError(t, a.Release(ctx), "a second release changes nothing")
			c, d, err := s.a.Acquire(ctx, "k", 1)
			require.NoError(t, err)
			assert.True(t, d.Allowed)
			assert.Equal(t, FromBackend, d.Source)
			require.True(t, c.Held())
			s.checkReported(t, c, d)

			// Extended through the stack, the second lease outlives its
			// first TTL; the third expires.
			s.conc.take(t, nil)
			if s.layer != nil {
				s.layer.take(t, nil)
			}
			b, err = b.Extend(ctx)
			require.NoError(t, err)
			assert.Equal(t, []AdjustEvent{{Limiter: "conc", Op: AdjustExtend, Key: KeyDigest(key), Taken: 1, Cost: 1, Result: Result{Allowed: true, Limit: 2}}}, s.conc.take(t, nil))
			if s.layer != nil && s.layer != s.conc {
				assert.Empty(t, s.layer.take(t, nil), "a layer leaves a lease's extension to the limiter that granted it")
			}
			clock.Advance(9500 * time.Millisecond) // 11.5 s
			require.NoError(t, c.Release(ctx))
			_, err = c.Extend(ctx)
			require.ErrorIs(t, err, ErrLeaseExpired, "a released lease cannot be renewed")
			_, d, err = s.a.Acquire(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(2, 1, 500*time.Millisecond), inFlightResult(t, d), "b, extended at 2 s, holds past 11 s")
			clock.Advance(500 * time.Millisecond)
			_, err = b.Extend(ctx)
			require.ErrorIs(t, err, ErrLeaseExpired, "b expired at 12 s")
			_, d, err = s.a.Acquire(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(2, 2, 0), inFlightResult(t, d), "every unit came back")
		})
	}
}

// checkReported checks that the Concurrency reported the call that
// returned lease and d, with its part's key and lease, and that the
// outermost layer, when it reports such calls, did too, with d.
func (s acquireStack) checkReported(t *testing.T, lease Lease, d Decision) {
	t.Helper()
	ev := s.conc.last()
	assert.Equal(t, "conc", ev.Limiter)
	assert.Equal(t, KeyDigest(s.partKey("k")), ev.Key)
	assert.Equal(t, lease, ev.Lease)
	assert.True(t, ev.Policy.InFlight)
	assert.Equal(t, inFlightResult(t, d).Remaining, ev.Remaining)
	if s.layer == nil || !s.layerDecides {
		return
	}
	ev = s.layer.last()
	assert.Equal(t, s.layerName, ev.Limiter)
	assert.Equal(t, KeyDigest("k"), ev.Key)
	if s.layerName == "conc" {
		assert.Equal(t, lease, ev.Lease)
	} else {
		assert.False(t, ev.Lease.Held(), "a decorator reports no lease: only the limiter that granted it does")
	}
	assert.Equal(t, d.Result, ev.Result)
	assert.Equal(t, d.Source, ev.Source)
}

func BenchmarkAcquireReleaseThroughLayers(b *testing.B) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	must := func(a Acquirer, err error) Acquirer {
		if err != nil {
			b.Fatal(err)
		}
		return a
	}
	conc := func() *Concurrency {
		c, err := NewConcurrency(2, 10*time.Second, WithClock(clock))
		must(c, err)
		return c
	}
	composite := func() *Composite {
		rate, err := NewTokenBucket(PerSecond(1e6), 100, WithClock(clock))
		must(nil, err)
		c, err := NewComposite(Part{Name: "inflight", Limiter: conc()}, Part{Name: "rate", Limiter: rate})
		must(c, err)
		return c
	}
	stacks := []struct {
		name string
		a    Acquirer
	}{
		{"Concurrency", conc()},
		{"Guard{Concurrency}", must(NewGuard(conc(), GuardConfig{Clock: clock}))},
		{"Shadow{Concurrency}", must(NewShadow(conc(), ShadowConfig{Enforce: true, Clock: clock}))},
		{"DenyCache{Concurrency}", must(NewDenyCache(conc(), DenyCacheConfig{Clock: clock}))},
		{"Composite{Concurrency,TokenBucket}", composite()},
		{"Guard{DenyCache{Composite}}", must(NewGuard(must(NewDenyCache(composite(), DenyCacheConfig{Clock: clock})), GuardConfig{Clock: clock}))},
	}
	for _, s := range stacks {
		b.Run(s.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				lease, _, err := s.a.Acquire(ctx, "k", 1)
				if err != nil {
					b.Fatal(err)
				}
				if err := lease.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
