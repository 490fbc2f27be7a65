// Package leaseholdtest provides fakes for the tests of code that holds
// leases with package leasehold: timers that the test fires when it
// chooses, and a ratelimit.Hooks that passes on the Release and Extend
// events it hears.
package leaseholdtest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/leasehold"
)

// Timers stands for leasehold.AfterFunc: After starts a Timer that fires
// only when the test calls its Fire. The zero Timers is ready for use; it
// is safe for concurrent use.
type Timers struct {
	mu     sync.Mutex
	timers []*Timer
}

// After starts a Timer set for d that calls f when fired.
func (ts *Timers) After(d time.Duration, f func()) leasehold.Timer {
	t := &Timer{f: f, d: d, armed: true}
	ts.mu.Lock()
	ts.timers = append(ts.timers, t)
	ts.mu.Unlock()
	return t
}

// Last returns the Timer started last; there must be n in all.
func (ts *Timers) Last(tb testing.TB, n int) *Timer {
	tb.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	require.Len(tb, ts.timers, n)
	return ts.timers[n-1]
}

// Timer is one timer of Timers. It is safe for concurrent use.
type Timer struct {
	mu      sync.Mutex
	f       func()
	d       time.Duration // as last set
	armed   bool
	stopped bool
}

// Stop unsets the timer and reports whether it was set.
func (t *Timer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.armed
	t.armed, t.stopped = false, true
	return was
}

// Reset sets the timer for d and reports whether it was set.
func (t *Timer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.armed
	t.armed, t.d = true, d
	return was
}

// State returns whether the timer is set and for how long it was last
// set, and whether it was ever stopped.
func (t *Timer) State() (armed bool, d time.Duration, stopped bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.armed, t.d, t.stopped
}

// Fire runs the timer's function, as its expiry would, if it is set, and
// unsets it first; a timer that is not set does nothing.
func (t *Timer) Fire() {
	t.mu.Lock()
	if !t.armed {
		t.mu.Unlock()
		return
	}
	t.armed = false
	f := t.f
	t.mu.Unlock()
	f()
}

// Reports is a leasehold.Reporter that keeps the errors reported to it.
// The zero Reports is ready for use; it is safe for concurrent use.
type Reports struct {
	mu   sync.Mutex
	errs []error
}

// ReportLease keeps err.
func (r *Reports) ReportLease(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// All returns the errors reported so far, oldest first.
func (r *Reports) All() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}
