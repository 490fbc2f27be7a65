package ratelimit

import "sync"

// schedulePart is a TokenBucket or a GCRA of one policy as a Composite's
// part (see partEngine): its schedule, whose keys hold their tat.
type schedulePart struct{ s *schedule }

// keyedSchedulePart is a TokenBucket or a GCRA built WithPolicyFunc as a
// Composite's part: its schedule's PolicyFunc engine, whose keys keep their
// interval with their tat.
type keyedSchedulePart struct {
	schedulePart
	k *policyFuncSchedule
}

// schedulePartOf returns s's engine as a Composite's part; nil unless s is
// built.
func schedulePartOf(s *schedule) partEngine {
	switch {
	case !s.built():
		return nil
	case s.policyFunc != nil:
		return keyedSchedulePart{schedulePart{s}, s.policyFunc}
	}
	return schedulePart{s}
}

func (p schedulePart) policyFunc() *policyFunc                { return nil }
func (p schedulePart) own() partRate                          { return partRate{limit: p.s.capacity, param: p.s.interval} }
func (p schedulePart) unit() int64                            { return 1 }
func (p schedulePart) observer() *observer                    { return &p.s.obs }
func (p schedulePart) clock() *clockBase                      { return &p.s.base }
func (p schedulePart) segmented() bool                        { return false }
func (p schedulePart) tableKey(key string, _ partRate) string { return key }

// rate returns the part's rate for c's call: its policy's, or its own.
func (p schedulePart) rate(c *partCall) rate {
	if !c.keyed {
		return p.s.rate
	}
	return rate{interval: c.policy.param, capacity: c.policy.limit, tau: c.policy.limit * c.policy.param}
}

func (p schedulePart) shardLock(c *partCall, key string) *sync.Mutex {
	return lockPart(p.s.tats, c, key)
}

func (p schedulePart) peek(c *partCall, key string, cost int) bool {
	tat := readPart(p.s.tats, c, key, p.s.maxNow)
	c.cur, c.next, c.allowed = p.s.take(tat, c.now, cost)
	return c.allowed
}

func (p schedulePart) commit(c *partCall, key string, cost int, allowed bool) {
	if allowed && cost > 0 {
		sh := c.shard.(*tableShard[int64])
		if c.shared {
			// Another part's write may have moved the key in the shard
			// they share.
			_, c.where = sh.lookup(key)
		}
		sh.write(key, c.where, c.next, c.next)
	}
	c.res = p.result(c, allowed)
}

// result returns the part's Result of c's call, allowed or not.
func (p schedulePart) result(c *partCall, allowed bool) Result {
	r, lag := p.rate(c), lagBehind(c.now, c.reading)
	switch {
	case allowed:
		return r.result(true, c.next, c.now, lag)
	case c.allowed:
		return r.result(false, c.cur, c.now, lag)
	}
	return r.denial(c.cur, c.next, c.now, lag)
}

func (p schedulePart) settle(c *partCall, key string, d int64, _ adjustment) Result {
	sh := c.shard.(*tableShard[int64])
	now := p.s.tats.advance(sh, c.reading, p.s.maxNow)
	return p.s.settleLocked(sh, key, d, now, lagBehind(now, c.reading))
}

func (p schedulePart) reset(c *partCall, key string) {
	sh := c.shard.(*tableShard[int64])
	p.s.tats.advance(sh, c.reading, p.s.maxNow)
	_, w := sh.lookup(key)
	p.s.tats.remove(sh, key, w)
}

func (p keyedSchedulePart) policyFunc() *policyFunc { return p.k.policyFunc }

func (p keyedSchedulePart) shardLock(c *partCall, key string) *sync.Mutex {
	return lockPart(p.k.tats, c, key)
}

func (p keyedSchedulePart) peek(c *partCall, key string, cost int) bool {
	r := p.rate(c)
	st := readPart(p.k.tats, c, key, policyFuncMaxNow)
	c.converts = r.converts(st, c.now)
	c.cur, c.next, c.allowed = r.take(r.carry(st, c.now), c.now, cost)
	return c.allowed
}

// commit writes the key whenever its tat changes or it was read at another
// interval: a peek or a denial keeps the key, converted.
func (p keyedSchedulePart) commit(c *partCall, key string, _ int, allowed bool) {
	tat := c.cur
	if allowed {
		tat = c.next
	}
	if tat != c.cur || c.converts {
		sh := c.shard.(*tableShard[policyFuncTat])
		if c.shared {
			_, c.where = sh.lookup(key)
		}
		sh.write(key, c.where, policyFuncTat{tat: tat, interval: p.rate(c).interval}, tat)
	}
	c.res = p.result(c, allowed)
}

func (p keyedSchedulePart) settle(c *partCall, key string, d int64, _ adjustment) Result {
	sh := c.shard.(*tableShard[policyFuncTat])
	now := p.k.tats.advance(sh, c.reading, policyFuncMaxNow)
	return p.k.settleLocked(p.rate(c), sh, key, d, now, lagBehind(now, c.reading))
}

func (p keyedSchedulePart) reset(c *partCall, key string) {
	sh := c.shard.(*tableShard[policyFuncTat])
	p.k.tats.advance(sh, c.reading, policyFuncMaxNow)
	_, w := sh.lookup(key)
	p.k.tats.remove(sh, key, w)
}
