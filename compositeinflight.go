package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// This file holds what a Composite does with a part that limits units in
// flight (a Concurrency, or a RedisConcurrency among Redis parts): its
// Acquire, and the in-process engine's share of such a
// part (redisParts decides the Redis one as one check of its request).

var (
	_ Acquirer = (*Composite)(nil)
	_ Acquirer = (*Guard)(nil)
	_ Acquirer = (*DenyCache)(nil)
)

// Acquire takes n units for key from every part, all or nothing, as Allow
// does, and returns the Lease that holds the concurrency part's units:
// the slot is taken only when every rate part allows the call, and the
// rate parts' units only when the slot is free, so a denial takes nothing
// anywhere. The Lease is the concurrency part's (its key is the part's
// key, after Part.Key); releasing it gives back the units in flight alone,
// as the rate parts' units stay taken. A Composite without a concurrency
// part decides as Decide does and returns a Lease that holds nothing. On
// Redis it is one script request for every part, coalesced with the
// Composite's other calls. See Composite.
func (c *Composite) Acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	return c.call(ctx, key, n, true)
}

// findInFlight finds the part of c that limits units in flight, if any,
// and refuses more than one. kind names the constructor in errors.
func (c *Composite) findInFlight(kind string) error {
	c.inFlight = -1
	var names []string
	for i, p := range c.parts {
		// Built or not: a zero-value one fails newLocalParts and
		// newRedisParts.
		e, ok := engineOf(p.Limiter)
		if !ok || !e.kindOf().inFlight() {
			continue
		}
		h, ok := p.Limiter.(leaseHolder)
		if !ok {
			continue
		}
		names = append(names, p.Name)
		if c.inFlight < 0 {
			c.inFlight, c.holder = i, h
		}
	}
	if len(names) > 1 {
		return fmt.Errorf("%w: %s: parts %q are concurrency limiters; a Composite holds at most one limit of units in flight", ErrInvalidConfig, kind, names)
	}
	return nil
}

// reportLease tells the hooks of one call's Decision d and the lease it
// granted. The caller has checked that o.hooks is not nil.
func (o *observer) reportLease(key string, n int, d Decision, lease Lease, err error, latency time.Duration) {
	o.hooks.Decided(Event{Limiter: o.name, Key: o.keys.event(o.hooks, key), Cost: n, Decision: d, Lease: lease, Err: err, Latency: latency})
}

// inFlightOf returns part i's limit and lease TTL (ns), a Concurrency's,
// for a call whose parts' policies are rates (nil: each part's own).
func (l *localParts) inFlightOf(i int, rates []partRate) (int64, int64) {
	if rates == nil {
		p := l.parts[i].c
		return p.limit, p.ttl
	}
	return rates[i].limit, rates[i].param
}

// peekHeld reads part i's key, a Concurrency's, into c at the part's time,
// with its expired leases swept, and reports whether cost units fit in it.
// c's shard is locked.
func (l *localParts) peekHeld(i int, c *partCall, key string, cost int, rates []partRate) bool {
	p := l.parts[i].c
	limit, _ := l.inFlightOf(i, rates)
	c.now = p.keys.advance(c.csh, c.reading, p.maxNow)
	c.held, c.where = c.csh.lookup(key)
	if c.where == absent {
		c.held = new(heldUnits)
	}
	c.held.sweep(c.now)
	return cost == 0 || c.held.units+int64(cost) <= limit
}

// hold takes cost units for key on part i, a Concurrency read by peekHeld,
// when the call is allowed, for the part's TTL, and returns the Lease
// that holds them when leased (one that holds nothing otherwise) and the
// part's Result, as the Concurrency's own Acquire would: a part that
// would have allowed a denied call reports its state untouched, with
// RetryAfter 0. c's shard is locked; the key is written back whenever it
// was there, as its sweep may have changed it.
func (l *localParts) hold(i int, c *partCall, key string, cost int, rates []partRate, allowed, leased bool) (Lease, Result) {
	p := l.parts[i].c
	limit, ttl := l.inFlightOf(i, rates)
	n := int64(cost)
	take := allowed && n > 0
	var lease Lease
	if take {
		// An id names its shard, as Concurrency's own do.
		c.csh.seq++
		id := c.csh.seq*shardCount + uint64(c.cidx)
		c.held.take(heldLease{id: id, units: n, expiry: c.now + ttl})
		if leased {
			lease = Lease{holder: p, key: key, id: id, units: cost, ttl: time.Duration(ttl)}
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
			_, c.where = c.csh.lookup(key)
		}
		if c.where == absent {
			c.csh.write(key, c.where, c.held, c.held.latest)
		} else {
			keep(c.csh, key, c.where, c.held, c.now)
		}
	}
	return lease, res
}

// heldState returns the Result of a Refund or Settle on part i, a
// Concurrency, for key: allowed, and the key's state untouched, as its
// units in flight come back by their leases alone. c's shard is locked.
func (l *localParts) heldState(i int, c *partCall, key string, rates []partRate) Result {
	l.peekHeld(i, c, key, 0, rates)
	limit, _ := l.inFlightOf(i, rates)
	if c.where != absent {
		keep(c.csh, key, c.where, c.held, c.now)
	}
	res := Result{Allowed: true, Limit: int(limit), Remaining: int(c.held.free(limit))}
	if c.held.units > 0 {
		res.ResetAfter = time.Duration(c.held.latest - c.now + lagBehind(c.now, c.reading))
	}
	return res
}
