package ratelimit

import (
	"fmt"
	"hash/maphash"
	"math"
	"sync"
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
// A key whose tat has passed is full, which is the same as an absent key, so
// the engine keeps state only for keys that are not full. Keys are spread over
// shards; each shard keeps two generations of keys and, on its own calls,
// drops a generation once all its keys must be full again. No goroutine is
// involved, and memory is bounded by the keys used within the last fill time.
//
// A schedule is safe for concurrent use.
type schedule struct {
	clock    Clock
	start    time.Time // clock reading that is time 0
	interval int64     // T: nanoseconds per token, >= 1
	capacity int64     // C: tokens, >= 1
	tau      int64     // C·T: nanoseconds from empty to full
	span     int64     // how long a generation lasts: max(tau, minSpan)
	maxNow   int64     // time stands still past this, so tat arithmetic cannot overflow
	seed     maphash.Seed
	shards   [shardCount]shard
}

// shardCount is the number of independently locked parts of a schedule; a
// power of two.
const shardCount = 64

// maxTau bounds C·T so that now + 2·tau never overflows an int64, even at the
// largest clock reading a time.Duration can express.
const maxTau = math.MaxInt64 / 4

// minSpan is the shortest time a generation lasts, so that a bucket that
// fills in microseconds does not make a new map on every call.
const minSpan = int64(time.Millisecond)

// shard holds the keys whose hash falls on it. Its fields are guarded by mu.
type shard struct {
	mu   sync.Mutex
	now  int64      // latest time seen; the shard's time never goes backwards
	cur  generation // keys written since cur.born
	prev generation // keys last written before cur.born
	_    [128 - 8 - 8 - 2*24]byte
}

// generation is a set of keys last written within one stretch of time.
type generation struct {
	tats   map[string]int64 // key → tat; nil until the first write
	born   int64            // when the generation started
	maxTat int64            // the latest tat written into it
}

// newSchedule validates a bucket of capacity tokens refilling one token every
// interval nanoseconds and returns its engine. kind names the limiter in
// errors.
func newSchedule(kind string, capacity int, interval int64, clock Clock) (*schedule, error) {
	if capacity <= 0 {
		return nil, fmt.Errorf("%w: %s: capacity %d must be > 0", ErrInvalidConfig, kind, capacity)
	}
	if interval < 1 {
		return nil, fmt.Errorf("%w: %s: one token every %d ns is shorter than the clock's 1 ns unit", ErrInvalidConfig, kind, interval)
	}
	if int64(capacity) > maxTau/interval {
		return nil, fmt.Errorf("%w: %s: capacity %d × %s per token overflows the clock", ErrInvalidConfig, kind, capacity, time.Duration(interval))
	}
	tau := int64(capacity) * interval
	return &schedule{
		clock:    clock,
		start:    clock.Now(),
		interval: interval,
		capacity: int64(capacity),
		tau:      tau,
		span:     max(tau, minSpan),
		maxNow:   math.MaxInt64 - 2*tau,
		seed:     maphash.MakeSeed(),
	}, nil
}

// allow decides n for key. See Limiter for the contract.
func (s *schedule) allow(key string, n int) (Result, error) {
	if n < 0 {
		return Result{Limit: int(s.capacity)}, fmt.Errorf("%w: n = %d must be >= 0", ErrInvalidCost, n)
	}
	if int64(n) > s.capacity {
		return Result{Limit: int(s.capacity)}, fmt.Errorf("%w: n = %d, limit = %d", ErrCostExceedsLimit, n, s.capacity)
	}
	reading := int64(s.clock.Now().Sub(s.start))
	sh := &s.shards[maphash.String(s.seed, key)&(shardCount-1)]

	sh.mu.Lock()
	now := sh.advance(reading, s.maxNow, s.span)
	tat, inCur := sh.lookup(key)
	tat = max(tat, now)
	newTat := tat + int64(n)*s.interval
	allowed := newTat-now <= s.tau
	if allowed && n > 0 {
		sh.store(key, newTat, inCur)
	}
	sh.mu.Unlock()

	// A clock behind the shard's time must first catch up: that lag is part
	// of every wait.
	lag := min(max(now-reading, 0), maxTau)
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

// advance moves the shard's time to now, unless now is earlier (a clock going
// backwards creates no tokens; time stands still until it catches up), and
// drops generations whose keys are all full. It returns the shard's time.
func (sh *shard) advance(now, maxNow, span int64) int64 {
	now = min(max(now, sh.now), maxNow)
	sh.now = now
	if now-sh.cur.born < span {
		return now
	}
	// Every key in prev was last written before cur.born, so its tat is at
	// most cur.born + tau <= cur.born + span <= now: prev is all full, and
	// goes. cur becomes prev, unless its keys are all full as well.
	if sh.cur.maxTat <= now {
		sh.prev = generation{}
	} else {
		sh.prev = sh.cur
	}
	sh.cur = generation{born: now}
	return now
}

// lookup returns key's tat and whether it is in the current generation. An
// absent key has tat 0, which is always in the past: full.
func (sh *shard) lookup(key string) (tat int64, inCur bool) {
	if tat, ok := sh.cur.tats[key]; ok {
		return tat, true
	}
	return sh.prev.tats[key], false
}

// store writes key's tat into the current generation, moving it out of the
// previous one if it was there.
func (sh *shard) store(key string, tat int64, inCur bool) {
	if !inCur {
		delete(sh.prev.tats, key)
		if sh.cur.tats == nil {
			sh.cur.tats = make(map[string]int64)
		}
	}
	sh.cur.tats[key] = tat
	sh.cur.maxTat = max(sh.cur.maxTat, tat)
}

// keys returns how many keys the schedule holds. It is for tests.
func (s *schedule) keys() int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += len(sh.cur.tats) + len(sh.prev.tats)
		sh.mu.Unlock()
	}
	return total
}
