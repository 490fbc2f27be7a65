package ratelimit

import (
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// gcraKind declares GCRA: GCRA in process,
// RedisGCRA on Redis.
type gcraKind struct{}

func (gcraKind) name() string { return "GCRA" }

func (gcraKind) letter(keyed bool) redisbatch.Kind {
	if keyed {
		return redisbatch.GCRAWithInterval
	}
	return redisbatch.GCRA
}

func (gcraKind) state(keyed bool) string {
	if keyed {
		return "gcra-i"
	}
	return "gcra"
}

func (gcraKind) redisWindow(limit int, param int64) time.Duration { return unitsWindow(limit, param) }

func (gcraKind) redisRule(param int64) rule { return rule{unit: param * int64(time.Microsecond)} }

func (gcraKind) inFlight() bool { return false }

func (gcraKind) blocks() blocks { return blocksByUnit }

func (gcraKind) share(p Policy, live int) Policy { return sharePolicy(p, live) }

func (gcraKind) twin(def Policy, _ Limiter, opts []Option) (Limiter, error) {
	return NewGCRA(def.Limit, def.Window, opts...)
}

func (g *GCRA) kindOf() kind     { return gcraKind{} }
func (g *GCRA) limiter() Limiter { return g }

func (g *GCRA) engineObserver() *observer {
	if (*schedule)(g).built() {
		return &(*schedule)(g).obs
	}
	return nil
}

func (g *GCRA) clockBase() *clockBase {
	if (*schedule)(g).built() {
		return &(*schedule)(g).base
	}
	return nil
}

func (g *RedisGCRA) kindOf() kind              { return gcraKind{} }
func (g *RedisGCRA) limiter() Limiter          { return g }
func (g *RedisGCRA) engineObserver() *observer { return g.remote().engineObserver() }
func (g *RedisGCRA) remote() *redisLimiter     { return g.rate().remote() }
func (g *RedisGCRA) redisPart() redisPart      { return plainPart{g.remote()} }

// part returns g's engine as a Composite's part; nil unless g is built.
func (g *GCRA) part() partEngine { return schedulePartOf((*schedule)(g)) }
