package ratelimit

// DefaultMaxDebt is the most debt, in limits, that a Settle may leave on a
// key of a limiter built without WithMaxDebt: one full limit.
//
// One limit, because it is the most a single call may ask for (Allow's n is
// at most the limit): a Settle on a key not already in debt is charged in
// full whenever its cost is at most the limit, so honest overruns of an
// estimate are paid for. What that debt costs in time depends on the kind
// (see WithMaxDebt): a token bucket or GCRA key of 100 a minute settled
// far beyond its limit is full again within two minutes and allows its
// next unit within one minute and one unit's time, but a window's count,
// debt or not, stays until the window ends, so a calendar month's quota
// used up by a Settle stays used up until the month ends, whatever the
// bound. WithMaxSettle, which refuses one Settle of more than ten limits
// by default, is what keeps a bogus usage report (a cost of 10^9, a unit
// mix-up) from spending a window's quota at all. WithMaxDebt(0) forgives
// every overrun beyond what the key had left, and UnboundedDebt charges
// every one whatever it costs.
const DefaultMaxDebt = 1

// UnboundedDebt, given to WithMaxDebt, lets a Settle drive a key as far
// into debt as its cost says, within the bounds every store keeps anyway:
// a token bucket or GCRA key at most about 73 years from full in process
// (2^52 µs, about 142 years, on Redis), a fixed window's count at most
// 2^52 (or the limit, if higher).
const UnboundedDebt = -1

// debtCap is a limiter's bound on debt: the most a Settle may leave a key
// owing beyond empty, in multiples of the key's limit; below 0, unbounded.
type debtCap int64

// units returns the most debt, in units, of a key whose limit is limit
// (>= 1): the cap times limit, at most 2^52 (maxSettleCost), which it is
// when unbounded.
func (c debtCap) units(limit int64) int64 {
	if c < 0 || c > 0 && limit > maxSettleCost/int64(c) {
		return maxSettleCost
	}
	return min(int64(c)*limit, maxSettleCost)
}

// span returns the most time, in the clock's unit, a token bucket or GCRA
// key may be from full after a Settle, for a key whose time from empty to
// full is tau (1 <= tau <= maxSpan): (1 + c)·tau, at most maxSpan, which
// it is when unbounded.
func (c debtCap) span(tau int64) int64 {
	if c < 0 || int64(c) >= maxSpan/tau {
		// Then 1+c > maxSpan/tau, so (1+c)·tau > maxSpan.
		return maxSpan
	}
	return (1 + int64(c)) * tau
}

// count returns the most a fixed window of limit (>= 1) may count after a
// Settle: limit plus the cap's units, at most 2^52, or the limit when it
// is higher.
func (c debtCap) count(limit int64) int64 {
	if limit >= maxSettleCost {
		return limit
	}
	// Both below or at 2^52: the sum cannot overflow.
	return min(limit+c.units(limit), maxSettleCost)
}
