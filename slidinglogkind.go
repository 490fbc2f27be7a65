package ratelimit

import (
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// slidingLogKind declares the sliding log: SlidingLog in process,
// RedisSlidingLog on Redis.
type slidingLogKind struct{}

func (slidingLogKind) name() string { return "SlidingLog" }

func (slidingLogKind) letter(bool) redisbatch.Kind { return redisbatch.SlidingLog }

func (slidingLogKind) state(bool) string { return "sl" }

func (slidingLogKind) redisWindow(_ int, param int64) time.Duration {
	return time.Duration(param) * time.Millisecond
}

func (slidingLogKind) redisRule(int64) rule { return rule{gradual: true} }

func (slidingLogKind) inFlight() bool { return false }

func (slidingLogKind) blocks() blocks { return noBlocks }

func (slidingLogKind) share(p Policy, live int) Policy { return sharePolicy(p, live) }

func (slidingLogKind) twin(def Policy, _ Limiter, opts []Option) (Limiter, error) {
	return NewSlidingLog(def.Limit, def.Window, opts...)
}

func (l *SlidingLog) kindOf() kind     { return slidingLogKind{} }
func (l *SlidingLog) limiter() Limiter { return l }

func (l *SlidingLog) engineObserver() *observer {
	if l != nil && l.logs != nil {
		return &l.obs
	}
	return nil
}

func (l *SlidingLog) clockBase() *clockBase {
	if l != nil && l.logs != nil {
		return &l.base
	}
	return nil
}

func (l *RedisSlidingLog) kindOf() kind              { return slidingLogKind{} }
func (l *RedisSlidingLog) limiter() Limiter          { return l }
func (l *RedisSlidingLog) engineObserver() *observer { return l.remote().engineObserver() }
func (l *RedisSlidingLog) remote() *redisLimiter     { return l.rate().remote() }
