package ratelimit

import "time"

// NextUnit returns how long policy i of d (Policies[i]) holds its key to
// the units it has left, its Result's Remaining, and true: the time until
// one unit more than that can have been taken, whatever the calls made
// meanwhile; where that is not known exactly, a shorter time, never a
// longer one (which would hold the client to Remaining longer than the
// limiter does). That is:
//
//   - for a token bucket or GCRA, the time until its next unit has come
//     back (a key in debt waits out its debt first); with every unit left,
//     the time one unit takes to come back, as a unit taken now is back
//     only then;
//   - for a fixed or calendar window, the time until the window ends (a
//     count in debt stays until then); for an empty fixed window, its
//     length, as the next unit taken opens a window that long; for an
//     empty calendar window, the time until the window open now ends;
//   - for a sliding log, the time until the oldest entry still in the
//     window leaves it (in debt, until the oldest entries that hold the
//     units beyond the limit have left, and one more); with every unit
//     left, its window, for which a unit taken now counts;
//   - for a sliding counter, the earliest time a client can have taken one
//     unit more: within the window open now, where units taken count in
//     full, once the previous window's weighted share has fallen by one;
//     past the window's roll, where the units counted now and the units
//     left, taken at once before it, count as the previous window and
//     weigh less as the window slides, once they weigh less than the
//     limit; whichever comes first (sooner than the estimate's fall with
//     no unit taken would tell). With every unit left, its window, less
//     than the truth (by about one unit's share of the window).
//
// The sliding kinds' times are exact in their clock's unit (ns in process,
// whole µs on Redis, on the time the script decides on): no schedule of
// calls takes one unit more before it, and one can at it. httplimit and
// grpclimit round them up to whole seconds, as every kind's.
//
// A Prefetch's answer from a block tells the time until the block's window
// ends, or, for a token bucket or GCRA, one unit's time: its key's next
// unit is never further away while the key is not in debt. A Guard's
// answer from its fallback tells the fallback's, for each policy whose
// Result it shows (but one shown with less left than the fallback has). A
// DenyCache's remembered denial tells its backend's, aged.
//
// The policy's Result is d's own for a limiter of one policy, and
// Parts[i] for a Composite. NextUnit returns 0 and false when d does not
// tell it: for a policy of units in flight (a release may free units at
// any moment); a sliding window's in a DenyCache's remembered denial once
// it has passed (one unit more than d shows may be there since); a
// Decision of a Limiter of another package, or one a Guard made without
// its backend or fallback, which tells its policies but not how their
// state moves; and an i that names no policy of d whose Result d holds.
//
// The IETF draft of rate-limit header fields calls this the effective
// window of a policy's service limit (draft-ietf-httpapi-ratelimit-headers-11,
// section 4.1.2: the time within which the client can use no more than
// the available quota): httplimit and grpclimit send it, rounded up to
// whole seconds, as the t of each policy's RateLimit item. It reads d
// only, and is safe for concurrent use with other readers of d.
func (d *Decision) NextUnit(i int) (time.Duration, bool) {
	if i < 0 || i >= len(d.Policies) {
		return 0, false
	}
	if d.nextSet && i == d.PolicyIndex {
		return d.next, true
	}
	var res Result
	switch {
	case d.Parts != nil && i < len(d.Parts):
		if i < len(d.partNext) && d.partNext[i] > 0 {
			return d.partNext[i], true
		}
		res = d.Parts[i]
	case d.Parts == nil && i == d.PolicyIndex:
		res = d.Result
	default:
		return 0, false
	}
	if len(d.rules) != len(d.Policies) || res.Limit <= 0 {
		return 0, false
	}
	return nextUnit(d.rules[i], res, d.Policies[i].Window)
}

// nextUnit is NextUnit for a policy whose state moves by rl, whose Result
// is res (of a Limit > 0), and whose window (or time from empty to full)
// is window.
func nextUnit(rl rule, res Result, window time.Duration) (time.Duration, bool) {
	full := res.Remaining >= res.Limit
	switch {
	case rl.inFlight:
		return 0, false
	case rl.gradual:
		// With units taken, the oldest leaves at a time the Result does
		// not tell: only the limiter tells it (next, partNext).
		if !full || window <= 0 {
			return 0, false
		}
		return window, true
	case rl.unit > 0:
		// Remaining is Limit − ⌈ResetAfter / unit⌉, so one more unit is
		// there once ResetAfter has fallen to (Limit − Remaining − 1) ×
		// unit.
		if full {
			return time.Duration(rl.unit), true
		}
		owed := int64(res.Limit - max(res.Remaining, 0) - 1)
		reset := int64(res.ResetAfter)
		if owed > reset/rl.unit || reset == owed*rl.unit {
			return 0, false // a Result whose numbers disagree
		}
		return time.Duration(reset - owed*rl.unit), true
	case res.ResetAfter > 0:
		return res.ResetAfter, true
	case rl.calendar:
		return 0, false
	}
	if window <= 0 {
		return 0, false
	}
	return window, true
}

// withNext returns d, a Decision of one policy, with the wait until its
// next unit as its limiter tells it, next, when next > 0 (see
// Decision.next); d as it is otherwise.
func withNext(d Decision, next time.Duration) Decision {
	if next > 0 {
		d.next, d.nextSet = next, true
	}
	return d
}

// ageNext makes the next units d's limiters told (next, partNext) those
// of elapsed later, were nothing else done: each less elapsed, and no
// longer told once it has passed. The units a key takes meanwhile never
// bring its next unit sooner, so each stays true for the Remaining d
// shows. partNext is replaced, not changed, as it may be shared.
func (d *Decision) ageNext(elapsed time.Duration) {
	if d.nextSet {
		d.next -= elapsed
		d.nextSet = d.next > 0
		d.next = max(d.next, 0)
	}
	if d.partNext != nil {
		aged := make([]time.Duration, len(d.partNext))
		for i, next := range d.partNext {
			aged[i] = max(next-elapsed, 0)
		}
		d.partNext = aged
	}
}
