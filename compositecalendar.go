package ratelimit

import "time"

// A Composite's calendar parts report, as a CalendarWindow or a
// RedisCalendarWindow alone does, the length of the window open now as
// their policy's Window (23 or 25 hours on a day across a daylight-saving
// change), so that the HTTP and gRPC fields' w is true for them too.

// windowTeller is a limiter whose policy's Window is not the length of its
// window open now: a calendar window, in process or on Redis.
type windowTeller interface {
	// windowNow returns the length of the window open now of a policy of
	// the limiter; nil unless the limiter was built by its constructor.
	windowNow() func(Policy) time.Duration
}

// windowNowOf returns nows, with, when l is a calendar window, the length
// of its window open now as part i of n parts (nows made when nil).
func windowNowOf(nows []func(Policy) time.Duration, i, n int, l Limiter) []func(Policy) time.Duration {
	var now func(Policy) time.Duration
	if e, ok := engineOf(l); ok {
		if w, ok := e.(windowTeller); ok {
			now = w.windowNow()
		}
	}
	if now == nil {
		return nows
	}
	if nows == nil {
		nows = make([]func(Policy) time.Duration, n)
	}
	nows[i] = now
	return nows
}
