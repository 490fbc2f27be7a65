package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// This file holds what a Composite does with a part that limits units in
// flight (a Concurrency, or a RedisConcurrency among Redis parts): its
// Acquire (the in-process engine's share of such a part is its kind's
// heldPart; redisParts decides the Redis one as one check of its request).

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
