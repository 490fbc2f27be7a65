package ratelimit

import (
	"sync"
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
func (c *RedisConcurrency) redisPart() redisPart      { return plainPart{c.remote()} }

// part returns c's engine as a Composite's part; nil unless c is built.
func (c *Concurrency) part() partEngine {
	if !c.built() {
		return nil
	}
	return heldPart{c}
}

// heldPart is a Concurrency as a Composite's part (see partEngine), with
// the engine its Acquire and Reset use: its policy's param is its lease
// TTL (ns). It makes its Result under the lock in commit, where a
// denial's wait reads the key's leases; units in flight come back by
// their leases alone, so a Settle leaves the key as it is.
type heldPart struct{ c *Concurrency }

func (p heldPart) policyFunc() *policyFunc                { return p.c.policyFunc }
func (p heldPart) own() partRate                          { return partRate{limit: p.c.limit, param: p.c.ttl} }
func (p heldPart) unit() int64                            { return 0 }
func (p heldPart) observer() *observer                    { return &p.c.obs }
func (p heldPart) clock() *clockBase                      { return &p.c.base }
func (p heldPart) segmented() bool                        { return false }
func (p heldPart) tableKey(key string, _ partRate) string { return key }

// rate returns the part's limit and lease TTL (ns) for c's call: its
// policy's, or its own.
func (p heldPart) rate(c *partCall) (int64, int64) {
	if !c.keyed {
		return p.c.limit, p.c.ttl
	}
	return c.policy.limit, c.policy.param
}

// shardLock keeps the shard's index too: a lease's id names its shard.
func (p heldPart) shardLock(c *partCall, key string) *sync.Mutex {
	c.idx = p.c.keys.shardIndex(key)
	sh := &p.c.keys.shards[c.idx]
	c.shard = sh
	return &sh.mu
}

// peek reads key into c at the part's time, with its expired leases swept.
func (p heldPart) peek(c *partCall, key string, cost int) bool {
	sh := c.shard.(*tableShard[*heldUnits])
	limit, _ := p.rate(c)
	c.now = p.c.keys.advance(sh, c.reading, p.c.maxNow)
	c.held, c.where = sh.lookup(key)
	if c.where == absent {
		c.held = new(heldUnits)
	}
	c.held.sweep(c.now)
	c.allowed = cost == 0 || c.held.units+int64(cost) <= limit
	return c.allowed
}

// commit takes cost units for key when the call is allowed, for the
// part's TTL, and sets c.lease, when asked (c.leased), to the Lease that
// holds them, as the Concurrency's own Acquire would. The key is written back whenever
// it was there, as its sweep may have changed it.
func (p heldPart) commit(c *partCall, key string, cost int, allowed bool) {
	sh := c.shard.(*tableShard[*heldUnits])
	limit, ttl := p.rate(c)
	n := int64(cost)
	take := allowed && n > 0
	if take {
		// An id names its shard, as Concurrency's own do.
		sh.seq++
		id := sh.seq*shardCount + uint64(c.idx)
		c.held.take(heldLease{id: id, units: n, expiry: c.now + ttl})
		if c.leased {
			c.lease = Lease{holder: p.c, key: key, id: id, units: cost, ttl: time.Duration(ttl)}
		}
	}
	lag := lagBehind(c.now, c.reading)
	res := Result{Allowed: allowed, Limit: int(limit)}
	if !c.allowed {
		res.RetryAfter = time.Duration(c.held.wait(limit, n, c.now) + lag)
	}
	res.Remaining = int(c.held.free(limit))
	if c.held.units > 0 {
		res.ResetAfter = time.Duration(c.held.latest - c.now + lag)
	}
	if c.where != absent || take {
		if c.shared {
			_, c.where = sh.lookup(key)
		}
		if c.where == absent {
			sh.write(key, c.where, c.held, c.held.latest)
		} else {
			keep(sh, key, c.where, c.held, c.now)
		}
	}
	c.res = res
}

// settle returns the Result of a Refund or Settle: allowed, and the key's
// state untouched, as its units in flight come back by their leases alone.
func (p heldPart) settle(c *partCall, key string, _ int64, _ adjustment) Result {
	p.peek(c, key, 0)
	sh := c.shard.(*tableShard[*heldUnits])
	limit, _ := p.rate(c)
	if c.where != absent {
		keep(sh, key, c.where, c.held, c.now)
	}
	res := Result{Allowed: true, Limit: int(limit), Remaining: int(c.held.free(limit))}
	if c.held.units > 0 {
		res.ResetAfter = time.Duration(c.held.latest - c.now + lagBehind(c.now, c.reading))
	}
	return res
}

// reset drops every lease of the key, as Concurrency.Reset does.
func (p heldPart) reset(c *partCall, key string) {
	sh := c.shard.(*tableShard[*heldUnits])
	p.c.keys.advance(sh, c.reading, p.c.maxNow)
	_, w := sh.lookup(key)
	p.c.keys.remove(sh, key, w)
}

// newLease returns the id and the name of a new lease of c's, which a
// Composite's request takes its units under (see leaseNamer).
func (c *RedisConcurrency) newLease() (uint64, string) {
	id := c.seq.Add(1)
	return id, c.leaseName(id)
}
