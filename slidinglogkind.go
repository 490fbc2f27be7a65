package ratelimit

import (
	"sync"
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
func (l *RedisSlidingLog) redisPart() redisPart      { return plainPart{l.remote()} }

// part returns l's engine as a Composite's part; nil unless l is built.
func (l *SlidingLog) part() partEngine {
	if l == nil || l.logs == nil {
		return nil
	}
	return logPart{l}
}

// logPart is a SlidingLog as a Composite's part (see partEngine). It makes
// its Result under the lock in commit, where a denial's wait and the next
// unit read the key's log.
type logPart struct{ g *SlidingLog }

func (p logPart) policyFunc() *policyFunc                { return p.g.policyFunc }
func (p logPart) own() partRate                          { return partRate{limit: p.g.limit, param: p.g.window} }
func (p logPart) unit() int64                            { return 0 }
func (p logPart) observer() *observer                    { return &p.g.obs }
func (p logPart) clock() *clockBase                      { return &p.g.base }
func (p logPart) segmented() bool                        { return false }
func (p logPart) tableKey(key string, _ partRate) string { return key }

// rate returns the part's logRate for c's call: its policy's, or its own.
func (p logPart) rate(c *partCall) logRate {
	if !c.keyed {
		return p.g.logRate
	}
	return logRate{limit: c.policy.limit, window: c.policy.param}
}

func (p logPart) shardLock(c *partCall, key string) *sync.Mutex {
	return lockPart(p.g.logs, c, key)
}

func (p logPart) peek(c *partCall, key string, cost int) bool {
	c.log = readPart(p.g.logs, c, key, p.g.maxNow)
	r := p.rate(c)
	c.log.sweep(c.now, r.window)
	c.allowed = int64(cost) <= max(r.limit-c.log.sum, 0)
	return c.allowed
}

// commit takes cost when the call is allowed and sets the part's Result:
// a part that would have allowed a denied call reports its log untouched,
// with nothing to wait for; and the next unit, when the log holds units
// (see logRate.nextUnit).
func (p logPart) commit(c *partCall, key string, cost int, allowed bool) {
	r := p.rate(c)
	lag := lagBehind(c.now, c.reading)
	switch {
	case allowed && cost > 0:
		c.log.add(c.now, int64(cost), r.limit)
		c.log.end = c.now + r.window
		sh := c.shard.(*tableShard[entryLog])
		if c.shared {
			_, c.where = sh.lookup(key)
		}
		sh.write(key, c.where, c.log, c.log.end)
		c.res = r.result(true, &c.log, c.now, lag)
	case allowed:
		c.res = r.result(true, &c.log, c.now, lag)
	case c.allowed:
		c.res = r.result(false, &c.log, c.now, lag)
	default:
		c.res = r.denial(&c.log, int64(cost), c.now, lag)
	}
	if c.wantNext {
		c.nextOut = 0
		if c.log.sum > 0 {
			c.nextOut = r.nextUnit(&c.log, c.now, lag)
		}
	}
}

func (p logPart) settle(c *partCall, key string, d int64, a adjustment) Result {
	sh := c.shard.(*tableShard[entryLog])
	now := p.g.logs.advance(sh, c.reading, p.g.maxNow)
	return p.g.settleAt(p.rate(c), sh, key, d, a, now, lagBehind(now, c.reading))
}

func (p logPart) reset(c *partCall, key string) {
	sh := c.shard.(*tableShard[entryLog])
	p.g.logs.advance(sh, c.reading, p.g.maxNow)
	_, w := sh.lookup(key)
	p.g.logs.remove(sh, key, w)
}
