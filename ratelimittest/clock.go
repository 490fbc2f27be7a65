package ratelimittest

import (
	"sync"
	"time"
)

// Clock is a clock that only moves when told to, for tests. It implements
// ratelimit.Clock: give it to a limiter with ratelimit.WithClock (or
// ratelimit.WithCallerClock, and as a decorator's Clock) and move it with
// Advance or Set.
//
// Its methods are safe for concurrent use. The zero value is not usable;
// create one with NewClock.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock that reads start until it is advanced or set. Any
// monotonic clock reading in start is dropped.
func NewClock(start time.Time) *Clock {
	return &Clock{now: start.Round(0)}
}

// Now returns the clock's current time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d; a negative d moves it backwards.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Set moves the clock to t, forwards or backwards. Any monotonic clock reading
// in t is dropped.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t.Round(0)
}
