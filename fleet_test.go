package ratelimit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replicaClient returns a client of its own to m, as one replica has.
func replicaClient(t *testing.T, m *miniredis.Miniredis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newTestFleet returns replica id of the fleet "fleet" on m, with a
// heartbeat of 1 s and a TTL of 3 s.
func newTestFleet(t *testing.T, m *miniredis.Miniredis, id string) *Fleet {
	t.Helper()
	f, err := NewFleet(replicaClient(t, m), FleetConfig{Name: "fleet", ID: id})
	require.NoError(t, err)
	return f
}

func TestNewFleetRefusesABadConfiguration(t *testing.T) {
	_, client, _ := miniredisClock(t)
	for name, c := range map[string]struct {
		client redis.Scripter
		cfg    FleetConfig
		want   string
	}{
		"nil client":         {nil, FleetConfig{Name: "f"}, "nil Redis client"},
		"typed nil client":   {(*redis.Client)(nil), FleetConfig{Name: "f"}, "nil Redis client"},
		"no name":            {client, FleetConfig{}, "empty Name"},
		"negative heartbeat": {client, FleetConfig{Name: "f", Heartbeat: -1}, "Heartbeat"},
		"negative TTL":       {client, FleetConfig{Name: "f", TTL: -1}, "TTL"},
		"negative assume":    {client, FleetConfig{Name: "f", Assume: -1}, "Assume"},
		"TTL not longer":     {client, FleetConfig{Name: "f", Heartbeat: time.Second, TTL: 2 * time.Second}, "longer than twice Heartbeat"},
		"TTL below default":  {client, FleetConfig{Name: "f", Heartbeat: 5 * time.Second, TTL: 2 * time.Second}, "longer than twice Heartbeat"},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := NewFleet(c.client, c.cfg)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), c.want)
			assert.Nil(t, f)
		})
	}
}

func TestFleetDefaultsToOneSecondHeartbeatAndThreeSecondTTL(t *testing.T) {
	_, client, _ := miniredisClock(t)
	f, err := NewFleet(client, FleetConfig{Name: "f"})
	require.NoError(t, err)
	assert.Equal(t, time.Second, f.heartbeat)
	assert.Equal(t, int64(3000), f.ttlMillis)
	assert.Equal(t, 1, f.Live(), "before any heartbeat")
	assert.Regexp(t, `^.+-\d+-[0-9a-f]{8}$`, f.ID())

	g, err := NewFleet(client, FleetConfig{Name: "f", Assume: 4, TTL: 2500*time.Millisecond + 1})
	require.NoError(t, err)
	assert.Equal(t, 4, g.Live(), "Assume holds until a heartbeat answers")
	assert.Equal(t, int64(2501), g.ttlMillis, "rounded up to whole ms")
	assert.NotEqual(t, f.ID(), g.ID())
}

func TestFleetCountsTheReplicasThatBeat(t *testing.T) {
	m, _, _ := miniredisClock(t)
	ctx := context.Background()
	a, b, c := newTestFleet(t, m, "a"), newTestFleet(t, m, "b"), newTestFleet(t, m, "c")

	require.NoError(t, a.Beat(ctx))
	assert.Equal(t, 1, a.Live())
	require.NoError(t, b.Beat(ctx))
	require.NoError(t, c.Beat(ctx))
	assert.Equal(t, 3, c.Live())
	assert.Equal(t, 1, a.Live(), "a has not beaten since")
	require.NoError(t, a.Beat(ctx))
	require.NoError(t, a.Beat(ctx))
	assert.Equal(t, 3, a.Live(), "a beat twice, and counts once")

	members, err := m.ZMembers("fleet")
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "c"}, members)
	score, err := m.ZScore("fleet", "a")
	require.NoError(t, err)
	assert.Equal(t, float64(epoch.Add(3*time.Second).UnixMilli()), score, "the server's time in ms at which a expires")
	assert.Equal(t, 3*time.Second, m.TTL("fleet"), "the set expires with its latest member")
}

// TestFleetResizesWithinTheTTL moves the server's clock: a replica that
// joins is counted by the others' next heartbeat, one that leaves too, and
// one that dies without leaving within TTL of its latest heartbeat.
func TestFleetResizesWithinTheTTL(t *testing.T) {
	m, _, step := miniredisClock(t)
	ctx := context.Background()
	a, b, c := newTestFleet(t, m, "a"), newTestFleet(t, m, "b"), newTestFleet(t, m, "c")
	beatAll := func(fs ...*Fleet) {
		t.Helper()
		for _, f := range fs {
			require.NoError(t, f.Beat(ctx))
		}
	}
	beatAll(a, b)
	beatAll(a, b)
	assert.Equal(t, []int{2, 2}, []int{a.Live(), b.Live()})

	// c joins: everyone's next heartbeat, within one Heartbeat, sees 3.
	beatAll(c)
	step(time.Second)
	beatAll(a, b, c)
	assert.Equal(t, []int{3, 3, 3}, []int{a.Live(), b.Live(), c.Live()})

	// c dies just after beating: the others count it until TTL −
	// Heartbeat (2 s) has passed, and not at their heartbeat after, so
	// not once its TTL (3 s) is up.
	step(time.Second)
	beatAll(a, b)
	assert.Equal(t, []int{3, 3}, []int{a.Live(), b.Live()})
	step(time.Second - time.Millisecond)
	beatAll(a, b)
	assert.Equal(t, []int{3, 3}, []int{a.Live(), b.Live()}, "1 ms before TTL − Heartbeat")
	step(time.Millisecond)
	beatAll(a, b)
	assert.Equal(t, []int{2, 2}, []int{a.Live(), b.Live()}, "c would expire before the next heartbeat: uncounted within its TTL")

	// b leaves: a's next heartbeat sees it.
	require.NoError(t, b.leave(ctx))
	step(time.Second)
	beatAll(a)
	assert.Equal(t, 1, a.Live())
	members, err := m.ZMembers("fleet")
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, members)

	// a stops too: the set itself expires with a's TTL.
	step(3 * time.Second)
	assert.False(t, m.Exists("fleet"))
}

func TestFleetKeepsItsCountWhileRedisIsAway(t *testing.T) {
	m, _, _ := miniredisClock(t)
	ctx := context.Background()
	a, b := newTestFleet(t, m, "a"), newTestFleet(t, m, "b")
	require.NoError(t, a.Beat(ctx))
	require.NoError(t, b.Beat(ctx))
	require.NoError(t, a.Beat(ctx))
	require.Equal(t, 2, a.Live())

	m.SetError("LOADING")
	err := a.Beat(ctx)
	require.ErrorIs(t, err, ErrBackend)
	assert.Contains(t, err.Error(), `"a"`)
	assert.Equal(t, 2, a.Live(), "the share stays as it was")
	m.SetError("")

	// After a FLUSHALL, each replica is counted again by its next beat.
	m.FlushAll()
	require.NoError(t, a.Beat(ctx))
	assert.Equal(t, 1, a.Live())
	require.NoError(t, b.Beat(ctx))
	require.NoError(t, a.Beat(ctx))
	assert.Equal(t, 2, a.Live())
}

func TestFleetLeavesAnotherTypeUnderItsKeyAlone(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	require.NoError(t, client.Set(ctx, "fleet", "v", 0).Err())
	f := newTestFleet(t, m, "a")
	require.ErrorIs(t, f.Beat(ctx), ErrBackend)
	v, err := client.Get(ctx, "fleet").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v)
}

func TestFleetRunBeatsUntilItsContextEndsThenLeaves(t *testing.T) {
	m, _, _ := miniredisClock(t)
	var mu sync.Mutex
	var errs []error
	fleets := make([]*Fleet, 2)
	for i, id := range []string{"a", "b"} {
		f, err := NewFleet(replicaClient(t, m), FleetConfig{
			Name: "fleet", ID: id, Heartbeat: 50 * time.Millisecond,
			OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
		})
		require.NoError(t, err)
		fleets[i] = f
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	for _, f := range fleets {
		go func() { done <- f.Run(ctx) }()
	}
	require.Eventually(t, func() bool { return fleets[0].Live() == 2 && fleets[1].Live() == 2 },
		5*time.Second, 5*time.Millisecond, "each Run counts both")
	err := fleets[0].Run(ctx)
	require.ErrorIs(t, err, ErrInvalidConfig, "one Run at a time")

	cancel()
	for range fleets {
		assert.ErrorIs(t, <-done, context.Canceled)
	}
	assert.False(t, m.Exists("fleet"), "both left")
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		// A heartbeat may be slow under load; one cut short by the end of
		// Run is not reported.
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
}

func TestFleetOnNilAndZeroValue(t *testing.T) {
	ctx := context.Background()
	var nilFleet *Fleet
	for _, f := range []*Fleet{nilFleet, {}} {
		assert.Equal(t, 1, f.Live())
		require.ErrorIs(t, f.Beat(ctx), ErrInvalidConfig)
		require.ErrorIs(t, f.Run(ctx), ErrInvalidConfig)
		_, err := f.Fallback(&RedisTokenBucket{})
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Equal(t, Policy{Limit: 10, Window: time.Second}, f.Share(Policy{Limit: 10, Window: time.Second}))
	}
	assert.Empty(t, nilFleet.ID())
	_, client, _ := miniredisClock(t)
	f, err := NewFleet(client, FleetConfig{Name: "f"})
	require.NoError(t, err)
	var noCtx context.Context
	require.ErrorIs(t, f.Beat(noCtx), ErrCaller)
}

func TestShareDividesCapacityAndKeepsTheRateShare(t *testing.T) {
	for _, c := range []struct {
		p    Policy
		live int
		want Policy
	}{
		{Policy{Limit: 10, Window: time.Second}, 1, Policy{Limit: 10, Window: time.Second}},
		{Policy{Limit: 10, Window: time.Second}, 0, Policy{Limit: 10, Window: time.Second}},
		{Policy{Limit: 10, Window: time.Second}, 2, Policy{Limit: 5, Window: time.Second}},
		// 3 each, and 10/3 per second each: 3 per 0.9 s.
		{Policy{Limit: 10, Window: time.Second}, 3, Policy{Limit: 3, Window: 900 * time.Millisecond}},
		{Policy{Limit: 4, Window: time.Second}, 3, Policy{Limit: 1, Window: 750 * time.Millisecond}},
		// Fewer units than replicas: 1 each, at the rate's share.
		{Policy{Limit: 2, Window: time.Second}, 3, Policy{Limit: 1, Window: 1500 * time.Millisecond}},
		// Rounded up: 1 s × 3 × 3 / 11 = 818181818.18… ns.
		{Policy{Limit: 11, Window: time.Second}, 3, Policy{Limit: 3, Window: 818181819}},
		{Policy{Limit: 100, Window: time.Minute}, 4, Policy{Limit: 25, Window: time.Minute}},
		{Policy{}, 3, Policy{}},
		// Beyond what an in-process clock holds: that bound.
		{Policy{Limit: 1, Window: time.Duration(1 << 62)}, 4, Policy{Limit: 1, Window: maxSpan}},
		{Policy{Limit: 1, Window: 30 * 24 * time.Hour}, 1000, Policy{Limit: 1, Window: maxSpan}},
	} {
		got := sharePolicy(c.p, c.live)
		assert.Equal(t, c.want, got, "%v over %d", c.p, c.live)
		if c.live > 1 && c.p.Limit > 0 && got.Window < maxSpan {
			// The shares add up to no more than p, in capacity and rate.
			assert.LessOrEqual(t, got.Limit*c.live, max(c.p.Limit, c.live))
			assert.GreaterOrEqual(t, int64(got.Window)*int64(c.p.Limit), int64(c.p.Window)*int64(got.Limit)*int64(c.live))
		}
	}
}

func TestShareFuncSharesTheKeysPolicy(t *testing.T) {
	m, _, _ := miniredisClock(t)
	ctx := context.Background()
	a, b := newTestFleet(t, m, "a"), newTestFleet(t, m, "b")
	require.NoError(t, a.Beat(ctx))
	require.NoError(t, b.Beat(ctx))
	require.NoError(t, a.Beat(ctx))
	plans := func(_ context.Context, key string) (Policy, error) {
		switch key {
		case "pro":
			return Policy{Limit: 100, Window: time.Second}, nil
		case "broken":
			return Policy{}, errors.New("no plan")
		}
		return Policy{}, nil
	}
	f := a.ShareFunc(Policy{Limit: 10, Window: time.Second}, plans)
	for key, want := range map[string]Policy{"pro": {Limit: 50, Window: time.Second}, "free": {Limit: 5, Window: time.Second}} {
		got, err := f(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, want, got, key)
	}
	_, err := f(ctx, "broken")
	assert.EqualError(t, err, "no plan")
	got, err := a.ShareFunc(Policy{Limit: 10, Window: time.Second}, nil)(ctx, "any")
	require.NoError(t, err)
	assert.Equal(t, Policy{Limit: 5, Window: time.Second}, got)
}

func TestFallbackMirrorsEachRedisLimiterOnTheShare(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	fleets := []*Fleet{newTestFleet(t, m, "a"), newTestFleet(t, m, "b")}
	for _, f := range append(fleets, fleets[0]) {
		require.NoError(t, f.Beat(ctx))
	}
	fleet := fleets[0]
	require.Equal(t, 2, fleet.Live())

	bucket, err := NewRedisTokenBucket(client, PerSecond(10), 10) // 10 per second
	require.NoError(t, err)
	gcra, err := NewRedisGCRA(client, 10, time.Second)
	require.NoError(t, err)
	window, err := NewRedisFixedWindow(client, 10, time.Second)
	require.NoError(t, err)
	log, err := NewRedisSlidingLog(client, 10, time.Second)
	require.NoError(t, err)
	for _, c := range []struct {
		backend Limiter
		want    any
	}{
		{bucket, &TokenBucket{}},
		{gcra, &GCRA{}},
		{window, &FixedWindow{}},
		{log, &SlidingLog{}},
	} {
		clock := ratelimittest.NewClock(epoch)
		fb, err := fleet.Fallback(c.backend, WithClock(clock))
		require.NoError(t, err)
		assert.IsType(t, c.want, fb)
		var allowed int
		for range 7 {
			res, err := fb.Allow(ctx, "k", 1)
			require.NoError(t, err)
			if res.Allowed {
				allowed++
				assert.Equal(t, 5, res.Limit, "%T: the share's Limit", fb)
			}
		}
		assert.Equal(t, 5, allowed, "%T: half of 10 at once", fb)
		clock.Advance(time.Second)
		allowed = 0
		for range 7 {
			res, err := fb.Allow(ctx, "k", 1)
			require.NoError(t, err)
			if res.Allowed {
				allowed++
			}
		}
		assert.Equal(t, 5, allowed, "%T: 5 more a second later, half of the rate", fb)
		ps, err := fb.(Decider).Policies(ctx, "k")
		require.NoError(t, err)
		assert.Equal(t, Policy{Limit: 5, Window: time.Second}, ps[0].Policy, "%T", fb)
	}
}

// TestFallbackFollowsTheBackendsPolicyFunc shares each key's plan.
func TestFallbackFollowsTheBackendsPolicyFunc(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	a, b := newTestFleet(t, m, "a"), newTestFleet(t, m, "b")
	for _, f := range []*Fleet{a, b, a} {
		require.NoError(t, f.Beat(ctx))
	}
	plans := func(_ context.Context, key string) (Policy, error) {
		if key == "pro" {
			return Policy{Limit: 100, Window: time.Second}, nil
		}
		return Policy{}, nil
	}
	backend, err := NewRedisGCRA(client, 10, time.Second, WithPolicyFunc(plans))
	require.NoError(t, err)
	fb, err := a.Fallback(backend, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	for key, want := range map[string]int{"pro": 50, "free": 5} {
		res, err := fb.Allow(ctx, key, want)
		require.NoError(t, err)
		assert.True(t, res.Allowed, key)
		assert.Equal(t, want, res.Limit, key)
		res, err = fb.Allow(ctx, key, 1)
		require.NoError(t, err)
		assert.False(t, res.Allowed, key)
	}
}

// TestFallbackResizesAndKeepsWhatEachKeyUsed: the share follows Live, and
// a key keeps the units it has used through a resize.
func TestFallbackResizesAndKeepsWhatEachKeyUsed(t *testing.T) {
	m, client, step := miniredisClock(t)
	ctx := context.Background()
	a, b := newTestFleet(t, m, "a"), newTestFleet(t, m, "b")
	require.NoError(t, a.Beat(ctx))
	require.Equal(t, 1, a.Live())

	for _, newBackend := range []func() (Limiter, error){
		func() (Limiter, error) { return NewRedisTokenBucket(client, PerSecond(1), 10) },
		func() (Limiter, error) { return NewRedisGCRA(client, 10, 10*time.Second) },
		func() (Limiter, error) { return NewRedisFixedWindow(client, 10, 10*time.Second) },
	} {
		backend, err := newBackend()
		require.NoError(t, err)
		fb, err := a.Fallback(backend, WithClock(ratelimittest.NewClock(epoch)))
		require.NoError(t, err)
		allow := func(n int) Result {
			t.Helper()
			res, err := fb.Allow(ctx, "k", n)
			require.NoError(t, err)
			return res
		}
		// Alone, a key takes 3 of 10.
		require.NoError(t, a.Beat(ctx))
		require.True(t, allow(3).Allowed)

		// b joins: a's share is 5, of which the key has used 3.
		require.NoError(t, b.Beat(ctx))
		require.NoError(t, a.Beat(ctx))
		require.Equal(t, 2, a.Live())
		res := allow(0)
		assert.Equal(t, 5, res.Limit, "%T", fb)
		assert.Equal(t, 2, res.Remaining, "%T: 3 used of the share of 5", fb)
		assert.True(t, allow(2).Allowed)
		assert.False(t, allow(1).Allowed, "%T: the share is spent", fb)

		// b leaves: the share is 10 again, of which the key has used 5.
		require.NoError(t, b.leave(ctx))
		require.NoError(t, a.Beat(ctx))
		require.Equal(t, 1, a.Live())
		res = allow(0)
		assert.Equal(t, 10, res.Limit, "%T", fb)
		assert.Equal(t, 5, res.Remaining, "%T: 5 used of 10", fb)
		step(time.Second)
	}
}

func TestFallbackRefusesWhatItCannotMirror(t *testing.T) {
	m, client, _ := miniredisClock(t)
	fleet := newTestFleet(t, m, "a")
	local, err := NewTokenBucket(PerSecond(1), 10)
	require.NoError(t, err)
	redisBucket, err := NewRedisTokenBucket(client, PerSecond(1), 10)
	require.NoError(t, err)
	localComposite, err := NewComposite(Part{Name: "a", Limiter: local})
	require.NoError(t, err)
	for name, c := range map[string]struct {
		backend Limiter
		opts    []Option
		want    string
	}{
		"in-process limiter": {local, nil, "*ratelimit.TokenBucket has no in-process mirror"},
		"nil limiter":        {(*RedisGCRA)(nil), nil, "nil or zero-value"},
		"zero limiter":       {&RedisFixedWindow{}, nil, "nil or zero-value"},
		"nil interface":      {nil, nil, "no in-process mirror"},
		"in-process parts":   {localComposite, nil, "in process already"},
		"zero Composite":     {&Composite{}, nil, "zero-value"},
		"PolicyFunc option":  {redisBucket, []Option{WithPolicyFunc(func(context.Context, string) (Policy, error) { return Policy{}, nil })}, "WithPolicyFunc does not apply"},
	} {
		t.Run(name, func(t *testing.T) {
			fb, err := fleet.Fallback(c.backend, c.opts...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), c.want)
			assert.Nil(t, fb)
		})
	}
}

// TestFallbackOfACompositeSharesEveryPart mirrors a Composite of requests
// and units per minute, sharing each part.
func TestFallbackOfACompositeSharesEveryPart(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	a, b := newTestFleet(t, m, "a"), newTestFleet(t, m, "b")
	for _, f := range []*Fleet{a, b, a} {
		require.NoError(t, f.Beat(ctx))
	}
	requests, err := NewRedisFixedWindow(client, 4, time.Minute)
	require.NoError(t, err)
	units, err := NewRedisGCRA(client, 100, time.Minute)
	require.NoError(t, err)
	tenant := func(key string) string { return "{" + strings.SplitN(key, ":", 2)[0] + "}" }
	backend, err := NewComposite(
		Part{Name: "requests", Limiter: requests, PerCall: true},
		Part{Name: "units", Limiter: units, Key: tenant},
	)
	require.NoError(t, err)

	fb, err := a.Fallback(backend, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	c, ok := fb.(*Composite)
	require.True(t, ok, "%T", fb)
	ps, err := c.Policies(ctx, "t1:u1")
	require.NoError(t, err)
	assert.Equal(t, []NamedPolicy{
		{Name: "requests", Policy: Policy{Limit: 2, Window: time.Minute}, PerCall: true},
		{Name: "units", Policy: Policy{Limit: 50, Window: time.Minute}},
	}, ps)
	// Two calls of the tenant's share of requests; then units bind for
	// another user of the tenant.
	for range 2 {
		res, err := fb.Allow(ctx, "t1:u1", 20)
		require.NoError(t, err)
		assert.True(t, res.Allowed)
	}
	res, err := fb.Allow(ctx, "t1:u1", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "2 requests, half of 4")
	res, err = fb.Allow(ctx, "t1:u2", 11)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "40 of the tenant's 50 units used")
	res, err = fb.Allow(ctx, "t1:u2", 10)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
}

// A share whose window would overflow an in-process clock is bounded, so
// the fallback still decides while Redis is down; parts of a Composite on
// one Redis limiter share one mirror; and the mirror keeps the backend's
// bound on debt.
func TestFallbackStaysUsableAndFaithfulToItsBackend(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	f := newTestFleet(t, m, "a")
	f.live.Store(1000)
	g, err := NewRedisGCRA(client, 1, 30*24*time.Hour)
	require.NoError(t, err)
	fb, err := f.Fallback(g)
	require.NoError(t, err)
	_, err = fb.Allow(ctx, "k", 1)
	assert.NoError(t, err, "a window past the clock's span is bounded, not refused")

	f.live.Store(1)
	shared, err := NewRedisGCRA(client, 4, time.Minute)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "user", Limiter: shared}, Part{Name: "global", Limiter: shared, Key: func(string) string { return "global" }})
	require.NoError(t, err)
	fc, err := f.Fallback(c, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	_, berr := c.Allow(ctx, "global", 1)
	_, ferr := fc.Allow(ctx, "global", 1)
	require.Error(t, berr, "the backend: two parts on one key of one limiter")
	require.Error(t, ferr, "the fallback refuses it alike")
	assert.Equal(t, berr.Error(), ferr.Error())

	strict, err := NewRedisGCRA(client, 4, time.Minute, WithMaxDebt(0))
	require.NoError(t, err)
	fs, err := f.Fallback(strict)
	require.NoError(t, err)
	assert.Equal(t, debtCap(0), (*schedule)(fs.(*GCRA)).debt, "the backend's bound on debt")
}

// A fallback keeps its backend's key rules: a key longer than the backend
// takes is refused by the fallback too (ErrInvalidKey, nothing counted),
// and a backend that shows keys whole has a fallback that does.
func TestFallbackKeepsTheBackendsKeyRules(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	f := newTestFleet(t, m, "a")
	calendar, err := NewRedisCalendarWindow(client, 10, Calendar{Period: CalendarDay}, WithMaxKeyLength(8), WithKeysShown())
	require.NoError(t, err)
	concurrency, err := NewRedisConcurrency(client, 10, time.Minute, WithMaxKeyLength(8), WithKeysShown())
	require.NoError(t, err)
	gcra, err := NewRedisGCRA(client, 10, time.Second, WithMaxKeyLength(8), WithKeysShown())
	require.NoError(t, err)
	for _, backend := range []Limiter{gcra, calendar, concurrency} {
		fb, err := f.Fallback(backend, WithClock(ratelimittest.NewClock(epoch)))
		require.NoError(t, err)
		_, err = fb.Allow(ctx, "a-key-of-19-bytes!!", 1)
		require.ErrorIs(t, err, ErrInvalidKey, "%T", backend)
		assert.True(t, keyRulesOf(fb).shown, "%T", backend)
		res, err := fb.Allow(ctx, "short", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "%T", backend)
	}
}

func TestFallbackMirrorsARedisSlidingCounterOnTheShare(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	fleets := []*Fleet{newTestFleet(t, m, "a"), newTestFleet(t, m, "b")}
	for _, f := range append(fleets, fleets[0]) {
		require.NoError(t, f.Beat(ctx))
	}
	require.Equal(t, 2, fleets[0].Live())
	backend, err := NewRedisSlidingCounter(client, 10, time.Second)
	require.NoError(t, err)
	clock := ratelimittest.NewClock(epoch)
	fb, err := fleets[0].Fallback(backend, WithClock(clock))
	require.NoError(t, err)
	require.IsType(t, &SlidingCounter{}, fb)
	ps, err := fb.(Decider).Policies(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, Policy{Limit: 5, Window: time.Second}, ps[0].Policy, "half of 10 a second")
	res, err := fb.Allow(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 0, 2*time.Second), res)
	clock.Advance(1500 * ms)
	res, err = fb.Allow(ctx, "k", 2)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 0, 1500*ms), res, "the share slides: 5 weigh ⌈2.5⌉ = 3 half a window on, and 2 fit")
}
