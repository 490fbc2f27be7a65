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
	// its way to the backend; others are answered by the policy. The
	// probe's answer alone closes the breaker or opens it again: a call
	// sent before the breaker opened changes nothing when it returns.
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
//
// Only the calls it admitted since its latest change of state count: each
// change starts a new epoch, and an answer of a call admitted in an earlier
// one (sent while it was closed, returning after it opened) changes
// nothing. So it closes only on the probe's success, the one call it
// admits in its half-open epoch, never by itself.
type breaker struct {
	threshold int           // consecutive failures that open it
	coolDown  time.Duration // how long it stays open before a probe

	mu       sync.Mutex
	state    BreakerState
	epoch    uint64    // bumped by each change of state
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

// ticket is what an admitted call shows the breaker with its outcome: the
// epoch it was admitted in.
type ticket struct{ epoch uint64 }

// admit reports whether a call may go to the backend at now, and if not, how
// long until a probe may. When the cool-down has ended it admits exactly one
// probe, moving to half-open. The ticket goes back with the call's outcome
// (see record).
func (b *breaker) admit(now time.Time) (ok bool, wait time.Duration, change transition, t ticket) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case BreakerClosed:
		return true, 0, transition{}, ticket{b.epoch}
	case BreakerOpen:
		if left := b.coolDown - now.Sub(b.openedAt); left > 0 {
			return false, left, transition{}, ticket{}
		}
		b.moveTo(BreakerHalfOpen)
		return true, 0, transition{BreakerOpen, BreakerHalfOpen}, ticket{b.epoch}
	default: // half-open: the probe is out
		return false, b.coolDown, transition{}, ticket{}
	}
}

// moveTo changes the state to s and starts a new epoch. The caller holds
// mu.
func (b *breaker) moveTo(s BreakerState) {
	b.state = s
	b.epoch++
}

// record notes the outcome of a call admitted with t and returns the change
// it caused: none for a call admitted before the latest change. A probe
// that ended without a verdict on the backend (its caller gave up) reopens
// the breaker so that the next call probes at once.
func (b *breaker) record(outcome callOutcome, t ticket, now time.Time) transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	from := b.state
	if t.epoch != b.epoch {
		return transition{from, from}
	}
	switch outcome {
	case backendOK:
		b.failures = 0
		if b.state == BreakerHalfOpen {
			b.moveTo(BreakerClosed)
		}
	case backendFailed:
		b.failures++
		if b.state == BreakerHalfOpen || (b.threshold > 0 && b.failures >= b.threshold) {
			b.moveTo(BreakerOpen)
			b.failures = 0
			b.openedAt = now
		}
	case noVerdict:
		if b.state == BreakerHalfOpen {
			b.moveTo(BreakerOpen)
			b.openedAt = now.Add(-b.coolDown)
		}
	}
	return transition{from, b.state}
}

// idle reports whether b is closed with no failure counted.
func (b *breaker) idle() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == BreakerClosed && b.failures == 0
}

// callOutcome is what an admitted call tells the breaker about the backend.
type callOutcome int

const (
	backendOK callOutcome = iota
	backendFailed
	noVerdict
)
