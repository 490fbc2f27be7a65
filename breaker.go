package ratelimit

import (
	"fmt"
	"time"
)

// Breaker is a circuit breaker that several Guards share, so that the
// Guards in front of one backend (the limiters of one Redis client) notice
// an outage once: the failures of all of them count toward one run, and
// once it opens, every one of them answers by its failure policy at once,
// without paying a timeout of its own, until a probe by any of them after
// the cool-down succeeds. Its changes are reported once, to its own Hooks,
// and never to the Guards' Hooks, which hear only of their decisions; the
// Guard whose call opens it logs the opening, once per outage, and each
// Guard logs its own outage (see GuardConfig.Logger).
// Give it to each Guard through GuardConfig.Breaker; Guards that share a
// Breaker should share a Clock, since each times the cool-down by its own.
//
// In front of a Redis Cluster or Ring client, a Breaker is one breaker per
// node, as a Guard's own is (see GuardConfig.BreakerFailures): the Guards'
// failures on one node's keys open that node's breaker alone.
//
// A Breaker is safe for concurrent use. Create one with NewBreaker; the
// zero value is refused by NewGuard.
type Breaker struct {
	b     breakers
	hooks Hooks // nil when nothing listens
}

// BreakerConfig configures a Breaker.
type BreakerConfig struct {
	// Failures is how many consecutive backend failures, counted across
	// every Guard that shares the Breaker, open it; it must be > 0.
	Failures int
	// CoolDown is how long it stays open before it lets one probe call
	// through; it must be > 0.
	CoolDown time.Duration
	// Hooks receives the Breaker's changes (BreakerChanged), each once,
	// those of each node's breaker on a cluster or ring; nil means none.
	// The Hooks of the Guards that share the Breaker hear none of them.
	Hooks Hooks
}

// NewBreaker returns a closed Breaker. It returns an error wrapping
// ErrInvalidConfig for Failures or CoolDown that is not > 0.
func NewBreaker(cfg BreakerConfig) (*Breaker, error) {
	switch {
	case cfg.Failures <= 0:
		return nil, fmt.Errorf("%w: NewBreaker: Failures %d must be > 0", ErrInvalidConfig, cfg.Failures)
	case cfg.CoolDown <= 0:
		return nil, fmt.Errorf("%w: NewBreaker: CoolDown %v must be > 0", ErrInvalidConfig, cfg.CoolDown)
	}
	b := &Breaker{hooks: activeHooks(cfg.Hooks)}
	b.b.init(cfg.Failures, cfg.CoolDown)
	return b, nil
}

// State returns the Breaker's state now: on a cluster or ring, that of its
// most open node (open, then half-open, then closed); BreakerClosed for a
// nil or zero Breaker.
func (b *Breaker) State() BreakerState {
	if b == nil {
		return BreakerClosed
	}
	return b.b.state()
}
