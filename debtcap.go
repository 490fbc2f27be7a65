package ratelimit

import "fmt"

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

// WithMaxDebt bounds how far a Settle may drive a key into debt: after a
// Settle, a key owes at most limits times its limit beyond empty (its
// policy's limit: the key's own, for a limiter built WithPolicyFunc). 0
// means a Settle never takes a key below empty, and UnboundedDebt keeps no
// bound but the store's own; without the option, the bound is
// DefaultMaxDebt (1).
//
// What the bound means in time, for a key of limit L and Window W left
// alone after the Settle (d = limits):
//   - TokenBucket, GCRA (in process and on Redis): a debt of D units is
//     paid at the rate, D × W/L: the key allows its next unit within
//     (d × L + 1) × W/L and is full within (1 + d) × W (two Windows by
//     default).
//   - FixedWindow: the window counts at most (1 + d) × L, and its count,
//     debt included, ends with the window: at most W after the Settle,
//     whatever d.
//   - CalendarWindow: as a fixed window, until the calendar window open
//     now ends: up to a minute, an hour, a day, a week or a month,
//     whatever d (a monthly quota spent by a Settle on the 3rd stays spent
//     until the month ends; see WithMaxSettle).
//   - SlidingLog: the units in the window are at most (1 + d) × L; a
//     Settle's units are an entry of the log at the time of the Settle,
//     which leaves it W later, so the key is full at most W after it.
//   - SlidingCounter: the window open now counts at most (1 + d) × L; that
//     count weighs on the next window too, a falling share of it, so the
//     key is full at most 2 × W after the window it was counted in began.
//   - Composite: each part by its own kind and its own limiter's bound; a
//     call waits until every part allows it, so its RetryAfter is the
//     longest of its parts' (the month's end, for a spent monthly part).
//
// A Settle whose cost would go beyond the bound takes what fits and
// forgets the rest: its Result, as every Settle's, describes the key after
// it (Remaining 0, ResetAfter the wait until full with the debt as
// bounded), and does not say that units were forgotten. A key already
// further in debt (after its policy was lowered, say) keeps its debt: a
// Settle never lowers it. Refund, Allow and Reset are unaffected. A Settle
// above WithMaxSettle's bound (ten limits by default) is refused before
// this bound applies. It is a SharedOption and applies to the twelve rate
// limiters of this package (a concurrency limiter, which has no debt,
// refuses it with an error wrapping ErrInvalidConfig that names it), and
// to a Composite through its parts: each part's key is
// bounded by its own limiter's option. On
// Redis the bound travels with the Settle in its one script call, and
// decides exactly as in process. A limits below 0 other than
// UnboundedDebt is an error wrapping ErrInvalidConfig; a very large one
// is the same as UnboundedDebt.
func WithMaxDebt(limits int) SharedOption {
	return SharedOption{func(cfg *config) error {
		if limits < 0 && limits != UnboundedDebt {
			return fmt.Errorf("%w: WithMaxDebt: %d limits; want >= 0, or UnboundedDebt", ErrInvalidConfig, limits)
		}
		cfg.maxDebt, cfg.maxDebtSet = debtCap(limits), true
		return nil
	}}
}

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
