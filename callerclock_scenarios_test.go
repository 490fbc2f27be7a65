package ratelimit

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// callerClockSubject makes a subject of a Redis limiter built
// WithCallerClock of a ratelimittest.Clock that starts at epoch, on a miniredis whose
// TIME reads farFromEpoch and never moves: only the caller's clock and the
// keys' TTLs (FastForward) follow the scenario, so a decision that read
// TIME would be decades off. newLimiter builds it with opts.
func callerClockSubject(name string, newLimiter func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error)) subject {
	return subject{name + "/callerclock", func(t *testing.T, limit int, period time.Duration, opts ...Option) (Limiter, func(time.Duration)) {
		m, client, _ := redistest.Miniredis(t, farFromEpoch)
		clock := ratelimittest.NewClock(epoch)
		l, err := newLimiter(client, limit, period, append(redisOpts(opts), WithCallerClock(clock))...)
		require.NoError(t, err)
		return l, func(d time.Duration) {
			clock.Advance(d)
			m.FastForward(d) // TTLs run on the server, whose TIME stays where it is
		}
	}}
}

// callerClockBucketSubjects are the Redis token buckets and GCRAs on the
// caller's clock.
var callerClockBucketSubjects = []subject{
	callerClockSubject("RedisTokenBucket", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisTokenBucket(client, limit, float64(limit)/period.Seconds(), opts...)
	}),
	callerClockSubject("RedisGCRA", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisGCRA(client, limit, period, opts...)
	}),
	callerClockSubject("RedisTokenBucket/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisTokenBucket(client, 3, 1, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
	callerClockSubject("RedisGCRA/PolicyFunc/WithoutCoalescing", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisGCRA(client, 3, time.Hour, append(opts, WithPolicyFunc(everyKey(limit, period)), WithoutCoalescing())...)
	}),
}

// callerClockWindowSubjects are the Redis fixed windows on the caller's
// clock.
var callerClockWindowSubjects = []subject{
	callerClockSubject("RedisFixedWindow", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisFixedWindow(client, limit, period, opts...)
	}),
	callerClockSubject("RedisFixedWindow/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisFixedWindow(client, 3, time.Hour, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
}

// callerClockLogSubjects are the Redis sliding logs on the caller's clock.
var callerClockLogSubjects = []subject{
	callerClockSubject("RedisSlidingLog", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisSlidingLog(client, limit, period, opts...)
	}),
	callerClockSubject("RedisSlidingLog/PolicyFunc/WithoutCoalescing", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisSlidingLog(client, 3, time.Hour, append(opts, WithPolicyFunc(everyKey(limit, period)), WithoutCoalescing())...)
	}),
}

// callerClockCounterSubjects are the Redis sliding-window counters on the
// caller's clock.
var callerClockCounterSubjects = []subject{
	callerClockSubject("RedisSlidingCounter", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisSlidingCounter(client, limit, period, opts...)
	}),
	callerClockSubject("RedisSlidingCounter/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisSlidingCounter(client, 3, time.Hour, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
}

// callerClockCalendarSubjects are the Redis calendar windows on the
// caller's clock, which also gives their windows' bounds (no WithClock).
var callerClockCalendarSubjects = []subject{
	callerClockSubject("RedisCalendarWindow", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisCalendarWindow(client, limit, Calendar{Period: periodOfNominal(period)}, opts...)
	}),
	callerClockSubject("RedisCalendarWindow/PolicyFunc", func(client *redis.Client, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
		return NewRedisCalendarWindow(client, 7, Calendar{Period: CalendarMonth}, append(opts, WithPolicyFunc(everyKey(limit, period)))...)
	}),
}

func TestCallerClockBucketScenarios(t *testing.T) {
	t.Parallel()
	runScenarios(t, callerClockBucketSubjects, bucketScenarios)
	runScenarios(t, compositeOfOne(callerClockBucketSubjects), bucketScenarios)
	runAdjustScenarios(t, callerClockBucketSubjects, bucketAdjustScenarios)
}

func TestCallerClockWindowScenarios(t *testing.T) {
	t.Parallel()
	runScenarios(t, callerClockWindowSubjects, windowScenarios)
	runScenarios(t, compositeOfOne(callerClockWindowSubjects), windowScenarios)
	runAdjustScenarios(t, callerClockWindowSubjects, windowAdjustScenarios)
}

func TestCallerClockSlidingLogScenarios(t *testing.T) {
	runScenarios(t, callerClockLogSubjects, logScenarios)
}

func TestCallerClockCounterScenarios(t *testing.T) {
	runScenarios(t, callerClockCounterSubjects, counterScenarios)
}

func TestCallerClockCalendarScenarios(t *testing.T) {
	runScenarios(t, callerClockCalendarSubjects, calendarScenarios)
}
