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

func TestRedisSlidingCounterMatchesTheModelAndTheInProcessCounter(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 4))
	for round := 0; round < sized(3, 40); round++ {
		limit := 1 + r.IntN(10)
		window := time.Duration(1+r.Int64N(5000)) * time.Millisecond
		clock := ratelimittest.NewClock(epoch)
		local, err := NewSlidingCounter(limit, window, WithClock(clock))
		require.NoError(t, err)
		_, client, advance := miniredisClock(t)
		remote, err := NewRedisSlidingCounter(client, limit, window)
		require.NoError(t, err)
		// On Redis, waits are whole µs: the first µs at which the call is
		// allowed.
		inProcess, onRedis := newCounterModel(limit, window, 1), newCounterModel(limit, window, time.Microsecond)
		// Whole µs, the Redis clock's unit; the clock goes forward only, as
		// a Redis key's time stands still at its own start, not at the
		// latest call's.
		for i, c := range randomSchedule(r, 300, limit, window/time.Duration(limit), false, "a", "b", "c") {
			c.advance = c.advance.Truncate(time.Microsecond)
			clock.Advance(c.advance)
			advance(c.advance)
			inProcess.advance(c.advance)
			onRedis.advance(c.advance)
			for _, x := range []struct {
				name  string
				l     Limiter
				model *counterModel
			}{{"SlidingCounter", local, inProcess}, {"RedisSlidingCounter", remote, onRedis}} {
				got, err := x.l.Allow(context.Background(), c.key, c.n)
				require.Equal(t, c.n > limit, err != nil, "%s: %v", x.name, err)
				require.Equal(t, x.model.allow(c.key, c.n), got, "%s round %d step %d: %d per %v, %+v", x.name, round, i, limit, window, c)
			}
		}
	}
}

func TestRedisSlidingCounterStaysWithinItsErrorBound(t *testing.T) {
	t.Parallel()
	checkCounterBound(t, rand.New(rand.NewPCG(24, 5)), sized(4, 40), time.Microsecond, func(t *testing.T, limit int, window time.Duration) (Limiter, func(time.Duration)) {
		_, client, advance := miniredisClock(t)
		l, err := NewRedisSlidingCounter(client, limit, window)
		require.NoError(t, err)
		return l, advance
	})
}

func TestRedisSlidingCounterKeyAndTTL(t *testing.T) {
	m, client, advance := miniredisClock(t)
	l, err := NewRedisSlidingCounter(client, 10, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:sc:10:60000:", l.KeyPrefix())
	assert.Equal(t, Policy{Limit: 10, Window: time.Minute}, l.Policy())
	ctx := context.Background()
	_, err = l.Allow(ctx, "k", 3)
	require.NoError(t, err)
	start := epoch.UnixMicro()
	key := storedKey(l.KeyPrefix(), "k")
	got, err := m.Get(key)
	require.NoError(t, err)
	assert.Equal(t, fmtCounter(start, start+120_000_000, 0, 3), got)
	assert.Equal(t, 2*time.Minute, m.TTL(key), "the key lives until it holds nothing")
	advance(90 * time.Second)
	_, err = l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	got, err = m.Get(key)
	require.NoError(t, err)
	assert.Equal(t, fmtCounter(start+60_000_000, start+180_000_000, 3, 2), got, "the window moved on: cur became prev")
	assert.Equal(t, 90*time.Second, m.TTL(key))
}

func TestRedisSlidingCounterRefusesForeignStateAndLeavesIt(t *testing.T) {
	ctx := context.Background()
	m, client, _ := miniredisClock(t)
	l, err := NewRedisSlidingCounter(client, 5, time.Minute, WithKeyPrefix(""))
	require.NoError(t, err)
	rk := func(key string) string { return storedKey(l.KeyPrefix(), key) } // a key's Redis key
	start := epoch.UnixMicro()
	for _, tc := range []struct {
		key    string
		set    func()
		reason string
	}{
		{"list", func() { _, err := m.Lpush(rk("list"), "x"); require.NoError(t, err) }, "not a STRING"},
		{"count", func() { require.NoError(t, m.Set(rk("count"), "3")); m.SetTTL(rk("count"), time.Minute) }, `not "start:expiry:prev:cur"`},
		{"empty", func() {
			require.NoError(t, m.Set(rk("empty"), fmtCounter(start, start+1, 0, 0)))
			m.SetTTL(rk("empty"), time.Minute)
		}, "prev or cur above 0"},
		{"backwards", func() {
			require.NoError(t, m.Set(rk("backwards"), fmtCounter(start, start, 1, 1)))
			m.SetTTL(rk("backwards"), time.Minute)
		}, "start before expiry"},
		{"huge", func() {
			require.NoError(t, m.Set(rk("huge"), "1:9007199254740993:1:1"))
			m.SetTTL(rk("huge"), time.Minute)
		}, "below 2^53"},
	} {
		tc.set()
		before := snapshotKey(t, client, rk(tc.key))
		for _, n := range []int{1, 0} {
			res, err := l.Allow(ctx, tc.key, n)
			require.ErrorIs(t, err, ErrCorruptState, "%s n = %d", tc.key, n)
			assert.Contains(t, err.Error(), tc.reason, tc.key)
			assert.Contains(t, err.Error(), KeyDigest(tc.key), "the error names the key by its digest")
			assert.Equal(t, Result{Limit: 5}, res)
		}
		_, err := l.Refund(ctx, tc.key, 1)
		require.ErrorIs(t, err, ErrCorruptState, "a refund of %s", tc.key)
		_, err = l.Settle(ctx, tc.key, 0, 1)
		require.ErrorIs(t, err, ErrCorruptState, "a settle of %s", tc.key)
		require.ErrorIs(t, l.Reset(ctx, tc.key), ErrCorruptState, "a reset of %s", tc.key)
		requireUnchanged(t, client, rk(tc.key), before)
	}
}

func TestNewRedisSlidingCounterRejectsBadConfig(t *testing.T) {
	_, client, _ := miniredisClock(t)
	cases := []struct {
		name   string
		limit  int
		window time.Duration
		want   string
	}{
		{"zero limit", 0, time.Second, "limit 0"},
		{"limit above 2^52", maxRedisLimit + 1, time.Second, "limit"},
		{"zero window", 1, 0, "window 0s"},
		{"window not whole ms", 1, 1500 * time.Microsecond, "milliseconds"},
		{"window beyond 2^51 µs", 1, (1<<51/1000 + 1) * time.Millisecond, "2^51"},
	}
	for _, c := range cases {
		l, err := NewRedisSlidingCounter(client, c.limit, c.window)
		require.ErrorIs(t, err, ErrInvalidConfig, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
		assert.Nil(t, l, c.name)
	}
	_, err := NewRedisSlidingCounter(nil, 1, time.Second)
	require.ErrorIs(t, err, ErrInvalidConfig, "nil client")
	l, err := NewRedisSlidingCounter(client, maxRedisLimit, (1<<51/1000)*time.Millisecond)
	require.NoError(t, err, "the largest limit and window")
	assert.Equal(t, maxRedisLimit, l.Policy().Limit)
}

func TestRedisSlidingCounterReadsItsExpiryNotItsTTL(t *testing.T) {
	ctx := context.Background()
	m, client, advance := miniredisClock(t)
	l, err := NewRedisSlidingCounter(client, 5, time.Minute, WithKeyPrefix(""))
	require.NoError(t, err)
	start := epoch.UnixMicro()
	require.NoError(t, m.Set(storedKey(l.KeyPrefix(), "k"), fmtCounter(start, start+120_000_000, 0, 5))) // no TTL
	res, err := l.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, no(5, 0, 72*time.Second, 2*time.Minute), res, "the value is the key's state: 5 weigh 4 at 72 s")
	advance(2 * time.Minute)
	res, err = l.Allow(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 0, 2*time.Minute), res, "past its expiry the key holds nothing")
	assert.Equal(t, 2*time.Minute, m.TTL(storedKey(l.KeyPrefix(), "k")), "and the write sets its TTL")
}
