package ratelimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisTokenBucket is a token bucket per key kept in Redis, so that every
// process using the same Redis shares one bucket per key.
//
// Decisions are made by an embedded Lua script, sent with EVALSHA (EVAL when
// the server does not have it cached, after a restart, failover or SCRIPT
// FLUSH), which reads the time from the server's TIME, so clients' clocks do
// not matter. Calls that arrive while others are in flight are coalesced:
// gathered and decided together by one script call (one per hash slot on a
// cluster), in order, each with exactly the Result it would have had alone
// (see "Coalescing" in the package documentation, and WithoutCoalescing).
// Each key is one HASH at its Redis key (see KeyPrefix) with exactly one
// field, tat: the server time, in integer microseconds, at which the bucket is full again
// (the bucket kept as the GCRA it decides as: at time t it holds
// (burst·interval − (tat − t))/interval tokens), and a TTL equal to the
// time until then (whole ms, rounded up): a key that has expired is a full
// bucket. Decisions are the same as an in-process TokenBucket's on the
// same schedule while the server's clock moves forward (see Exactness in
// the package documentation for a clock that steps back).
//
// Calls with n < 0 or n > burst are answered without a round trip; n == 0
// reads the bucket without creating the key. A key holding anything else (a
// value of another type, a HASH with other fields or values, no TTL) is left
// exactly as it is, and Allow returns an error naming it and wrapping
// ErrCorruptState. Redis errors, timeouts and malformed replies are returned
// wrapped. Every error comes with Allowed false.
//
// A RedisTokenBucket is safe for concurrent use as far as its client is. The
// zero value is not usable (its Allow returns an error wrapping
// ErrInvalidConfig); create one with NewRedisTokenBucket.
type RedisTokenBucket struct {
	redisRate
	fillTime time.Duration
}

// NewRedisTokenBucket returns a token bucket per key that refills at rate up
// to burst tokens, kept in Redis through client: a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client. For example
// NewRedisTokenBucket(client, PerSecond(10), 20).
//
// It accepts WithKeyPrefix, WithoutCoalescing, WithCallerClock,
// WithPolicyFunc, WithMaxDebt, WithMaxSettle, WithMaxKeyLength,
// WithKeysShown, WithHooks and WithName; by default the key prefix is
// DefaultKeyPrefix + "tb:<burst>:<interval>:" (see KeyPrefix). It returns an
// error wrapping ErrInvalidConfig for a nil client, an invalid rate (see
// Rate), a rate faster than one token a microsecond or so slow that one
// token overflows the clock, a burst <= 0 or above 2^52, a fill time beyond
// 2^52 µs, or a nil or invalid option or WithClock.
// The time per token is rate's period over its units, rounded to the
// nearest microsecond.
func NewRedisTokenBucket(client redis.Scripter, rate Rate, burst int, opts ...RedisOption) (*RedisTokenBucket, error) {
	const kind = "NewRedisTokenBucket"
	interval, err := rate.interval(kind, time.Microsecond)
	if err != nil {
		return nil, err
	}
	if err := checkLimit(kind, "burst", burst, maxRedisLimit); err != nil {
		return nil, err
	}
	if err := checkRedisSpan(kind, int64(burst), interval); err != nil {
		return nil, err
	}
	r, err := newRedisLimiter(client, redisParams{
		constructor:   kind,
		name:          "Redis token bucket",
		k:             bucketKind{},
		check:         checkRedisRate,
		defaultPrefix: tokenBucketPrefix,
		limit:         burst,
		param:         interval,
	}, opts)
	if err != nil {
		return nil, err
	}
	return &RedisTokenBucket{redisRate: newRedisRate(r), fillTime: time.Duration(int64(burst)*interval) * time.Microsecond}, nil
}

// Allow takes n tokens from key's bucket in Redis if at least n are there.
// See Limiter for the contract. ctx bounds the round trip; a nil ctx is an
// error. On a nil or zero-value b, Allow returns an error wrapping
// ErrInvalidConfig.
func (b *RedisTokenBucket) Allow(ctx context.Context, key string, n int) (Result, error) {
	return b.rate().Allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (b *RedisTokenBucket) Decide(ctx context.Context, key string, n int) (Decision, error) {
	return b.rate().Decide(ctx, key, n)
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It asks nothing of Redis, and fails only on a nil or
// zero-value *RedisTokenBucket, or when the key's policy cannot be read.
func (b *RedisTokenBucket) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	return b.rate().Policies(ctx, key)
}

// KeyPrefix returns what every Redis key of b starts with: the Redis key
// of key is KeyPrefix() and key in a hash tag (see the package doc, Redis
// keys). It is DefaultKeyPrefix + "tb:<burst>:<interval>:", with
// the time per token in whole microseconds; built WithPolicyFunc,
// DefaultKeyPrefix + "tb:keyed:<burst>:<interval>:" of the
// constructor's parameters, its keys keeping their own policy's numbers;
// given WithKeyPrefix(p), p + "tb:" (p + "tb-i:" built WithPolicyFunc).
// It is "" for a nil *RedisTokenBucket.
func (b *RedisTokenBucket) KeyPrefix() string {
	return b.rate().KeyPrefix()
}

// Policy returns the bucket's capacity and the time it takes to refill from empty to full; the zero Policy for a nil
// b.
func (b *RedisTokenBucket) Policy() Policy {
	if b == nil {
		return Policy{}
	}
	return Policy{Limit: b.r.limit, Window: b.fillTime}
}

// Refund gives n units back to key's bucket. See Adjuster; ctx bounds the
// round trip.
func (b *RedisTokenBucket) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return b.rate().Refund(ctx, key, n, opts...)
}

// Settle replaces taken by cost on key's bucket. See Adjuster; ctx bounds
// the round trip.
func (b *RedisTokenBucket) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return b.rate().Settle(ctx, key, taken, cost, opts...)
}

// Reset fills key's bucket, deleting its Redis key. See Adjuster.
func (b *RedisTokenBucket) Reset(ctx context.Context, key string) error {
	return b.rate().Reset(ctx, key)
}

// rate returns b's shared part; for a nil or zero-value b, one that
// answers that it was not built, naming b's type.
func (b *RedisTokenBucket) rate() *redisRate {
	if b == nil || !b.built() {
		return unbuiltRate(bucketKind{})
	}
	return &b.redisRate
}
