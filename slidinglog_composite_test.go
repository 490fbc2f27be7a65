package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logAndWindow builds a sliding log of 5 per second and a fixed window of 7
// per 1.5 s, with prefix for the Redis ones (ignored in process).
type logAndWindow func(prefix string) (Adjuster, Adjuster)

func TestCompositeSlidingLogPartDecidesAsTheLimiterAlone(t *testing.T) {
	t.Parallel()
	t.Run("in process", func(t *testing.T) {
		clock := ratelimittest.NewClock(epoch)
		build := func(string) (Adjuster, Adjuster) {
			l, err := NewSlidingLog(5, time.Second, WithClock(clock))
			require.NoError(t, err)
			w, err := NewFixedWindow(7, 1500*time.Millisecond, WithClock(clock))
			require.NoError(t, err)
			return l, w
		}
		checkLogPart(t, build, clock.Advance)
	})
	t.Run("miniredis", func(t *testing.T) {
		_, client, advance := miniredisClock(t)
		build := func(prefix string) (Adjuster, Adjuster) {
			l, err := NewRedisSlidingLog(client, 5, time.Second, WithKeyPrefix(prefix+"l:"))
			require.NoError(t, err)
			w, err := NewRedisFixedWindow(client, 7, 1500*time.Millisecond, WithKeyPrefix(prefix+"w:"))
			require.NoError(t, err)
			return l, w
		}
		checkLogPart(t, build, advance)
	})
}

// checkLogPart runs a random stream on a Composite of a sliding log and a
// fixed window, and on the two limiters alone: a call is allowed iff both
// would allow it (as their peeks tell), every part reports what the
// limiter alone does, and a Refund, Settle or Reset reaches both.
func checkLogPart(t *testing.T, build logAndWindow, advance func(time.Duration)) {
	ctx := context.Background()
	log, window := build("alone:")
	plog, pwindow := build("part:")
	c, err := NewComposite(Part{Name: "log", Limiter: plog}, Part{Name: "window", Limiter: pwindow})
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(24, 5))
	stream := logStream(5, time.Second)
	stream.mix.allow = 6 // never above either limit
	for i, op := range stream.ops(r, sized(200, 400), "a", "b") {
		advance(op.advance)
		msg := fmt.Sprintf("step %d: %v", i, op)
		if op.kind != "allow" {
			_, err := op.apply(ctx, c)
			require.NoError(t, err, msg)
			_, err = op.apply(ctx, log)
			require.NoError(t, err, msg)
			_, err = op.apply(ctx, window)
			require.NoError(t, err, msg)
			continue
		}
		lp, err := log.Allow(ctx, op.key, 0)
		require.NoError(t, err, msg)
		wp, err := window.Allow(ctx, op.key, 0)
		require.NoError(t, err, msg)
		var want []Result
		if op.n <= lp.Remaining && op.n <= wp.Remaining {
			lr, err := log.Allow(ctx, op.key, op.n)
			require.NoError(t, err, msg)
			wr, err := window.Allow(ctx, op.key, op.n)
			require.NoError(t, err, msg)
			want = []Result{lr, wr}
		} else {
			want = []Result{lp, wp}
			for j, l := range []Limiter{log, window} {
				if own := []Result{lp, wp}[j]; op.n > own.Remaining {
					want[j], err = l.Allow(ctx, op.key, op.n)
					require.NoError(t, err, msg)
				}
				want[j].Allowed = false
			}
		}
		_, got, err := decideParts(ctx, c, op.key, op.n)
		require.NoError(t, err, msg)
		if !assert.Equal(t, want, got, msg) {
			return
		}
	}
}

func TestCompositeOfOneRedisSlidingLogLimitsUserAndTenant(t *testing.T) {
	t.Parallel()
	_, client, _ := miniredisClock(t)
	var scripter redis.Scripter = client
	l, err := NewRedisSlidingLog(scripter, 2, time.Minute)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "per-user", Limiter: l}, Part{Name: "per-tenant", Limiter: l, Key: tenantKey})
	require.NoError(t, err)
	d, err := c.Decide(context.Background(), "a1", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	d, err = c.Decide(context.Background(), "a2", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, "per-tenant", d.Policy.Name)
	assert.Equal(t, time.Minute, d.RetryAfter)
}

func TestDenyCacheOverASlidingLogKeepsADenialForItsCostOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingLog(3, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	c, err := NewDenyCache(l, DenyCacheConfig{MaxAge: time.Minute, Clock: clock})
	require.NoError(t, err)
	_, err = c.Allow(ctx, "k", 1) // at 0
	require.NoError(t, err)
	clock.Advance(5 * time.Second)
	_, err = c.Allow(ctx, "k", 2) // at 5 s
	require.NoError(t, err)
	// 3 waits for both entries to leave, at 15 s; 1 only for the first,
	// at 10 s: a fixed window's reading of the denial would deny it.
	res, err := c.Allow(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, no(3, 0, 10*time.Second, 10*time.Second), res)
	clock.Advance(5 * time.Second)
	res, err = c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 0, 10*time.Second), res)
	d, err := c.Decide(ctx, "k", 3)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 10*time.Second, d.RetryAfter)
}

func TestSlidingLogReportsToItsHooks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hooks := &recordingHooks{}
	l, err := NewSlidingLog(2, time.Minute, WithClock(ratelimittest.NewClock(epoch)), WithHooks(hooks), WithName("logins"))
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 1)
	require.NoError(t, err)
	ev := hooks.last()
	assert.Equal(t, "logins", ev.Limiter)
	assert.Equal(t, KeyDigest("k"), ev.Key)
	assert.Equal(t, no(2, 0, time.Minute, time.Minute), ev.Result)
	assert.Equal(t, Policy{Limit: 2, Window: time.Minute}, ev.Policy.Policy)
	_, err = l.Allow(ctx, "k", 3)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.ErrorIs(t, hooks.last().Err, ErrCostExceedsLimit)
}

func TestCompositeOfKeyedSlidingLogsKeepsItsDenialsGradual(t *testing.T) {
	t.Parallel()
	l, err := NewSlidingLog(3, time.Minute, WithClock(ratelimittest.NewClock(epoch)), WithPolicyFunc(everyKey(2, time.Second)))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "log", Limiter: l})
	require.NoError(t, err)
	d, err := c.Decide(context.Background(), "k", 2)
	require.NoError(t, err)
	require.Len(t, d.rules, 1)
	assert.True(t, d.rules[0].gradual, "a sliding log's units leave one by one, whatever its policy")
}
