package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

func TestEveryScriptAssembles(t *testing.T) {
	for _, src := range []string{batchLua, batchCallerLua} {
		assert.NotContains(t, src, "return redis.error_reply(\"ratelimit: ")
	}
	for _, k := range redisbatch.LuaKinds() {
		for _, clock := range []redisbatch.TimeSource{redisbatch.ServerTime, redisbatch.CallerTime} {
			_, err := redisbatch.Assemble(luaFiles(), clock, k)
			require.NoError(t, err, "%v", k.Kinds)
		}
	}
	_, err := luaFiles().Open("policytable_read.lua")
	require.NoError(t, err)
	assert.Contains(t, failing("", assert.AnError), "error_reply", "a script that cannot be assembled fails every call")
}

// TestARedisLimiterLoadsTheScriptOfItsKindOnly checks that a Redis limiter
// of one kind sends the batch script of its kind alone (on its clock), not
// the script of every kind, and a Composite of two kinds the script of
// those two.
func TestARedisLimiterLoadsTheScriptOfItsKindOnly(t *testing.T) {
	t.Parallel()
	kindOf := map[string]redisbatch.Kind{
		"RedisTokenBucket": redisbatch.TokenBucket, "RedisGCRA": redisbatch.GCRA, "RedisFixedWindow": redisbatch.FixedWindow,
		"RedisSlidingLog": redisbatch.SlidingLog, "RedisSlidingCounter": redisbatch.SlidingCounter,
		"RedisCalendarWindow": redisbatch.CalendarWindow, "RedisConcurrency": redisbatch.Concurrency,
	}
	ctx := context.Background()
	for _, kind := range callerClockKinds {
		for _, caller := range []bool{false, true} {
			m, client, _ := redistest.Miniredis(t, time.Now())
			var opts []RedisOption
			want, all := kindScripts[kindOf[kind.name]].server, batchScript
			if caller {
				opts = append(opts, WithCallerClock(ratelimittest.NewClock(time.Now())))
				want, all = kindScripts[kindOf[kind.name]].caller, batchCallerScript
			}
			l, err := kind.new(client, 5, time.Minute, opts...)
			require.NoError(t, err, kind.name)
			_, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err, kind.name)
			loaded, err := client.ScriptExists(ctx, want.SHA(), all.SHA()).Result()
			require.NoError(t, err)
			assert.Equal(t, []bool{true, false}, loaded, "%s, caller's clock %v: its kind's script, not every kind's", kind.name, caller)
			m.Close()
		}
	}

	lua, ok := redisbatch.LuaKindsOf(redisbatch.TokenBucket, redisbatch.FixedWindow)
	require.True(t, ok)
	src, err := redisbatch.Assemble(luaFiles(), redisbatch.ServerTime, lua...)
	require.NoError(t, err)
	perKey := WithPolicyFunc(func(context.Context, string) (Policy, error) { return Policy{Limit: 3, Window: time.Minute}, nil })
	for _, keyed := range []bool{false, true} {
		_, client, _ := redistest.Miniredis(t, time.Now())
		var opts []Option
		if keyed {
			opts = append(opts, perKey) // each request carries its key's limit
		}
		bucket, err := NewRedisTokenBucket(client, PerSecond(1), 5, redisOpts(opts)...)
		require.NoError(t, err)
		window, err := NewRedisFixedWindow(client, 5, time.Minute)
		require.NoError(t, err)
		c, err := NewComposite(Part{Name: "bucket", Limiter: bucket}, Part{Name: "window", Limiter: window})
		require.NoError(t, err)
		_, err = c.Allow(ctx, "k", 1)
		require.NoError(t, err)
		loaded, err := client.ScriptExists(ctx, redisbatch.NewScript(src).SHA(), batchScript.SHA()).Result()
		require.NoError(t, err)
		assert.Equal(t, []bool{true, false}, loaded, "the Composite's script (a part with per-key policies: %v): its parts' kinds, not every kind", keyed)
	}
}
