package ratelimit

import (
	"math/bits"
	"time"
)

// counterRate is the arithmetic of a sliding-window counter's decisions
// for one policy, in the clock's unit (ns in process).
type counterRate struct {
	limit  int64
	window int64 // W, ns
}

// counterState is a key's sliding-window counter: its window open (or last
// opened) at start, the units counted in it (cur) and in the window before
// it (prev), and its expiry: start + 2W at the W in force at its last
// counted request, from which it holds nothing. The zero counterState is
// an absent key.
type counterState struct {
	start  int64
	expiry int64
	prev   int64
	cur    int64
}

// empty reports whether the state holds nothing.
func (st counterState) empty() bool { return st.prev == 0 && st.cur == 0 }

// counterExpiry is the expiry of a key's state.
func counterExpiry(st counterState) int64 { return st.expiry }

// at returns st as it stands at now (>= st.start for a stored state): with
// the window open at now starting at start (now < start + W), its cur
// having become prev if that window has moved on; the zero counterState
// when it holds nothing any more.
func (r counterRate) at(st counterState, now int64) counterState {
	if st.empty() || now >= st.expiry {
		return counterState{}
	}
	e := now - st.start
	if e < r.window {
		return st
	}
	if e < 2*r.window && st.cur > 0 {
		return counterState{start: st.start + r.window, expiry: st.expiry, prev: st.cur}
	}
	return counterState{}
}

// weighted returns the previous window's share of the estimate at now,
// ⌈prev × (W − e) / W⌉ with e = now − start, for st as at returns it.
func (r counterRate) weighted(st counterState, now int64) int64 {
	if st.prev == 0 {
		return 0
	}
	x := r.window - max(now-st.start, 0)
	hi, lo := bits.Mul64(uint64(st.prev), uint64(x))
	w := uint64(r.window)
	var q, rem uint64
	if hi == 0 {
		q, rem = lo/w, lo%w // one 64-bit division, cheaper than 128-bit
	} else {
		q, rem = bits.Div64(hi, lo, w) // q <= prev, as x <= W
	}
	if rem != 0 {
		q++
	}
	return int64(q)
}

// left returns max(0, limit − estimate) at now for st as at returns it,
// without overflow.
func (r counterRate) left(st counterState, now int64) int64 {
	rem := r.limit - st.cur
	if rem <= 0 {
		return 0
	}
	return max(rem-r.weighted(st, now), 0)
}

// take decides n at now for a key whose stored state is st (the zero
// counterState when absent), without writing: it returns the state at now,
// the state after counting n, the units left at now before n
// (max(0, limit − estimate)), and whether n is allowed. A peek is always
// allowed, even in debt.
func (r counterRate) take(st counterState, now int64, n int) (cur, next counterState, left int64, allowed bool) {
	cur = r.at(st, now)
	left = r.left(cur, now)
	allowed = int64(n) <= left
	next = cur
	if allowed && n > 0 {
		if cur.empty() {
			next.start = now
		}
		next.expiry = next.start + 2*r.window
		next.cur += int64(n)
	}
	return cur, next, left, allowed
}

// result describes a key whose state at now is st, read from a clock lag
// behind now.
func (r counterRate) result(allowed bool, st counterState, now, lag int64) Result {
	return r.resultLeft(allowed, st, r.left(st, now), now, lag)
}

// resultLeft is result for a state with left units left at now.
func (r counterRate) resultLeft(allowed bool, st counterState, left, now, lag int64) Result {
	res := Result{Allowed: allowed, Limit: int(r.limit), Remaining: int(left)}
	if reset := r.resetAt(st); reset > now {
		res.ResetAfter = time.Duration(reset - now + lag)
	}
	return res
}

// resetAt returns when st's estimate is 0: start + 2W when cur > 0,
// start + W when only prev is, but no later than its expiry; 0 for an
// empty state.
func (r counterRate) resetAt(st counterState) int64 {
	switch {
	case st.cur > 0:
		return min(st.start+2*r.window, st.expiry)
	case st.prev > 0:
		return min(st.start+r.window, st.expiry)
	}
	return 0
}

// denial is the Result of a take that denied n (1 <= n <= limit) on st, the
// state at now, read from a clock lag behind now: its RetryAfter is the
// least wait after which n is allowed, were no other call made.
func (r counterRate) denial(st counterState, left, now, n, lag int64) Result {
	res := r.resultLeft(false, st, left, now, lag)
	res.RetryAfter = time.Duration(r.allowedAt(st, n) - now + lag)
	return res
}

// allowedAt returns the earliest time at which n (1 <= n <= limit) is
// allowed on st, a state denying it at now, were no other call made. In
// the window open now, ⌈prev × (W − e) / W⌉ <= rest iff e >= W − ⌊rest ×
// W / prev⌋ with rest = limit − cur − n; in the next one, cur is prev; from
// start + 2W (or the expiry) the key holds nothing.
func (r counterRate) allowedAt(st counterState, n int64) int64 {
	w := r.window
	if rest := r.limit - st.cur - n; rest >= 0 && rest < st.prev {
		if x := mulDivFloor(w, rest, st.prev); x >= 1 {
			return min(st.start+w-x, st.expiry)
		}
	}
	at := st.start + 2*w
	if rest := r.limit - n; st.cur <= rest {
		at = st.start + w
	} else if x := mulDivFloor(w, rest, st.cur); x >= 1 {
		at = st.start + 2*w - x
	}
	return min(at, st.expiry)
}

// nextUnitAt returns the earliest time at which one unit more than left
// can have been taken on st, the state at now (holding units), left
// (below the limit) being its units left at now, whatever the calls made
// from now on. Within the window open now, units taken count in full: one
// more fits once ⌈prev × (W − e) / W⌉ <= rest with rest = limit − cur −
// left − 1, that is e >= W − ⌊rest × W / prev⌋, as allowedAt finds. Past
// the roll, the units counted now and the left taken before it are the
// previous window's, held = cur + left, and one more fits in the next
// window once ⌈held × (W − e) / W⌉ <= limit − 1: at its start when held <
// limit, else at e = W − ⌊(limit − 1) × W / held⌋. Taking the units left
// before the roll never delays that (each weighs at most one), so no
// schedule does better; by start + 2W every unit counted now has gone.
func (r counterRate) nextUnitAt(st counterState, left int64) int64 {
	w := r.window
	if rest := r.limit - st.cur - left - 1; rest >= 0 && rest < st.prev {
		if x := mulDivFloor(w, rest, st.prev); x >= 1 {
			return st.start + w - x
		}
	}
	held := st.cur + left
	if held < r.limit {
		return st.start + w
	}
	return st.start + 2*w - mulDivFloor(w, r.limit-1, held)
}

// nextUnit returns the wait, from now read from a clock lag behind it,
// until one unit more than left can have been taken on st (see
// nextUnitAt).
func (r counterRate) nextUnit(st counterState, left, now, lag int64) time.Duration {
	return time.Duration(r.nextUnitAt(st, left) - now + lag)
}

// mulDivFloor returns ⌊a × b / d⌋ for 0 <= b < d, a >= 0: below a.
func mulDivFloor(a, b, d int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(d))
	return int64(q)
}
