package ratelimit

import (
	"sync"
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
func (c *RedisSlidingCounter) redisPart() redisPart      { return plainPart{c.remote()} }

// part returns c's engine as a Composite's part; nil unless c is built.
func (c *SlidingCounter) part() partEngine {
	if c == nil || c.keys == nil {
		return nil
	}
	return counterPart{c}
}

// counterPart is a SlidingCounter as a Composite's part (see partEngine):
// built WithPolicyFunc, its keys name their window in its table.
type counterPart struct{ n *SlidingCounter }

func (p counterPart) policyFunc() *policyFunc { return p.n.policyFunc }
func (p counterPart) own() partRate           { return partRate{limit: p.n.limit, param: p.n.window} }
func (p counterPart) unit() int64             { return 0 }
func (p counterPart) observer() *observer     { return &p.n.obs }
func (p counterPart) clock() *clockBase       { return &p.n.base }
func (p counterPart) segmented() bool         { return p.n.policyFunc != nil }

func (p counterPart) tableKey(key string, r partRate) string { return p.n.tableKey(key, r.param) }

// rate returns the part's counterRate for c's call: its policy's, or its
// own.
func (p counterPart) rate(c *partCall) counterRate {
	if !c.keyed {
		return p.n.counterRate
	}
	return counterRate{limit: c.policy.limit, window: c.policy.param}
}

func (p counterPart) shardLock(c *partCall, key string) *sync.Mutex {
	return lockPart(p.n.keys, c, key)
}

func (p counterPart) peek(c *partCall, key string, cost int) bool {
	st := readPart(p.n.keys, c, key, p.n.maxNow)
	c.ncur, c.nnx, c.nleft, c.allowed = p.rate(c).take(st, c.now, cost)
	return c.allowed
}

// commit also sets the next unit when the key counts units.
func (p counterPart) commit(c *partCall, key string, cost int, allowed bool) {
	if allowed && cost > 0 {
		sh := c.shard.(*tableShard[counterState])
		if c.shared {
			_, c.where = sh.lookup(key)
		}
		sh.write(key, c.where, c.nnx, c.nnx.expiry)
	}
	r, lag := p.rate(c), lagBehind(c.now, c.reading)
	st, left := c.ncur, c.nleft
	switch {
	case allowed:
		st, left = c.nnx, c.nleft-int64(cost)
		c.res = r.resultLeft(true, st, left, c.now, lag)
	case c.allowed:
		c.res = r.resultLeft(false, st, left, c.now, lag)
	default:
		c.res = r.denial(st, left, c.now, int64(cost), lag)
	}
	if c.wantNext && left < r.limit {
		c.nextOut = r.nextUnit(st, left, c.now, lag)
	}
}

func (p counterPart) settle(c *partCall, key string, d int64, a adjustment) Result {
	sh := c.shard.(*tableShard[counterState])
	now := p.n.keys.advance(sh, c.reading, p.n.maxNow)
	return p.n.settleAt(p.rate(c), sh, key, d, a, now, lagBehind(now, c.reading))
}

func (p counterPart) reset(c *partCall, key string) {
	sh := c.shard.(*tableShard[counterState])
	p.n.keys.advance(sh, c.reading, p.n.maxNow)
	_, w := sh.lookup(key)
	p.n.keys.remove(sh, key, w)
}
