package ratelimit

import (
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// fixedWindowKind declares the fixed window: FixedWindow in process,
// RedisFixedWindow on Redis.
type fixedWindowKind struct{}

func (fixedWindowKind) name() string { return "FixedWindow" }

func (fixedWindowKind) letter(bool) redisbatch.Kind { return redisbatch.FixedWindow }

func (fixedWindowKind) state(bool) string { return "fw" }

func (fixedWindowKind) redisWindow(_ int, param int64) time.Duration {
	return time.Duration(param) * time.Millisecond
}

func (fixedWindowKind) redisRule(int64) rule { return rule{} }

func (fixedWindowKind) inFlight() bool { return false }

func (fixedWindowKind) blocks() blocks { return blocksByWindow }

func (fixedWindowKind) share(p Policy, live int) Policy { return sharePolicy(p, live) }

func (fixedWindowKind) twin(def Policy, _ Limiter, opts []Option) (Limiter, error) {
	return NewFixedWindow(def.Limit, def.Window, opts...)
}

func (w *FixedWindow) kindOf() kind     { return fixedWindowKind{} }
func (w *FixedWindow) limiter() Limiter { return w }

func (w *FixedWindow) engineObserver() *observer {
	if w != nil && w.windows != nil {
		return &w.obs
	}
	return nil
}

func (w *FixedWindow) clockBase() *clockBase {
	if w != nil && w.windows != nil {
		return &w.base
	}
	return nil
}

func (w *RedisFixedWindow) kindOf() kind              { return fixedWindowKind{} }
func (w *RedisFixedWindow) limiter() Limiter          { return w }
func (w *RedisFixedWindow) engineObserver() *observer { return w.remote().engineObserver() }
func (w *RedisFixedWindow) remote() *redisLimiter     { return w.rate().remote() }
