package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// observedLimiters builds each limiter of the package, 3 per 3 s, with
// opts, the Redis ones on a miniredis.
func observedLimiters(t *testing.T, opts ...Option) map[string]Limiter {
	t.Helper()
	clock := ratelimittest.NewClock(epoch)
	_, client, _ := miniredisClock(t)
	local := append([]Option{WithClock(clock)}, opts...)
	made := map[string]func() (Limiter, error){
		"TokenBucket":      func() (Limiter, error) { return NewTokenBucket(PerSecond(1), 3, local...) },
		"GCRA":             func() (Limiter, error) { return NewGCRA(3, 3*time.Second, local...) },
		"FixedWindow":      func() (Limiter, error) { return NewFixedWindow(3, 3*time.Second, local...) },
		"RedisTokenBucket": func() (Limiter, error) { return NewRedisTokenBucket(client, PerSecond(1), 3, redisOpts(opts)...) },
		"RedisGCRA":        func() (Limiter, error) { return NewRedisGCRA(client, 3, 3*time.Second, redisOpts(opts)...) },
		"RedisFixedWindow": func() (Limiter, error) { return NewRedisFixedWindow(client, 3, 3*time.Second, redisOpts(opts)...) },

		"SlidingCounter":      func() (Limiter, error) { return NewSlidingCounter(3, 3*time.Second, local...) },
		"RedisSlidingCounter": func() (Limiter, error) { return NewRedisSlidingCounter(client, 3, 3*time.Second, redisOpts(opts)...) },
	}
	limiters := make(map[string]Limiter, len(made))
	for name, build := range made {
		l, err := build()
		require.NoError(t, err, name)
		limiters[name] = l
	}
	return limiters
}

func TestEveryLimiterReportsToItsHooks(t *testing.T) {
	ctx := context.Background()
	for name := range observedLimiters(t) {
		t.Run(name, func(t *testing.T) {
			hooks := &recordingHooks{}
			// A fresh limiter of the same kind, reporting to hooks.
			l := observedLimiters(t, WithHooks(hooks))[name]
			for range 4 {
				_, _ = l.Allow(ctx, "k", 1)
			}
			_, err := l.Allow(ctx, "k", 4)
			require.ErrorIs(t, err, ErrCostExceedsLimit)

			require.Len(t, hooks.events, 5, "every call, errors included")
			first, denied, failed := hooks.events[0], hooks.events[3], hooks.events[4]
			assert.Equal(t, name, first.Limiter, "named after its type")
			policy := NamedPolicy{Name: "default", Policy: Policy{Limit: 3, Window: 3 * time.Second}}
			assert.Equal(t, policy, first.Policy, "a limiter's one policy is named default")
			assert.Equal(t, []NamedPolicy{policy}, first.Policies)
			assert.Equal(t, policy, failed.Policy, "an error is reported under the policy too")
			assert.Equal(t, KeyDigest("k"), first.Key)
			assert.Equal(t, 1, first.Cost)
			assert.True(t, first.Result.Allowed)
			assert.Equal(t, FromBackend, first.Source)
			assert.GreaterOrEqual(t, first.Latency, time.Duration(0))
			assert.False(t, denied.Result.Allowed, "the fourth is denied")
			assert.ErrorIs(t, failed.Err, ErrCostExceedsLimit)
		})
	}
}

func TestWithNameNamesTheReports(t *testing.T) {
	hooks := &recordingHooks{}
	l, err := NewGCRA(5, time.Second, WithHooks(hooks), WithName("login-attempts"))
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "alice", 1)
	require.NoError(t, err)
	assert.Equal(t, "login-attempts", hooks.last().Limiter)
}

func TestHookOptionsRefuseNothingToListenOrName(t *testing.T) {
	_, err := NewTokenBucket(PerSecond(1), 1, WithHooks(nil))
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewTokenBucket(PerSecond(1), 1, WithName(""))
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestALimiterWithoutHooksAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"TokenBucket", "GCRA", "FixedWindow"} {
		l := observedLimiters(t)[name]
		allocs := testing.AllocsPerRun(1000, func() { _, _ = l.Allow(ctx, "hot", 0) })
		assert.Zero(t, allocs, name)
	}
}

func TestCompositePartsReportTheirOwnDecisions(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	for name, build := range map[string]limiters{
		"in process": inProcessLimiters(ratelimittest.NewClock(epoch)),
		"on Redis":   redisLimiters(client),
	} {
		t.Run(name, func(t *testing.T) {
			user, err := build.bucket(2, time.Second)
			require.NoError(t, err)
			tenantHooks := &recordingHooks{}
			var tenant Limiter
			if name == "in process" {
				tenant, err = NewGCRA(5, time.Second, WithClock(ratelimittest.NewClock(epoch)), WithHooks(tenantHooks), WithName("tenant"))
			} else {
				tenant, err = NewRedisGCRA(client, 5, time.Second, WithHooks(tenantHooks), WithName("tenant"))
			}
			require.NoError(t, err)
			c, err := NewComposite(Part{Name: "user", Limiter: user},
				Part{Name: "tenant", Limiter: tenant, Key: tenantKey, PerCall: true})
			require.NoError(t, err)
			for range 3 {
				_, err = c.Allow(ctx, "a1", 2)
				require.NoError(t, err)
			}
			require.Len(t, tenantHooks.events, 3, "one report per call, by the part with hooks")
			first, denied := tenantHooks.events[0], tenantHooks.events[1]
			assert.Equal(t, "tenant", first.Limiter)
			assert.Equal(t, KeyDigest("tenant-a"), first.Key, "the part's own key")
			assert.Equal(t, 1, first.Cost, "a PerCall part's cost")
			assert.Equal(t, Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 200 * time.Millisecond}, first.Result)
			assert.False(t, denied.Result.Allowed, "the user's bucket denied the second call")
			assert.Equal(t, 4, denied.Result.Remaining, "the tenant took nothing for it")
		})
	}
}

func TestCalendarWindowsReportDecisionsAndAdjustmentsToTheirHooks(t *testing.T) {
	ctx := context.Background()
	berlin := zone(t, "Europe/Berlin")
	at := utc(2026, 10, 25, 22, 0) // an hour before Berlin's 25-hour day ends
	cal := Calendar{Period: CalendarDay, Location: berlin}
	_, client, _ := redistest.Miniredis(t, at)
	build := map[string]func(h Hooks) (interface {
		Decider
		Adjuster
	}, error){
		"CalendarWindow": func(h Hooks) (interface {
			Decider
			Adjuster
		}, error) {
			return NewCalendarWindow(2, cal, WithHooks(h), WithClock(ratelimittest.NewClock(at)))
		},
		"RedisCalendarWindow": func(h Hooks) (interface {
			Decider
			Adjuster
		}, error) {
			return NewRedisCalendarWindow(client, 2, cal, WithHooks(h), WithClock(ratelimittest.NewClock(at)))
		},
	}
	for name, newLimiter := range build {
		t.Run(name, func(t *testing.T) {
			h := &adjustRecorder{}
			l, err := newLimiter(h)
			require.NoError(t, err)
			_, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			ev := h.last()
			assert.Equal(t, name, ev.Limiter)
			assert.Equal(t, KeyDigest("k"), ev.Key)
			assert.Equal(t, ok(2, 1, time.Hour), ev.Result)
			assert.Equal(t, Policy{Limit: 2, Window: 25 * time.Hour}, ev.Policy.Policy, "the window's true length")
			_, err = l.Allow(ctx, "k", 3)
			require.ErrorIs(t, err, ErrCostExceedsLimit)
			assert.ErrorIs(t, h.last().Err, ErrCostExceedsLimit)

			_, err = l.Refund(ctx, "k", 1)
			require.NoError(t, err)
			require.NoError(t, l.Reset(ctx, "k"))
			got := h.take(t, nil)
			require.Len(t, got, 2)
			assert.Equal(t, AdjustEvent{Limiter: name, Op: AdjustRefund, Key: KeyDigest("k"), Taken: 1, Result: ok(2, 2, 0)}, got[0])
			assert.Equal(t, AdjustEvent{Limiter: name, Op: AdjustReset, Key: KeyDigest("k")}, got[1])
		})
	}
}

func TestDenyCacheAnswersACalendarWindowsDenialUntilTheWindowEnds(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch.Add(23 * time.Hour))
	w, err := NewCalendarWindow(1, Calendar{Period: CalendarDay}, WithClock(clock))
	require.NoError(t, err)
	cache, err := NewDenyCache(w, DenyCacheConfig{Clock: clock, MaxAge: time.Hour})
	require.NoError(t, err)
	_, err = cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	d, err := cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	clock.Advance(30 * time.Minute)
	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromDenyCache, d.Source, "the same window: the denial holds")
	assert.Equal(t, no(1, 0, 30*time.Minute, 30*time.Minute), d.Result)
	clock.Advance(30 * time.Minute)
	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.True(t, d.Allowed, "the next day")
}
