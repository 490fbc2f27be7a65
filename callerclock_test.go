package ratelimit

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// callerClockKind is one Redis limiter of this package, built by new on a
// client with limit per period (a concurrency limiter's TTL) and opts.
type callerClockKind struct {
	name string
	new  func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error)
}

// callerClockKinds are every Redis limiter of this package.
var callerClockKinds = []callerClockKind{
	{"RedisTokenBucket", func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisTokenBucket(c, Per(limit, period), limit, opts...)
	}},
	{"RedisGCRA", func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisGCRA(c, limit, period, opts...)
	}},
	{"RedisFixedWindow", func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisFixedWindow(c, limit, period, opts...)
	}},
	{"RedisSlidingLog", func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisSlidingLog(c, limit, period, opts...)
	}},
	{"RedisSlidingCounter", func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisSlidingCounter(c, limit, period, opts...)
	}},
	{"RedisCalendarWindow", func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisCalendarWindow(c, limit, Calendar{Period: periodOfNominal(period)}, opts...)
	}},
	{"RedisConcurrency", func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisConcurrency(c, limit, period, opts...)
	}},
}

// farFromEpoch is a server time far from every caller clock of these
// tests: a server whose TIME reads it decides nothing as a caller at epoch
// would, unless its TIME is not read.
var farFromEpoch = time.Date(1999, 3, 7, 13, 14, 15, 0, time.UTC)

func TestNoCallerClockScriptCallsTIME(t *testing.T) {
	assert.Equal(t, 1, strings.Count(batchLua, "redis.call('TIME')"), "the server's batch script reads TIME once")
	assert.NotContains(t, batchCallerLua, "'TIME'")
	assert.NotContains(t, batchCallerLua, "\"TIME\"")
	assert.NotEqual(t, batchLua, batchCallerLua)
	for _, c := range []struct {
		file, what     string
		server, caller *redis.Script
	}{
		{"fleet.lua", "ratelimit fleet script", fleetScript, fleetCallerScript},
		{"policytable.lua", "ratelimit policy table script", policyTableScript, policyTableCallerScript},
	} {
		server, err := redisbatch.AssembleTimed(luaFiles(), redisbatch.ServerTime, c.file, c.what)
		require.NoError(t, err)
		caller, err := redisbatch.AssembleTimed(luaFiles(), redisbatch.CallerTime, c.file, c.what)
		require.NoError(t, err)
		assert.Equal(t, redis.NewScript(server).Hash(), c.server.Hash(), "%s on the server's clock", c.file)
		assert.Equal(t, redis.NewScript(caller).Hash(), c.caller.Hash(), "%s on the caller's clock", c.file)
		assert.Equal(t, 1, strings.Count(server, "redis.call('TIME')"), "%s on the server's clock reads TIME once", c.file)
		assert.NotContains(t, caller, "'TIME'", c.file)
		assert.NotContains(t, caller, "\"TIME\"", c.file)
	}
	read, err := fs.ReadFile(luaFiles(), "policytable_read.lua")
	require.NoError(t, err)
	assert.NotContains(t, string(read), "'TIME'")
}

func TestWithCallerClockAppliesToEveryRedisLimiter(t *testing.T) {
	_, client, _ := redistest.Miniredis(t, epoch)
	clock := ratelimittest.NewClock(epoch)
	for _, kind := range callerClockKinds {
		for _, c := range []Clock{clock, nil} {
			_, err := kind.new(client, 5, time.Minute, WithCallerClock(c))
			assert.NoError(t, err, kind.name)
		}
		_, err := kind.new(client, 5, time.Minute, WithCallerClock((*ratelimittest.Clock)(nil)))
		assert.ErrorIs(t, err, ErrInvalidConfig, kind.name)
		assert.ErrorContains(t, err, "nil *ratelimittest.Clock", kind.name)
		if kind.name != "RedisCalendarWindow" {
			// WithClock keeps its contract: in process only.
			_, err = kind.new(client, 5, time.Minute, WithCallerClock(clock), WithClock(clock))
			assert.ErrorIs(t, err, ErrInvalidConfig, kind.name)
		}
	}
	// In process, WithCallerClock does not compile: see
	// TestRedisOnlyOptionsDoNotCompileInProcess.
}

func TestACompositeRefusesRedisPartsOnDifferentClocks(t *testing.T) {
	_, client, _ := redistest.Miniredis(t, epoch)
	a, b := ratelimittest.NewClock(epoch), ratelimittest.NewClock(epoch)
	part := func(name string, opts ...RedisOption) Part {
		l, err := NewRedisGCRA(client, 5, time.Second, append(opts, WithKeyPrefix(name+":"))...)
		require.NoError(t, err)
		return Part{Name: name, Limiter: l}
	}
	for name, parts := range map[string][]Part{
		"the server's TIME and a caller's clock":     {part("x"), part("y", WithCallerClock(a))},
		"a caller's clock and the server's TIME":     {part("x", WithCallerClock(a)), part("y")},
		"two caller's clocks":                        {part("x", WithCallerClock(a)), part("y", WithCallerClock(b))},
		"the system clock and a ratelimittest.Clock": {part("x", WithCallerClock(nil)), part("y", WithCallerClock(a))},
	} {
		_, err := NewComposite(parts...)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.ErrorContains(t, err, "parts 0 and 1 decide on different clocks", name)
	}
	for name, parts := range map[string][]Part{
		"one caller's clock":   {part("x", WithCallerClock(a)), part("y", WithCallerClock(a))},
		"the system clock":     {part("x", WithCallerClock(nil)), part("y", WithCallerClock(nil))},
		"the server's TIME":    {part("x"), part("y")},
		"one clock and leases": {part("x", WithCallerClock(a)), concurrencyPart(t, client, WithCallerClock(a))},
	} {
		c, err := NewComposite(parts...)
		require.NoError(t, err, name)
		res, err := c.Allow(context.Background(), name, 1)
		require.NoError(t, err, name)
		assert.True(t, res.Allowed, "%s: %+v", name, res)
	}
}

// concurrencyPart returns a Part of a RedisConcurrency of 5 on client.
func concurrencyPart(t *testing.T, client redis.Scripter, opts ...RedisOption) Part {
	l, err := NewRedisConcurrency(client, 5, time.Second, opts...)
	require.NoError(t, err)
	return Part{Name: "jobs", Limiter: l}
}

func TestACallerClockOutOfRangeFailsTheCallAndWritesNothing(t *testing.T) {
	m, client, _ := redistest.Miniredis(t, epoch)
	for _, at := range []time.Time{
		time.Unix(0, 0).Add(-time.Microsecond), // before 1970
		time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC),
		time.UnixMicro(redisbatch.MaxNow), // 2^52 µs, about 2112
		time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC),
		{}, // the zero time.Time, year 1
	} {
		clock := ratelimittest.NewClock(at)
		for _, kind := range callerClockKinds {
			for _, opts := range [][]RedisOption{{WithCallerClock(clock)}, {WithCallerClock(clock), WithoutCoalescing()}} {
				l, err := kind.new(client, 5, time.Minute, opts...)
				require.NoError(t, err)
				res, err := l.Allow(context.Background(), "k", 1)
				require.ErrorIs(t, err, ErrInvalidConfig, "%s at %v", kind.name, at)
				assert.ErrorIs(t, err, ErrCaller)
				assert.NotErrorIs(t, err, ErrBackend)
				assert.ErrorContains(t, err, "the caller's clock (WithCallerClock) reads")
				assert.False(t, res.Allowed)
				assert.Empty(t, m.Keys(), "%s at %v wrote", kind.name, at)
			}
		}
	}
	// The last reading the script takes: 2^52 - 1 µs.
	l, err := NewRedisGCRA(client, 5, time.Minute, WithCallerClock(ratelimittest.NewClock(time.UnixMicro(redisbatch.MaxNow-1))))
	require.NoError(t, err)
	res, err := l.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 12 * time.Second}, res)
}

func TestTheCallerClockScriptRefusesATimeOutOfRange(t *testing.T) {
	m, client, _ := redistest.Miniredis(t, epoch)
	ctx := context.Background()
	script := redis.NewScript(batchCallerLua)
	// A compact call of one Allow of 1 on a GCRA of 5 per 10 s.
	argv := func(now any) []any { return []any{now, -1, 1, "g", 5, 2000000, 1} }
	for _, now := range []any{"", "-1", "1.5", "4503599627370496", "99999999999999999", "1e15", "abc"} {
		err := script.Run(ctx, client, []string{"k"}, argv(now)...).Err()
		require.Error(t, err, "now %q", now)
		assert.Contains(t, err.Error(), "the caller's time", "now %q", now)
		assert.Empty(t, m.Keys(), "now %q", now)
	}
	for _, now := range []any{"0", "4503599627370495", epoch.UnixMicro()} {
		require.NoError(t, script.Run(ctx, client, []string{"k"}, argv(now)...).Err(), "now %v", now)
		m.FlushAll()
	}
}

func TestARedisCalendarWindowTakesItsBoundsFromWithClockAndItsTimeFromTheCallersClock(t *testing.T) {
	_, client, _ := redistest.Miniredis(t, farFromEpoch)
	ctx := context.Background()
	bounds, caller := ratelimittest.NewClock(epoch.Add(10*time.Second)), ratelimittest.NewClock(epoch.Add(30*time.Second))
	both, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarMinute}, WithClock(bounds), WithCallerClock(caller), WithKeyPrefix("both:"))
	require.NoError(t, err)
	res, err := both.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 30 * time.Second}, res, "the minute of the bounds, at the caller's time")
	// Without WithClock, the caller's clock gives the bounds too.
	only, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarMinute}, WithCallerClock(caller), WithKeyPrefix("only:"))
	require.NoError(t, err)
	caller.Advance(45 * time.Second) // into the next minute, 15 s in
	res, err = only.Allow(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 45 * time.Second}, res)
}
