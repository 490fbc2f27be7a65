package ratelimit

import "time"

// A Composite's calendar parts report, as a CalendarWindow or a
// RedisCalendarWindow alone does, the length of the window open now as
// their policy's Window (23 or 25 hours on a day across a daylight-saving
// change), so that the HTTP and gRPC fields' w is true for them too.

// windowNowOf returns nows, with, when l is a calendar window, the length
// of its window open now as part i of n parts (nows made when nil).
func windowNowOf(nows []func(Policy) time.Duration, i, n int, l Limiter) []func(Policy) time.Duration {
	var now func(Policy) time.Duration
	switch v := l.(type) {
	case *CalendarWindow:
		if v != nil && v.windows != nil {
			now = func(p Policy) time.Duration {
				return v.span(periodOfNominal(p.Window), v.zoneOf(p), max(v.base.elapsed(), 0)).length()
			}
		}
	case *RedisCalendarWindow:
		if v.built() {
			now = func(p Policy) time.Duration {
				sp := v.span(periodOfNominal(p.Window), v.zoneOf(p, nil))
				return time.Duration(sp.end - sp.start)
			}
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

// windowsOpenNow returns policies, the parts' policies of a call, with
// each calendar part's Window the length of its window open now, on its
// limiter's clock (a RedisCalendarWindow's client clock): a copy, when a
// Composite has calendar parts. A part's policy names its period by its
// nominal length.
func (c *Composite) windowsOpenNow(policies []NamedPolicy) []NamedPolicy {
	if c.windowsNow == nil {
		return policies
	}
	out := append([]NamedPolicy(nil), policies...)
	for i, now := range c.windowsNow {
		if now != nil && periodOfNominal(out[i].Window) != 0 {
			out[i].Window = now(out[i].Policy)
		}
	}
	return out
}
