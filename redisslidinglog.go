package ratelimit

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisSlidingLog is a sliding log per key kept in Redis: at most limit
// units of work in any span of the window's length, shared by every
// process using the same Redis.
//
// It decides as SlidingLog does, on the server's clock in whole
// microseconds, by the embedded Lua script whose calls are coalesced as
// RedisTokenBucket's are. Each key is one HASH at its Redis key (see
// KeyPrefix): the sum of its entries' units, the numbers and times of its oldest and newest
// entries, and a field per entry (its time and units), with a PEXPIRE
// until its newest entry leaves the window, so a key that expires is an
// empty log. An allowed call costs O(1) Redis commands amortized (it drops
// the entries that have left and appends its own); a denial of n reads the
// oldest entries that must leave for n to fit, and a Refund the newest
// back to those it gives back to, at most limit entries (see
// MaxSlidingLogLimit), in the one script call.
//
// A server clock that steps back never creates a unit: an entry counts
// until the server's time passes its time plus the window again, and a new
// entry is stamped no earlier than the newest, so entries stay in order.
// In process, time stands still per shard of keys instead; the two agree
// on every forward schedule.
//
// Calls with n < 0 or n > limit are answered without a round trip; n == 0
// reads without creating the key. A key holding anything else (a value of
// another type, other fields, values that do not agree) is left exactly
// as it is, and the call returns an error naming it and wrapping
// ErrCorruptState. Redis errors, timeouts and malformed replies are
// returned wrapped. Every error comes with Allowed false.
//
// A RedisSlidingLog is safe for concurrent use as far as its client is.
// The zero value is not usable (its Allow returns an error wrapping
// ErrInvalidConfig); create one with NewRedisSlidingLog.
type RedisSlidingLog struct {
	redisRate
	window time.Duration
}

// NewRedisSlidingLog returns a sliding log of limit per window per key kept
// in Redis through client: a *redis.Client, *redis.ClusterClient,
// *redis.Ring or failover client.
//
// Redis keeps expiry in milliseconds, so window must be a whole number of
// them. It accepts WithKeyPrefix, WithoutCoalescing, WithCallerClock,
// WithPolicyFunc, WithMaxDebt, WithMaxSettle, WithMaxKeyLength,
// WithKeysShown, WithHooks and WithName; by default the key prefix is
// DefaultKeyPrefix + "sl:<limit>:<window>:" (see KeyPrefix). It returns
// an error wrapping ErrInvalidConfig for a nil client, a limit <= 0 or
// above MaxSlidingLogLimit, a window <= 0, not whole milliseconds or beyond
// 2^52 µs, or a nil or invalid option or WithClock.
func NewRedisSlidingLog(client redis.Scripter, limit int, window time.Duration, opts ...RedisOption) (*RedisSlidingLog, error) {
	const kind = "NewRedisSlidingLog"
	_, ms, err := checkRedisLog(kind, Policy{Limit: limit, Window: window})
	if err != nil {
		return nil, err
	}
	r, err := newRedisLimiter(client, redisParams{
		constructor:   kind,
		name:          "Redis sliding log",
		k:             slidingLogKind{},
		check:         checkRedisLog,
		defaultPrefix: slidingLogPrefix,
		limit:         limit,
		param:         ms,
	}, opts)
	if err != nil {
		return nil, err
	}
	return &RedisSlidingLog{redisRate: newRedisRate(r), window: window}, nil
}

// checkRedisLog checks a sliding log's policy on Redis, as
// NewRedisSlidingLog does: its param is the window in ms.
func checkRedisLog(kind string, p Policy) (int64, int64, error) {
	if err := checkLogLimit(kind, p.Limit); err != nil {
		return 0, 0, err
	}
	return checkRedisWindow(kind, p)
}

// Allow takes n for key in Redis if n plus the units taken in the last
// window is at most the limit. See Limiter for the contract. ctx bounds
// the round trip; a nil ctx is an error. On a nil or zero-value l, Allow
// returns an error wrapping ErrInvalidConfig.
func (l *RedisSlidingLog) Allow(ctx context.Context, key string, n int) (Result, error) {
	return l.rate().Allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (l *RedisSlidingLog) Decide(ctx context.Context, key string, n int) (Decision, error) {
	return l.rate().Decide(ctx, key, n)
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It asks nothing of Redis, and fails only on a nil or
// zero-value *RedisSlidingLog, or when the key's policy cannot be read.
func (l *RedisSlidingLog) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	return l.rate().Policies(ctx, key)
}

// KeyPrefix returns what every Redis key of l starts with: the Redis key
// of key is KeyPrefix() and key in a hash tag (see the package doc, Redis
// keys). It is DefaultKeyPrefix + "sl:<limit>:<window>:", with the
// window in whole milliseconds; built WithPolicyFunc,
// DefaultKeyPrefix + "sl:keyed:<limit>:<window>:" of the
// constructor's parameters; given WithKeyPrefix(p), p + "sl:". It is ""
// for a nil *RedisSlidingLog.
func (l *RedisSlidingLog) KeyPrefix() string {
	return l.rate().KeyPrefix()
}

// Policy returns the limit and the window's length; the zero Policy for a
// nil l.
func (l *RedisSlidingLog) Policy() Policy {
	if l == nil {
		return Policy{}
	}
	return Policy{Limit: l.r.limit, Window: l.window}
}

// Refund gives n units back to the entries of key's log that took them,
// as SlidingLog's Refund does: TakenAt's time is read as an age on the
// caller's clock (rounded up to whole µs) and compared with the entries'
// times on the server's, so a client clock ahead of the server's may miss
// the entry that took the units. See Adjuster; ctx bounds the round trip.
func (l *RedisSlidingLog) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return l.rate().Refund(ctx, key, n, opts...)
}

// Settle replaces taken by cost in key's log, as SlidingLog's Settle does.
// See Adjuster; ctx bounds the round trip.
func (l *RedisSlidingLog) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return l.rate().Settle(ctx, key, taken, cost, opts...)
}

// Reset drops key's log, deleting its Redis key. See Adjuster.
func (l *RedisSlidingLog) Reset(ctx context.Context, key string) error {
	return l.rate().Reset(ctx, key)
}

// rate returns l's shared part; for a nil or zero-value l, one that
// answers that it was not built, naming l's type.
func (l *RedisSlidingLog) rate() *redisRate {
	if l == nil || !l.built() {
		return unbuiltRate(slidingLogKind{})
	}
	return &l.redisRate
}
