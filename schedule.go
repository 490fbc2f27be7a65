package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// schedule is the in-process engine behind TokenBucket and GCRA. For each key
// it keeps one integer: the theoretical arrival time (tat), the instant in
// nanoseconds at which the key's bucket is full again. With T nanoseconds per
// token and a capacity of C tokens, the bucket holds C - (tat-now)/T tokens at
// now; taking n moves tat to max(tat, now) + n·T, and that is allowed iff the
// new tat is at most tau = C·T ahead of now. That is a token bucket and GCRA
// at once, in integers only, so no decision ever drifts.
//
// A key whose tat has passed is full, the same as an absent key, so its tat is
// also its expiry in the keyTable. Time stands still for the keys of a shard
// while the clock reads earlier than the shard's latest call, so a clock going
// backwards creates no tokens.
//
// A schedule is safe for concurrent use.
type schedule struct {
	base     clockBase
	interval int64 // T: nanoseconds per token, >= 1
	capacity int64 // C: tokens, >= 1
	tau      int64 // C·T: nanoseconds from empty to full
	maxNow   int64 // time stands still past this, so tat arithmetic cannot overflow
	tats     *keyTable[int64]
}

// newSchedule returns the engine of a bucket of capacity tokens (> 0, which
// its callers have checked) refilling one token every interval nanoseconds,
// rejecting an interval or a fill time the clock cannot hold. kind names the
// limiter in errors.
func newSchedule(kind string, capacity int, interval int64, clock Clock) (*schedule, error) {
	if interval < 1 {
		return nil, fmt.Errorf("%w: %s: one token every %d ns is shorter than the clock's 1 ns unit", ErrInvalidConfig, kind, interval)
	}
	if int64(capacity) > maxSpan/interval {
		return nil, fmt.Errorf("%w: %s: capacity %d × %s per token overflows the clock", ErrInvalidConfig, kind, capacity, time.Duration(interval))
	}
	tau := int64(capacity) * interval
	return &schedule{
		base:     newClockBase(clock),
		interval: interval,
		capacity: int64(capacity),
		tau:      tau,
		maxNow:   math.MaxInt64 - 2*tau,
		tats:     newKeyTable[int64](tau),
	}, nil
}

// allow decides n for key. See Limiter for the contract.
func (s *schedule) allow(key string, n int) (Result, error) {
	if err := checkCost(n, int(s.capacity)); err != nil {
		return Result{Limit: int(s.capacity)}, err
	}
	reading := s.base.elapsed()
	sh, now := s.tats.lock(key, reading, s.maxNow)
	tat, w := sh.lookup(key)
	tat = max(tat, now) // an absent key's tat, 0, has passed: it is full
	newTat := tat + int64(n)*s.interval
	allowed := newTat-now <= s.tau
	if allowed && n > 0 {
		sh.write(key, w, newTat, newTat)
	}
	sh.mu.Unlock()

	// A clock behind the shard's time must first catch up: that lag is part
	// of every wait.
	lag := lagBehind(now, reading)
	if !allowed {
		res := s.result(false, tat, now, lag)
		res.RetryAfter = time.Duration(lag + newTat - s.tau - now)
		return res, nil
	}
	return s.result(true, newTat, now, lag), nil
}

// result describes a key whose tat is tat (>= now) at the shard's time now,
// read from a clock lag behind it.
func (s *schedule) result(allowed bool, tat, now, lag int64) Result {
	ahead := tat - now
	if ahead > 0 {
		ahead += lag
	}
	return Result{
		Allowed:    allowed,
		Limit:      int(s.capacity),
		Remaining:  int((s.tau - (tat - now)) / s.interval),
		ResetAfter: time.Duration(ahead),
	}
}

// fillTime is the time from empty to full.
func (s *schedule) fillTime() time.Duration { return time.Duration(s.tau) }

// policy is the capacity and the time from empty to full.
func (s *schedule) policy() Policy {
	return Policy{Limit: int(s.capacity), Window: time.Duration(s.tau)}
}
