package ratelimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisFixedWindow is a fixed-window counter per key kept in Redis: at most
// limit units of work per window, shared by every process using the same
// Redis.
//
// It decides as FixedWindow does, by an embedded Lua script whose calls are
// coalesced as RedisTokenBucket's are; each key is one counter at its
// Redis key (see KeyPrefix), a STRING of decimal digits, at least 1, whose
// PX TTL is the time left in its window, so the
// window's time is the server's own. A window whose time is up has ended,
// also during the millisecond in which Redis still keeps its key. Redis
// keeps expiry in whole milliseconds from its clock read in milliseconds,
// so a window can end up to 1 ms before a full window after its first
// call, and ResetAfter, read from PTTL, may be up to 1 ms longer than the
// time the window has left.
//
// Calls with n < 0 or n > limit are answered without a round trip; n == 0
// reads without creating the key. A key holding anything else (a value of
// another type, another value, no TTL) is left exactly as it is, and Allow
// returns an error naming it and wrapping ErrCorruptState. Redis errors,
// timeouts and malformed replies are returned wrapped. Every error comes with
// Allowed false.
//
// A RedisFixedWindow is safe for concurrent use as far as its client is. The
// zero value is not usable (its Allow returns an error wrapping
// ErrInvalidConfig); create one with NewRedisFixedWindow.
type RedisFixedWindow struct {
	redisRate
	window time.Duration
}

// NewRedisFixedWindow returns a fixed window of limit per window per key kept
// in Redis through client: a *redis.Client, *redis.ClusterClient,
// *redis.Ring or failover client.
//
// Redis keeps expiry in milliseconds, so window must be a whole number of
// them. It accepts WithKeyPrefix, WithoutCoalescing, WithCallerClock,
// WithPolicyFunc, WithMaxDebt, WithMaxSettle, WithMaxKeyLength,
// WithKeysShown, WithHooks and WithName; by default the key prefix is
// DefaultKeyPrefix + "fw:<limit>:<window>:" (see KeyPrefix). It
// returns an error wrapping ErrInvalidConfig for a nil client, a limit <= 0
// or above 2^52 (beyond which the script cannot count exactly), a window <=
// 0, not whole milliseconds or beyond 2^52 µs, or a nil or invalid
// option or WithClock.
func NewRedisFixedWindow(client redis.Scripter, limit int, window time.Duration, opts ...RedisOption) (*RedisFixedWindow, error) {
	const kind = "NewRedisFixedWindow"
	_, ms, err := checkRedisWindow(kind, Policy{Limit: limit, Window: window})
	if err != nil {
		return nil, err
	}
	r, err := newRedisLimiter(client, redisParams{
		constructor:   kind,
		name:          "Redis fixed window",
		k:             fixedWindowKind{},
		check:         checkRedisWindow,
		defaultPrefix: fixedWindowPrefix,
		limit:         limit,
		param:         ms,
	}, opts)
	if err != nil {
		return nil, err
	}
	return &RedisFixedWindow{redisRate: newRedisRate(r), window: window}, nil
}

// Allow counts n against key's window in Redis if that keeps it within the
// limit. See Limiter for the contract. ctx bounds the round trip; a nil ctx
// is an error. On a nil or zero-value w, Allow returns an error wrapping
// ErrInvalidConfig.
func (w *RedisFixedWindow) Allow(ctx context.Context, key string, n int) (Result, error) {
	return w.rate().Allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (w *RedisFixedWindow) Decide(ctx context.Context, key string, n int) (Decision, error) {
	return w.rate().Decide(ctx, key, n)
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It asks nothing of Redis, and fails only on a nil or
// zero-value *RedisFixedWindow, or when the key's policy cannot be read.
func (w *RedisFixedWindow) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	return w.rate().Policies(ctx, key)
}

// KeyPrefix returns what every Redis key of w starts with: the Redis key
// of key is KeyPrefix() and key in a hash tag (see the package doc, Redis
// keys). It is DefaultKeyPrefix + "fw:<limit>:<window>:", with the
// window in whole milliseconds; built WithPolicyFunc,
// DefaultKeyPrefix + "fw:keyed:<limit>:<window>:" of the
// constructor's parameters; given WithKeyPrefix(p), p + "fw:". It is ""
// for a nil *RedisFixedWindow.
func (w *RedisFixedWindow) KeyPrefix() string {
	return w.rate().KeyPrefix()
}

// Policy returns the limit and the window's length; the zero Policy for a nil
// w.
func (w *RedisFixedWindow) Policy() Policy {
	if w == nil {
		return Policy{}
	}
	return Policy{Limit: w.r.limit, Window: w.window}
}

// Refund gives n units back to key's window, if it is the one that took
// them. See Adjuster and TakenAt; ctx bounds the round trip.
func (w *RedisFixedWindow) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return w.rate().Refund(ctx, key, n, opts...)
}

// Settle replaces taken by cost in key's window. See Adjuster; ctx bounds
// the round trip.
func (w *RedisFixedWindow) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return w.rate().Settle(ctx, key, taken, cost, opts...)
}

// Reset ends key's window, deleting its Redis key. See Adjuster.
func (w *RedisFixedWindow) Reset(ctx context.Context, key string) error {
	return w.rate().Reset(ctx, key)
}

// rate returns w's shared part; for a nil or zero-value w, one that
// answers that it was not built, naming w's type.
func (w *RedisFixedWindow) rate() *redisRate {
	if w == nil || !w.built() {
		return unbuiltRate(fixedWindowKind{})
	}
	return &w.redisRate
}
