package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// GCRA is an in-process generic cell rate algorithm limiter: limit requests per
// period per key, with bursts of up to limit.
//
// It keeps one timestamp per key, the theoretical arrival time, and decides
// exactly as a TokenBucket with capacity limit and rate limit/period: with an
// emission interval T = period/limit, a request for n at now moves the key's
// time to max(tat, now) + n·T and is allowed iff that is at most limit·T ahead
// of now.
//
// A GCRA is safe for concurrent use. The zero value is not usable; create one
// with NewGCRA.
type GCRA struct {
	s *schedule
}

// NewGCRA returns an in-process GCRA allowing limit per period per key.
//
// The emission interval period/limit is rounded to the nearest nanosecond. It
// accepts WithClock. It returns an error wrapping ErrInvalidConfig for a limit
// <= 0, a period <= 0, a period/limit under 1 ns, or an option that does not
// apply.
func NewGCRA(limit int, period time.Duration, opts ...Option) (*GCRA, error) {
	const kind = "NewGCRA"
	cfg, err := applyOptions(kind, inProcess, opts)
	if err != nil {
		return nil, err
	}
	interval, err := periodInterval(kind, limit, period, time.Nanosecond)
	if err != nil {
		return nil, err
	}
	s, err := newSchedule(kind, limit, interval, cfg.clock)
	if err != nil {
		return nil, err
	}
	return &GCRA{s: s}, nil
}

// Allow decides n for key. See Limiter for the contract; ctx is not used, as
// the decision never blocks.
func (g *GCRA) Allow(_ context.Context, key string, n int) (Result, error) {
	return g.s.allow(key, n)
}

// FillTime returns the time a key takes to go from exhausted to its full
// limit: limit emission intervals, which is period up to rounding.
func (g *GCRA) FillTime() time.Duration { return g.s.fillTime() }

// Policy returns the limit and FillTime.
func (g *GCRA) Policy() Policy { return g.s.policy() }

// periodInterval returns period/limit in whole units, rounded to nearest,
// rejecting a limit or period <= 0 and an interval under one unit.
func periodInterval(kind string, limit int, period, unit time.Duration) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: %s: limit %d must be > 0", ErrInvalidConfig, kind, limit)
	}
	if period <= 0 {
		return 0, fmt.Errorf("%w: %s: period %v must be > 0", ErrInvalidConfig, kind, period)
	}
	if int64(period)/int64(unit) < int64(limit) {
		return 0, fmt.Errorf("%w: %s: period %v / limit %d is under one clock unit (%v) per request", ErrInvalidConfig, kind, period, limit, unit)
	}
	// period/(limit·unit) rounded to nearest, halves up; limit·unit <= period.
	d := int64(limit) * int64(unit)
	interval, rem := int64(period)/d, int64(period)%d
	if rem >= d-rem {
		interval++
	}
	return interval, nil
}

//go:embed scripts/gcra.lua
var gcraLua string

// gcraScript is immutable: go-redis only reads its source and hash.
var gcraScript = redis.NewScript(gcraLua)

// DefaultGCRAPrefix is the prefix RedisGCRA puts before every key unless
// WithKeyPrefix says otherwise.
const DefaultGCRAPrefix = "ratelimit:gcra:"

// RedisGCRA is a GCRA limiter per key kept in Redis: limit requests per period,
// with bursts of up to limit, shared by every process using the same Redis.
//
// Each decision is one EVALSHA of an embedded Lua script on the server's TIME.
// Each key is one STRING at prefix+key holding the theoretical arrival time in
// integer microseconds, with a TTL equal to the time until the key is back to
// its full limit (whole ms, rounded up). It decides exactly as a
// RedisTokenBucket of capacity limit and rate limit/period.
//
// Calls with n < 0 or n > limit are answered without a round trip; n == 0
// reads without creating the key. Redis errors, timeouts and malformed replies
// are returned wrapped, with Allowed false.
//
// A RedisGCRA is safe for concurrent use as far as its client is. The zero
// value is not usable; create one with NewRedisGCRA.
type RedisGCRA struct {
	r        redisLimiter
	fillTime time.Duration
}

// NewRedisGCRA returns a GCRA of limit per period per key kept in Redis
// through client: a *redis.Client, *redis.ClusterClient, *redis.Ring or
// failover client.
//
// The emission interval period/limit is rounded to the nearest microsecond.
// It accepts WithKeyPrefix (default DefaultGCRAPrefix). It returns an error
// wrapping ErrInvalidConfig for a nil client, a limit <= 0, a period <= 0, a
// period/limit under 1 µs, a limit × interval beyond 2^52 µs, or an option
// that does not apply.
func NewRedisGCRA(client redis.Scripter, limit int, period time.Duration, opts ...Option) (*RedisGCRA, error) {
	const kind = "NewRedisGCRA"
	r, err := newRedisLimiter(kind, "Redis GCRA", client, gcraScript, DefaultGCRAPrefix, "limit", limit, opts)
	if err != nil {
		return nil, err
	}
	interval, err := periodInterval(kind, limit, period, time.Microsecond)
	if err != nil {
		return nil, err
	}
	if err := checkRedisSpan(kind, int64(limit), interval); err != nil {
		return nil, err
	}
	r.setParam(interval)
	return &RedisGCRA{r: r, fillTime: time.Duration(int64(limit)*interval) * time.Microsecond}, nil
}

// Allow decides n for key in Redis. See Limiter for the contract. ctx bounds
// the round trip.
func (g *RedisGCRA) Allow(ctx context.Context, key string, n int) (Result, error) {
	return g.r.allow(ctx, key, n)
}

// FillTime returns the time a key takes to go from exhausted to its full
// limit: limit emission intervals, which is period up to rounding.
func (g *RedisGCRA) FillTime() time.Duration { return g.fillTime }

// Policy returns the limit and FillTime.
func (g *RedisGCRA) Policy() Policy { return Policy{Limit: g.r.limit, Window: g.fillTime} }
