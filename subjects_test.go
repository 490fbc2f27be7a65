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
var bucketSubjects = subjectsOf("TokenBucket", "GCRA")

// everyKey is a PolicyFunc that gives every key limit per period.
func everyKey(limit int, period time.Duration) PolicyFunc {
	return func(context.Context, string) (Policy, error) {
		return Policy{Limit: limit, Window: period}, nil
	}
}

// windowSubjects are the fixed windows: limit per window of period.
var windowSubjects = subjectsOf("FixedWindow")

// counterSubjects are the sliding-window counters: limit per window of
// period.
var counterSubjects = subjectsOf("SlidingCounter")

// logSubjects are the sliding logs: limit per any span of period.
var logSubjects = subjectsOf("SlidingLog")
