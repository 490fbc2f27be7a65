package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSlidingCounter is a sliding-window counter per key kept in Redis:
// about limit units of work in any span of the window's length, shared by
// every process using the same Redis.
//
// It decides exactly as SlidingCounter does (see its rule and its error
// bound against a sliding log), in the server's time in whole µs, by an
// embedded Lua script whose calls are coalesced as RedisTokenBucket's are.
// Its waits are whole µs: on the same schedule, its decisions, Remaining
// and ResetAfter are SlidingCounter's, and its RetryAfter is
// SlidingCounter's rounded up to a whole µs. Each key is one STRING at
// its Redis key (see KeyPrefix), "start:expiry:prev:cur" (the window open
// now starts at start, µs; expiry is start + 2W, from which the key holds nothing), with
// a PX TTL until expiry, whole ms rounded up, so a key that expires is
// exactly an empty one. The weight ⌈prev × (W − e) / W⌉ is computed exactly
// in the script's doubles: the product itself when it is below 2^53, else
// a long division by shift and subtract whose every value stays below
// 2^53.
//
// Calls with n < 0 or n > limit are answered without a round trip; n == 0
// reads without creating the key. Its TTL is not read: the value's expiry
// says when the key holds nothing. A key holding anything else (a value of
// another type, another value) is left exactly as it is, and Allow
// returns an error naming it and wrapping ErrCorruptState. Redis errors,
// timeouts and malformed replies are returned wrapped. Every error comes
// with Allowed false. A server clock that steps back frees nothing: a
// key's time stands still at its window's start until the clock catches
// up, and its waits include the catching up.
//
// A RedisSlidingCounter is safe for concurrent use as far as its client is.
// The zero value is not usable (its Allow returns an error wrapping
// ErrInvalidConfig); create one with NewRedisSlidingCounter.
type RedisSlidingCounter struct {
	redisRate
	window time.Duration
}

// NewRedisSlidingCounter returns a sliding-window counter of limit per
// window per key kept in Redis through client: a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client.
//
// Redis keeps expiry in milliseconds, so window must be a whole number of
// them. It accepts WithKeyPrefix, WithoutCoalescing, WithCallerClock,
// WithPolicyFunc, WithMaxDebt, WithMaxSettle, WithMaxKeyLength,
// WithKeysShown, WithHooks and WithName; by default the key prefix is
// DefaultKeyPrefix + "sc:<limit>:<window>:" (see KeyPrefix). Built
// WithPolicyFunc, a key counts apart in each window its policy gives it, as
// SlidingCounter's do (see WithPolicyFunc). It returns an error wrapping
// ErrInvalidConfig for a nil client, a limit <= 0 or above 2^52 (beyond
// which the script cannot count exactly), a window <= 0, not whole
// milliseconds or beyond 2^51 µs (about 71 years), or a nil or invalid
// option or WithClock.
func NewRedisSlidingCounter(client redis.Scripter, limit int, window time.Duration, opts ...RedisOption) (*RedisSlidingCounter, error) {
	const kind = "NewRedisSlidingCounter"
	_, ms, err := checkRedisCounter(kind, Policy{Limit: limit, Window: window})
	if err != nil {
		return nil, err
	}
	r, err := newRedisLimiter(client, redisParams{
		constructor:   kind,
		name:          "Redis sliding counter",
		k:             slidingCounterKind{},
		check:         checkRedisCounter,
		defaultPrefix: slidingCounterPrefix,
		limit:         limit,
		param:         ms,
		ownSeg:        counterSeg(ms),
		segOf:         new(windowSegs).of,
	}, opts)
	if err != nil {
		return nil, err
	}
	return &RedisSlidingCounter{redisRate: newRedisRate(r), window: window}, nil
}

// counterSeg returns the seg of a sliding counter's window of ms
// milliseconds in its keys: "<ms>:". A key's counts are of windows of one
// length, and a counter of another window never reads them.
func counterSeg(ms int64) string { return new(windowSegs).of(ms) }

// checkRedisCounter checks a sliding-window counter's policy on Redis, as
// NewRedisSlidingCounter does: its param is the window in ms, and twice the
// window, a key's life, is at most 2^52 µs.
func checkRedisCounter(kind string, p Policy) (int64, int64, error) {
	limit, ms, err := checkRedisWindow(kind, p)
	if err != nil {
		return 0, 0, err
	}
	if ms > maxRedisSpan/2000 {
		return 0, 0, fmt.Errorf("%w: %s: window %v is beyond 2^51 µs", ErrInvalidConfig, kind, p.Window)
	}
	return limit, ms, nil
}

// Allow counts n against key's sliding window in Redis if that keeps its
// estimate within the limit. See Limiter for the contract. ctx bounds the
// round trip; a nil ctx is an error. On a nil or zero-value c, Allow
// returns an error wrapping ErrInvalidConfig.
func (c *RedisSlidingCounter) Allow(ctx context.Context, key string, n int) (Result, error) {
	return c.rate().Allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (c *RedisSlidingCounter) Decide(ctx context.Context, key string, n int) (Decision, error) {
	return c.rate().Decide(ctx, key, n)
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It asks nothing of Redis, and fails only on a nil or
// zero-value *RedisSlidingCounter, or when the key's policy cannot be read.
func (c *RedisSlidingCounter) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	return c.rate().Policies(ctx, key)
}

// KeyPrefix returns what every Redis key of c starts with: the Redis key
// of key is KeyPrefix() and key in a hash tag (see the package doc, Redis
// keys), with, built WithPolicyFunc, the window of the key's policy
// between the two ("<window>:", in whole milliseconds), since a key's
// counts are of windows of one length. It is
// DefaultKeyPrefix + "sc:<limit>:<window>:", with the window in whole milliseconds; built
// WithPolicyFunc, DefaultKeyPrefix + "sc:keyed:<limit>:<window>:"
// of the constructor's parameters; given WithKeyPrefix(p), p + "sc:" and,
// but for a limiter built WithPolicyFunc, "<window>:". It is "" for a nil
// *RedisSlidingCounter.
func (c *RedisSlidingCounter) KeyPrefix() string {
	return c.rate().KeyPrefix()
}

// Policy returns the limit and the window's length W; the zero Policy for
// a nil c.
func (c *RedisSlidingCounter) Policy() Policy {
	if c == nil {
		return Policy{}
	}
	return Policy{Limit: c.r.limit, Window: c.window}
}

// Refund gives n units back to the window of key that took them, as
// SlidingCounter's Refund does. See Adjuster and TakenAt; ctx bounds the
// round trip.
func (c *RedisSlidingCounter) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return c.rate().Refund(ctx, key, n, opts...)
}

// Settle replaces taken by cost in key's windows, as SlidingCounter's
// Settle does. See Adjuster; ctx bounds the round trip.
func (c *RedisSlidingCounter) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return c.rate().Settle(ctx, key, taken, cost, opts...)
}

// Reset forgets key, deleting its Redis key. See Adjuster.
func (c *RedisSlidingCounter) Reset(ctx context.Context, key string) error {
	return c.rate().Reset(ctx, key)
}

// rate returns c's shared part; for a nil or zero-value c, one that
// answers that it was not built, naming c's type.
func (c *RedisSlidingCounter) rate() *redisRate {
	if c == nil || !c.built() {
		return unbuiltRate(slidingCounterKind{})
	}
	return &c.redisRate
}
