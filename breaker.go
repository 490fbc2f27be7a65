package ratelimit

import (
	"fmt"
	"sync"
	"time"
)

// BreakerState is the state of a Guard's circuit breaker.
type BreakerState int

const (
	// BreakerClosed: calls go to the backend.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the backend failed too often; calls are answered by
	// the failure policy without touching it until the cool-down ends.
	BreakerOpen
	// BreakerHalfOpen: the cool-down has ended and one probe call is on
	// its way to the backend; others are answered by the policy.
	BreakerHalfOpen
)

// String returns the state's name in lower case.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half_open"
	}
	return "unknown"
}

// Breaker is a circuit breaker that several Guards share, so that the
// Guards in front of one backend (the limiters of one Redis client) notice
// an outage once: the failures of all of them count toward one run, and
// once it opens, every one of them answers by its failure policy at once,
// without paying a timeout of its own, until a probe by any of them after
// the cool-down succeeds. Its changes are reported once, to its own Hooks.
// Give it to each Guard through GuardConfig.Breaker; Guards that share a
// Breaker should share a Clock, since each times the cool-down by its own.
//
// A Breaker is safe for concurrent use. Create one with NewBreaker; the
// zero value is refused by NewGuard.
type Breaker struct {
	b     breaker
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
	// Hooks receives the Breaker's changes (BreakerChanged), each once;
	// nil means none.
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
	return &Breaker{b: breaker{threshold: cfg.Failures, coolDown: cfg.CoolDown}, hooks: activeHooks(cfg.Hooks)}, nil
}

// State returns the Breaker's state now; BreakerClosed for a nil or zero
// Breaker.
func (b *Breaker) State() BreakerState {
	if b == nil {
		return BreakerClosed
	}
	return b.b.current()
}

// breaker opens after a run of consecutive backend failures, stays open for
// a cool-down, then lets one probe through and closes when it succeeds. It
// is safe for concurrent use. A breaker with threshold 0 never opens.
type breaker struct {
	threshold int           // consecutive failures that open it
	coolDown  time.Duration // how long it stays open before a probe

	mu       sync.Mutex
	state    BreakerState
	failures int       // consecutive, while closed
	openedAt time.Time // when it last opened
}

// current returns the breaker's state.
func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

// transition is a change of a breaker's state; from == to means none.
type transition struct{ from, to BreakerState }

// admit reports whether a call may go to the backend at now, and if not, how
// long until a probe may. When the cool-down has ended it admits exactly one
// probe, moving to half-open.
func (b *breaker) admit(now time.Time) (ok bool, wait time.Duration, change transition) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true, 0, transition{}
	case BreakerOpen:
		if left := b.coolDown - now.Sub(b.openedAt); left > 0 {
			return false, left, transition{}
		}
		b.state = BreakerHalfOpen
		return true, 0, transition{BreakerOpen, BreakerHalfOpen}
	default: // half-open: the probe is out
		return false, b.coolDown, transition{}
	}
}

// record notes the outcome of an admitted call and returns the change it
// caused. A probe that ended without a verdict on the backend (its caller
// gave up) reopens the breaker so that the next call probes at once.
func (b *breaker) record(outcome callOutcome, now time.Time) transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.state
	switch outcome {
	case backendOK:
		b.failures = 0
		b.state = BreakerClosed
	case backendFailed:
		b.failures++
		if b.state == BreakerHalfOpen || (b.threshold > 0 && b.failures >= b.threshold) {
			b.state = BreakerOpen
			b.openedAt = now
		}
	case noVerdict:
		if b.state == BreakerHalfOpen {
			b.state = BreakerOpen
			b.openedAt = now.Add(-b.coolDown)
		}
	}
	return transition{from, b.state}
}

// callOutcome is what an admitted call tells the breaker about the backend.
type callOutcome int

const (
	backendOK callOutcome = iota
	backendFailed
	noVerdict
)
