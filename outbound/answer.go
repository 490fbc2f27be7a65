package outbound

import (
	"net/http"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Answer is one answer of an upstream, as the parsers read it.
type Answer struct {
	// Status is the HTTP status code: 429 for a call the upstream refused
	// for its limit. A gRPC call's is its code's (see package grpclimit):
	// 429 for ResourceExhausted, 503 for Unavailable, 200 for OK.
	Status int
	// Header holds the answer's fields, keyed in canonical form (as
	// http.Header keeps them): a gRPC call's header and trailer metadata.
	Header http.Header
	// Now is when the answer was read, on the Upstream's clock; the zero
	// time is read as the Upstream's now by Observe. A time a field
	// states (an HTTP-date, a Unix time) is read against the answer's
	// Date field when it has a valid one, and against Now otherwise.
	Now time.Time
}

// Lesson is what one answer tells of the upstream's limits.
type Lesson struct {
	// Limited reports that the upstream refused the call for its limit:
	// a 429, or a 503 with a Retry-After.
	Limited bool
	// Pause is how long the upstream asks that no call be made, from the
	// answer; 0 when it asks for no pause.
	Pause time.Duration
	// Policy is the limit the upstream states, Limit calls per Window:
	// with several, the one that allows no more than any of them (the
	// smallest Limit at the slowest rate); the zero Policy when it
	// states none.
	Policy ratelimit.Policy
}

// merge returns what l and m tell together: limited if either says so,
// the longer pause (never below 0), and the policy that allows no more
// than either. So fields that contradict each other are read the
// cautious way.
func (l Lesson) merge(m Lesson) Lesson {
	return Lesson{
		Limited: l.Limited || m.Limited,
		Pause:   max(l.Pause, m.Pause, 0),
		Policy:  tighter(l.Policy, m.Policy),
	}
}

// Parser reads what an answer tells of the upstream's limits. It must be
// safe for concurrent use, must not modify the Answer, and must not
// panic: an upstream sends what it likes. A field it cannot read tells
// nothing. An Upstream merges the Lessons of its parsers (see Config).
type Parser func(a Answer) Lesson

// DefaultParsers returns the parsers an Upstream of calls uses when its
// Config names none: IETFFields, RetryAfter and VendorFields, in that
// order. One of another Config.Unit uses IETFFieldsIn(Unit) in place of
// IETFFields.
func DefaultParsers() []Parser {
	return []Parser{IETFFields, RetryAfter, VendorFields}
}

// dateOf returns the time absolute times in a's fields are read against:
// its Date field's, or a.Now.
func dateOf(a Answer) time.Time {
	if v := a.Header["Date"]; len(v) > 0 {
		if t, err := http.ParseTime(v[0]); err == nil {
			return t
		}
	}
	return a.Now
}
