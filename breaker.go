package ratelimit

import (
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
