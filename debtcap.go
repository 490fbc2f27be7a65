package ratelimit

import "fmt"

// DefaultMaxDebt is the most debt, in limits, that a Settle may leave on a
// key of a limiter built without WithMaxDebt: one full limit.
//
// One limit, because it is the most a single call may ask for (Allow's n is
// at most the limit): a Settle on a key not already in debt is charged in
// full whenever its cost is at most the limit, so honest overruns of an
// estimate are paid for; and a bogus usage report (a cost of 10^9 on a key
// of 100 a minute, say) costs the key at most one more Window of denial
// than using up its limit would: a token bucket or GCRA key is then full
// again within two Windows, and allows its next unit within one Window and
// one unit's time (about a minute for 100 a minute, rather than days).
// WithMaxDebt(0) forgives every overrun beyond what the key had left, and
// UnboundedDebt charges every one whatever it costs.
const DefaultMaxDebt = 1

// UnboundedDebt, given to WithMaxDebt, lets a Settle drive a key as far
// into debt as its cost says, within the bounds every store keeps anyway:
// a token bucket or GCRA key at most about 73 years from full in process
// (2^52 µs, about 142 years, on Redis), a fixed window's count at most
// 2^52 (or the limit, if higher).
const UnboundedDebt = -1

// WithMaxDebt bounds how far a Settle may drive a key into debt: after a
// Settle, a key owes at most limits times its limit beyond empty (its
// policy's limit: the key's own, for a limiter built WithPolicyFunc). A
// token bucket or GCRA key is then at most (1 + limits) × its Window from
// full, and a fixed window counts at most (1 + limits) × its limit. 0 means
// a Settle never takes a key below empty, and UnboundedDebt keeps no bound
// but the store's own; without the option, the bound is DefaultMaxDebt (1).
//
// A Settle whose cost would go beyond the bound takes what fits and
// forgets the rest: its Result, as every Settle's, describes the key after
// it (Remaining 0, ResetAfter the wait until full with the debt as
// bounded), and does not say that units were forgotten. A key already
// further in debt (after its policy was lowered, say) keeps its debt: a
// Settle never lowers it. Refund, Allow and Reset are unaffected. It
// applies to the twelve rate limiters of this package, and to a Composite through
// its parts: each part's key is bounded by its own limiter's option. On
// Redis the bound travels with the Settle in its one script call, and
// decides exactly as in process. A limits below 0 other than
// UnboundedDebt is an error wrapping ErrInvalidConfig; a very large one
// is the same as UnboundedDebt.
func WithMaxDebt(limits int) Option {
	return func(cfg *config) error {
		if limits < 0 && limits != UnboundedDebt {
			return fmt.Errorf("%w: WithMaxDebt: %d limits; want >= 0, or UnboundedDebt", ErrInvalidConfig, limits)
		}
		cfg.maxDebt, cfg.maxDebtSet = debtCap(limits), true
		return nil
	}
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
