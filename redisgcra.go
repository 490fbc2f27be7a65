package ratelimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisGCRA is a GCRA limiter per key kept in Redis: limit requests per period,
// with bursts of up to limit, shared by every process using the same Redis.
//
// Decisions are made by an embedded Lua script on the server's TIME, and are
// coalesced as RedisTokenBucket's are.
// Each key is one STRING at its Redis key (see KeyPrefix) holding the
// theoretical arrival time in integer microseconds (decimal digits only), with a TTL equal to the
// time until the key is back to its full limit (whole ms, rounded up). It
// decides exactly as NewRedisTokenBucket(client, Per(limit, period), limit).
//
// Calls with n < 0 or n > limit are answered without a round trip; n == 0
// reads without creating the key. A key holding anything else (a value of
// another type, another value, no TTL) is left exactly as it is, and Allow
// returns an error naming it and wrapping ErrCorruptState. Redis errors,
// timeouts and malformed replies are returned wrapped. Every error comes with
// Allowed false.
//
// A RedisGCRA is safe for concurrent use as far as its client is. The zero
// value is not usable (its Allow returns an error wrapping ErrInvalidConfig);
// create one with NewRedisGCRA.
type RedisGCRA struct {
	redisRate
	fillTime time.Duration
}

// NewRedisGCRA returns a GCRA of limit per period per key kept in Redis
// through client: a *redis.Client, *redis.ClusterClient, *redis.Ring or
// failover client.
//
// The emission interval period/limit is rounded to the nearest microsecond.
// It accepts WithKeyPrefix, WithoutCoalescing, WithCallerClock,
// WithPolicyFunc, WithMaxDebt, WithMaxSettle, WithMaxKeyLength,
// WithKeysShown, WithHooks and WithName; by default the key prefix is
// DefaultKeyPrefix + "gcra:<limit>:<interval>:" (see KeyPrefix). It returns an
// error wrapping ErrInvalidConfig for a nil client, a limit <= 0 or above
// 2^52, a period <= 0, a period/limit under 1 µs, a limit × interval beyond
// 2^52 µs, or a nil or invalid option or WithClock.
func NewRedisGCRA(client redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (*RedisGCRA, error) {
	const kind = "NewRedisGCRA"
	_, interval, err := checkRedisRate(kind, Policy{Limit: limit, Window: period})
	if err != nil {
		return nil, err
	}
	r, err := newRedisLimiter(client, redisParams{
		constructor:   kind,
		name:          "Redis GCRA",
		k:             gcraKind{},
		check:         checkRedisRate,
		defaultPrefix: gcraPrefix,
		limit:         limit,
		param:         interval,
	}, opts)
	if err != nil {
		return nil, err
	}
	return &RedisGCRA{redisRate: newRedisRate(r), fillTime: time.Duration(int64(limit)*interval) * time.Microsecond}, nil
}

// Allow decides n for key in Redis. See Limiter for the contract. ctx bounds
// the round trip; a nil ctx is an error. On a nil or zero-value g, Allow
// returns an error wrapping ErrInvalidConfig.
func (g *RedisGCRA) Allow(ctx context.Context, key string, n int) (Result, error) {
	return g.rate().Allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (g *RedisGCRA) Decide(ctx context.Context, key string, n int) (Decision, error) {
	return g.rate().Decide(ctx, key, n)
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It asks nothing of Redis, and fails only on a nil or
// zero-value *RedisGCRA, or when the key's policy cannot be read.
func (g *RedisGCRA) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	return g.rate().Policies(ctx, key)
}

// KeyPrefix returns what every Redis key of g starts with: the Redis key
// of key is KeyPrefix() and key in a hash tag (see the package doc, Redis
// keys). It is DefaultKeyPrefix + "gcra:<limit>:<interval>:", with the
// emission interval in whole microseconds; built WithPolicyFunc,
// DefaultKeyPrefix + "gcra:keyed:<limit>:<interval>:" of the constructor's
// parameters, its keys keeping their own policy's numbers; given
// WithKeyPrefix(p), p + "gcra:" (p + "gcra-i:" built WithPolicyFunc). It
// is "" for a nil *RedisGCRA.
func (g *RedisGCRA) KeyPrefix() string {
	return g.rate().KeyPrefix()
}

// Policy returns the limit and the time a key takes to go from exhausted to its full limit (limit emission intervals); the zero Policy for a nil g.
func (g *RedisGCRA) Policy() Policy {
	if g == nil {
		return Policy{}
	}
	return Policy{Limit: g.r.limit, Window: g.fillTime}
}

// Refund gives n units back to key. See Adjuster; ctx bounds the round
// trip.
func (g *RedisGCRA) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return g.rate().Refund(ctx, key, n, opts...)
}

// Settle replaces taken by cost on key. See Adjuster; ctx bounds the round
// trip.
func (g *RedisGCRA) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return g.rate().Settle(ctx, key, taken, cost, opts...)
}

// Reset returns key to its full limit, deleting its Redis key. See
// Adjuster.
func (g *RedisGCRA) Reset(ctx context.Context, key string) error {
	return g.rate().Reset(ctx, key)
}

// rate returns g's shared part; for a nil or zero-value g, one that
// answers that it was not built, naming g's type.
func (g *RedisGCRA) rate() *redisRate {
	if g == nil || !g.built() {
		return unbuiltRate(gcraKind{})
	}
	return &g.redisRate
}
