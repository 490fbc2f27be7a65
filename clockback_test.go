package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAClockSetBackByCenturiesSaturatesTheCatchUp(t *testing.T) {
	// Set back by 500 years, the clock reads further behind the limiters'
	// time than a time.Duration can say: the wait to catch up saturates
	// at the most the limiters count (about 73 years), and is never lost.
	subjects := []struct {
		name string
		new  func(Clock) (Limiter, error)
	}{
		{"TokenBucket", func(c Clock) (Limiter, error) { return NewTokenBucket(PerSecond(1), 1, WithClock(c)) }},
		{"GCRA", func(c Clock) (Limiter, error) { return NewGCRA(1, time.Second, WithClock(c)) }},
		{"FixedWindow", func(c Clock) (Limiter, error) { return NewFixedWindow(1, time.Second, WithClock(c)) }},
	}
	for _, sub := range subjects {
		for _, back := range []int{100, 500, 5000} {
			clock := ratelimittest.NewClock(epoch)
			l, err := sub.new(clock)
			require.NoError(t, err)
			ctx := context.Background()
			res, err := l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, res.Allowed)

			clock.Set(epoch.AddDate(-back, 0, 0))
			res, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err, "%s, %d years back", sub.name, back)
			assert.False(t, res.Allowed, "%s, %d years back: no token is created", sub.name, back)
			assert.GreaterOrEqual(t, res.RetryAfter, time.Duration(maxSpan), "%s, %d years back: the catch-up is in the wait", sub.name, back)
			assert.GreaterOrEqual(t, res.ResetAfter, res.RetryAfter, "%s, %d years back", sub.name, back)
		}
	}
}

func TestLagBehindSaturates(t *testing.T) {
	const minInt64 = -1 << 63
	assert.Equal(t, int64(0), lagBehind(5, 5))
	assert.Equal(t, int64(0), lagBehind(5, 9))
	assert.Equal(t, int64(3), lagBehind(5, 2))
	assert.Equal(t, int64(maxSpan), lagBehind(5, minInt64))
	assert.Equal(t, int64(maxSpan), lagBehind(maxSpan, 0))
	assert.Equal(t, int64(maxSpan-1), lagBehind(maxSpan, 1))
}

func TestARedisKeyOwesAServerClockStepBackWhereInProcessTimeStandsStill(t *testing.T) {
	// A bucket of 10 refilling 1 a second, 5 of them taken; then the clock
	// is set back 10 s. On Redis the key's tat stays where it was, so the
	// key owes the step: 0 left, and a denial for 6 s (until it is 9 s from
	// full). In process time stands still for the shard: 5 left.
	ctx := context.Background()
	type subject struct {
		name string
		new  func() (Limiter, func(time.Duration))
	}
	redisSubject := func(name string, build func(*redis.Client) (Limiter, error)) subject {
		return subject{name, func() (Limiter, func(time.Duration)) {
			_, client, advance := miniredisClock(t) // SetTime moves the server's TIME
			l, err := build(client)
			require.NoError(t, err)
			return l, advance
		}}
	}
	for _, sub := range []subject{
		redisSubject("RedisTokenBucket", func(c *redis.Client) (Limiter, error) { return NewRedisTokenBucket(c, PerSecond(1), 10) }),
		redisSubject("RedisGCRA", func(c *redis.Client) (Limiter, error) { return NewRedisGCRA(c, 10, 10*time.Second) }),
	} {
		t.Run(sub.name, func(t *testing.T) {
			l, advance := sub.new()
			res, err := l.Allow(ctx, "k", 5)
			require.NoError(t, err)
			require.Equal(t, ok(10, 5, 5*time.Second), res)

			advance(-10 * time.Second)
			res, err = l.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 15*time.Second), res, "the key owes the step: 0 left")
			res, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, no(10, 0, 6*time.Second, 15*time.Second), res, "denied for 6 s")

			advance(6*time.Second - time.Microsecond)
			res, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			assert.False(t, res.Allowed, "1 µs early")
			advance(time.Microsecond)
			res, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 10*time.Second), res, "allowed once 6 s have passed")
		})
	}

	for _, sub := range []struct {
		name string
		new  func(Clock) (Limiter, error)
	}{
		{"TokenBucket", func(c Clock) (Limiter, error) { return NewTokenBucket(PerSecond(1), 10, WithClock(c)) }},
		{"GCRA", func(c Clock) (Limiter, error) { return NewGCRA(10, 10*time.Second, WithClock(c)) }},
	} {
		t.Run(sub.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			l, err := sub.new(clock)
			require.NoError(t, err)
			res, err := l.Allow(ctx, "k", 5)
			require.NoError(t, err)
			require.Equal(t, ok(10, 5, 5*time.Second), res)

			clock.Advance(-10 * time.Second)
			res, err = l.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 5, 15*time.Second), res, "time stands still: 5 left, full once the clock has caught up and 5 s more")
			res, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 4, 16*time.Second), res, "allowed: nothing is created, nothing owed")
		})
	}
}
