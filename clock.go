package ratelimit

import (
	"sync"
	"time"
)

// Clock tells the in-process limiters the current time.
//
// Implementations must be safe for concurrent use. The limiters only ever
// measure differences between readings, so a Clock's values need not relate
// to any calendar.
type Clock interface {
	Now() time.Time
}

// systemClock reads time.Now. Its readings carry Go's monotonic clock, so the
// differences the limiters take are immune to wall-clock jumps.
type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// clockBase reads a Clock as nanoseconds since the reading it was made with,
// the time base of the in-process engines. It is immutable and as safe for
// concurrent use as its Clock.
type clockBase struct {
	clock  Clock
	start  time.Time // the reading that is time 0
	system bool      // clock is systemClock
}

// newClockBase returns a clockBase whose time 0 is clock's current reading.
func newClockBase(clock Clock) clockBase {
	_, system := clock.(systemClock)
	return clockBase{clock: clock, start: clock.Now(), system: system}
}

// elapsed returns the nanoseconds from e's start to the clock's reading now.
// On the system clock it reads only the monotonic clock (time.Since), one
// clock read where time.Now takes two (wall and monotonic): about 25 ns less
// per call on the reference VM.
func (e *clockBase) elapsed() int64 {
	if e.system {
		return int64(time.Since(e.start))
	}
	return int64(e.clock.Now().Sub(e.start))
}

// FakeClock is a Clock that only moves when told to, for tests.
//
// Its methods are safe for concurrent use. The zero value is not usable; create
// one with NewFakeClock.
type FakeClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewFakeClock returns a FakeClock that reads start until it is advanced or
// set. Any monotonic clock reading in start is dropped.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start.Round(0)}
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d; a negative d moves it backwards.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t, forwards or backwards. Any monotonic clock reading
// in t is dropped.
func (c *FakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.Round(0)
}
