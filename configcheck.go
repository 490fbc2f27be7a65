package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// The configuration checks of every constructor, in-process and Redis, so
// that each rule is written once. Each returns an error wrapping
// ErrInvalidConfig whose text starts with kind, the constructor's name.

// maxSpan bounds the in-process limiters' spans (time from empty to full, or a
// window) so that now + 2·span never overflows an int64 at the largest clock
// reading a time.Duration can express.
const maxSpan = math.MaxInt64 / 4

// maxRedisSpan bounds, in microseconds, a Redis limiter's time from empty to
// full (or its window), so that the scripts' sums of it and the server's
// clock stay below 2^53, where Lua's doubles stop holding every integer, and
// convert to time.Duration without overflow.
const maxRedisSpan = 1 << 52

// maxRedisLimit bounds a Redis limiter's limit (or capacity), so that a count
// plus a cost, both at most the limit, stays at most 2^53, which Lua's doubles
// hold exactly.
const maxRedisLimit = 1 << 52

// checkFillTime rejects a capacity (> 0) of tokens one every interval
// (>= 1) ns apart whose fill time the clock cannot hold.
func checkFillTime(kind string, capacity int, interval int64) error {
	if int64(capacity) > maxSpan/interval {
		return fmt.Errorf("%w: %s: capacity %d × %s per token overflows the clock", ErrInvalidConfig, kind, capacity, time.Duration(interval))
	}
	return nil
}

// checkLimit rejects a limit (called what: "limit" or "capacity") that is
// <= 0 or above most.
func checkLimit(kind, what string, limit int, most int64) error {
	if limit <= 0 {
		return fmt.Errorf("%w: %s: %s %d must be > 0", ErrInvalidConfig, kind, what, limit)
	}
	if int64(limit) > most {
		return fmt.Errorf("%w: %s: %s %d is above %d, the most it can count exactly", ErrInvalidConfig, kind, what, limit, most)
	}
	return nil
}

// periodInterval returns period/limit in whole units, rounded to nearest,
// rejecting a limit or period <= 0 and an interval under one unit.
func periodInterval(kind string, limit int, period, unit time.Duration) (int64, error) {
	if err := checkLimit(kind, "limit", limit, math.MaxInt64); err != nil {
		return 0, err
	}
	if period <= 0 {
		return 0, fmt.Errorf("%w: %s: period %v must be > 0", ErrInvalidConfig, kind, period)
	}
	if int64(period)/int64(unit) < int64(limit) {
		return 0, fmt.Errorf("%w: %s: period %v / limit %d is under one clock unit (%v) per request", ErrInvalidConfig, kind, period, limit, unit)
	}
	return perUnit(period, int64(limit), unit), nil
}

// perUnit returns d/(n·unit), the time per unit of n units every d, in
// whole clock units of unit, rounded to nearest, halves up. The caller has
// checked that n > 0 and n·unit <= d, so nothing overflows.
func perUnit(d time.Duration, n int64, unit time.Duration) int64 {
	den := n * int64(unit)
	interval, rem := int64(d)/den, int64(d)%den
	if rem >= den-rem {
		interval++
	}
	return interval
}

// checkWindow rejects a limit or window <= 0.
func checkWindow(kind string, limit int, window time.Duration) error {
	if err := checkLimit(kind, "limit", limit, math.MaxInt64); err != nil {
		return err
	}
	if window <= 0 {
		return fmt.Errorf("%w: %s: window %v must be > 0", ErrInvalidConfig, kind, window)
	}
	return nil
}

// checkRedisSpan rejects a span of count × micros µs beyond maxRedisSpan;
// count and micros are >= 1.
func checkRedisSpan(kind string, count, micros int64) error {
	if count > maxRedisSpan/micros {
		return fmt.Errorf("%w: %s: %d × %d µs is beyond the 2^52 µs a Redis script can count exactly", ErrInvalidConfig, kind, count, micros)
	}
	return nil
}
