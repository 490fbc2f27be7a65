package ratelimit

import (
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// slidingCounterKind declares the sliding counter: SlidingCounter in process,
// RedisSlidingCounter on Redis.
type slidingCounterKind struct{}

func (slidingCounterKind) name() string { return "SlidingCounter" }

func (slidingCounterKind) letter(bool) redisbatch.Kind { return redisbatch.SlidingCounter }

func (slidingCounterKind) state(bool) string { return "sc" }

func (slidingCounterKind) redisWindow(_ int, param int64) time.Duration {
	return time.Duration(param) * time.Millisecond
}

func (slidingCounterKind) redisRule(int64) rule { return rule{gradual: true} }

func (slidingCounterKind) inFlight() bool { return false }

func (slidingCounterKind) blocks() blocks { return noBlocks }

func (slidingCounterKind) share(p Policy, live int) Policy { return sharePolicy(p, live) }

func (slidingCounterKind) twin(def Policy, _ Limiter, opts []Option) (Limiter, error) {
	return NewSlidingCounter(def.Limit, def.Window, opts...)
}

func (c *SlidingCounter) kindOf() kind     { return slidingCounterKind{} }
func (c *SlidingCounter) limiter() Limiter { return c }

func (c *SlidingCounter) engineObserver() *observer {
	if c != nil && c.keys != nil {
		return &c.obs
	}
	return nil
}

func (c *SlidingCounter) clockBase() *clockBase {
	if c != nil && c.keys != nil {
		return &c.base
	}
	return nil
}

func (c *RedisSlidingCounter) kindOf() kind              { return slidingCounterKind{} }
func (c *RedisSlidingCounter) limiter() Limiter          { return c }
func (c *RedisSlidingCounter) engineObserver() *observer { return c.remote().engineObserver() }
func (c *RedisSlidingCounter) remote() *redisLimiter     { return c.rate().remote() }
