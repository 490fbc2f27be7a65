package ratelimit

import (
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// concurrencyKind declares units in flight: Concurrency in process,
// RedisConcurrency on Redis.
type concurrencyKind struct{}

func (concurrencyKind) name() string { return "Concurrency" }

func (concurrencyKind) letter(bool) redisbatch.Kind { return redisbatch.Concurrency }

func (concurrencyKind) state(bool) string { return "inflight" }

func (concurrencyKind) redisWindow(_ int, param int64) time.Duration {
	return time.Duration(param) * time.Microsecond
}

func (concurrencyKind) redisRule(int64) rule { return rule{inFlight: true} }

func (concurrencyKind) inFlight() bool { return true }

func (concurrencyKind) blocks() blocks { return noBlocks }

func (concurrencyKind) share(p Policy, live int) Policy { return shareInFlight(p, live) }

func (concurrencyKind) twin(def Policy, _ Limiter, opts []Option) (Limiter, error) {
	return NewConcurrency(def.Limit, def.Window, opts...)
}

func (c *Concurrency) kindOf() kind     { return concurrencyKind{} }
func (c *Concurrency) limiter() Limiter { return c }

func (c *Concurrency) engineObserver() *observer {
	if c.built() {
		return &c.obs
	}
	return nil
}

func (c *Concurrency) clockBase() *clockBase {
	if c.built() {
		return &c.base
	}
	return nil
}

func (c *RedisConcurrency) kindOf() kind              { return concurrencyKind{} }
func (c *RedisConcurrency) limiter() Limiter          { return c }
func (c *RedisConcurrency) engineObserver() *observer { return c.remote().engineObserver() }
func (c *RedisConcurrency) remote() *redisLimiter     { return c.shell().remote() }
