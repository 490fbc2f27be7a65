package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// inProcessSubject makes a subject of an in-process limiter on a ratelimittest.Clock.
// newLimiter builds it with opts and WithClock(clock).
func inProcessSubject(name string, newLimiter func(limit int, period time.Duration, opts ...Option) (Limiter, error)) subject {
	return subject{name, func(t *testing.T, limit int, period time.Duration, opts ...Option) (Limiter, func(time.Duration)) {
		clock := ratelimittest.NewClock(epoch)
		l, err := newLimiter(limit, period, append(opts[:len(opts):len(opts)], WithClock(clock))...)
		require.NoError(t, err)
		return l, clock.Advance
	}}
}

// miniredisSubject makes a subject of a Redis limiter on a miniredis whose time
// the test moves. newLimiter builds it with opts.
func miniredisSubject(name string, newLimiter func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error)) subject {
	return subject{name + "/miniredis", func(t *testing.T, limit int, period time.Duration, opts ...Option) (Limiter, func(time.Duration)) {
		_, client, advance := miniredisClock(t)
		l, err := newLimiter(client, limit, period, opts[:len(opts):len(opts)]...)
		require.NoError(t, err)
		return l, advance
	}}
}

// bucketSubjects are the limiters that behave as token buckets: capacity
// limit, refilling in period from empty to full.
var bucketSubjects = []subject{
	inProcessSubject("TokenBucket", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewTokenBucket(limit, float64(limit)/period.Seconds(), opts...)
	}),
	inProcessSubject("GCRA", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewGCRA(limit, period, opts...)
	}),
	miniredisSubject("RedisTokenBucket", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisTokenBucket(client, limit, float64(limit)/period.Seconds(), redisOpts(opts)...)
	}),
	miniredisSubject("RedisGCRA", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisGCRA(client, limit, period, redisOpts(opts)...)
	}),
	// The same limiters built with another policy of their own and a
	// PolicyFunc that gives every key the scenario's: they decide the same.
	inProcessSubject("TokenBucket/PolicyFunc", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewTokenBucket(3, 1, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
	inProcessSubject("GCRA/PolicyFunc", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewGCRA(3, time.Hour, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
	miniredisSubject("RedisTokenBucket/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisTokenBucket(client, 3, 1, append(redisOpts(opts), WithPolicyFunc(everyKey(limit, period)))...)
	}),
	miniredisSubject("RedisGCRA/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisGCRA(client, 3, time.Hour, append(redisOpts(opts), WithPolicyFunc(everyKey(limit, period)))...)
	}),
}

// everyKey is a PolicyFunc that gives every key limit per period.
func everyKey(limit int, period time.Duration) PolicyFunc {
	return func(context.Context, string) (Policy, error) {
		return Policy{Limit: limit, Window: period}, nil
	}
}

// windowSubjects are the fixed windows: limit per window of period.
var windowSubjects = []subject{
	inProcessSubject("FixedWindow", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewFixedWindow(limit, period, opts...)
	}),
	miniredisSubject("RedisFixedWindow", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisFixedWindow(client, limit, period, redisOpts(opts)...)
	}),
	inProcessSubject("FixedWindow/PolicyFunc", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewFixedWindow(3, time.Hour, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
	miniredisSubject("RedisFixedWindow/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisFixedWindow(client, 3, time.Hour, append(redisOpts(opts), WithPolicyFunc(everyKey(limit, period)))...)
	}),
}

// counterSubjects are the sliding-window counters: limit per window of
// period.
var counterSubjects = []subject{
	inProcessSubject("SlidingCounter", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewSlidingCounter(limit, period, opts...)
	}),
	inProcessSubject("SlidingCounter/PolicyFunc", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewSlidingCounter(3, time.Hour, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
	miniredisSubject("RedisSlidingCounter", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisSlidingCounter(client, limit, period, redisOpts(opts)...)
	}),
	miniredisSubject("RedisSlidingCounter/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisSlidingCounter(client, 3, time.Hour, append(redisOpts(opts), WithPolicyFunc(everyKey(limit, period)))...)
	}),
}

func TestCounterScenarios(t *testing.T) {
	runScenarios(t, counterSubjects, counterScenarios)
}

func TestBucketScenarios(t *testing.T) {
	t.Parallel()
	runScenarios(t, bucketSubjects, bucketScenarios)
}

func TestWindowScenarios(t *testing.T) {
	runScenarios(t, windowSubjects, windowScenarios)
}

// logSubjects are the sliding logs: limit per any span of period.
var logSubjects = []subject{
	inProcessSubject("SlidingLog", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewSlidingLog(limit, period, opts...)
	}),
	inProcessSubject("SlidingLog/PolicyFunc", func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewSlidingLog(3, time.Hour, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
	miniredisSubject("RedisSlidingLog", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisSlidingLog(client, limit, period, redisOpts(opts)...)
	}),
	miniredisSubject("RedisSlidingLog/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisSlidingLog(client, 3, time.Hour, append(redisOpts(opts), WithPolicyFunc(everyKey(limit, period)))...)
	}),
	miniredisSubject("RedisSlidingLog/WithoutCoalescing", func(client *redis.Client, limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return NewRedisSlidingLog(client, limit, period, append(redisOpts(opts), WithoutCoalescing())...)
	}),
}

func TestSlidingLogScenarios(t *testing.T) {
	t.Parallel()
	runScenarios(t, logSubjects, logScenarios)
}
