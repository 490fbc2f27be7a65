package ratelimit

import "fmt"

// DefaultMaxSettle is the most one Settle may charge a key of a limiter
// built without WithMaxSettle, in multiples of the key's limit: ten
// limits. A Settle whose cost is above it is refused (see WithMaxSettle).
//
// Ten, because an honest cost is at most a few limits (Allow's n is at
// most one, and a Settle beyond 1 + WithMaxDebt's limits is not charged
// anyway), while a cost reported in the wrong unit is off by a factor of
// 60 (seconds for minutes), 100 (cents for dollars) or 1,000 (bytes for
// kilobytes, milliseconds for seconds) or more: Settle(ctx, key, 1,
// 100_000_000) on a key of 120 a month is refused, rather than spending
// the month's quota until the month ends.
const DefaultMaxSettle = 10

// UnboundedSettle, given to WithMaxSettle, lets one Settle charge any cost
// up to 2^52, the bound of the Settle contract (see Adjuster).
const UnboundedSettle = -1

// WithMaxSettle bounds what one Settle may charge a key: a Settle whose
// cost is above limits times the key's limit (its policy's: the key's
// own, for a limiter built WithPolicyFunc) is refused, as the caller's
// mistake (a unit mix-up, a bogus usage report), with an error wrapping
// ErrInvalidCost that names the bound, and changes nothing: the key keeps
// the units taken on the estimate, no debt is added, and on Redis nothing
// is sent (a WithToken token is not spent, so a corrected retry with it
// applies). Without the option the bound is DefaultMaxSettle (10 limits);
// UnboundedSettle removes it. A Settle whose cost is at most taken (a
// give-back) is never refused by it, nor a Refund or a Reset.
//
// The refusal is of class ErrCaller: a Guard returns it to its caller
// untouched, never answers it by its failure policy and its breaker does
// not count it; a DenyCache, Shadow or Prefetch passes it on as the
// backend's answer (Prefetch sends every Settle of a cost above the key's
// limit to its backend, which applies the bound); AdjustHooks receive it
// in AdjustEvent.Err (otelratelimit's error.type "invalid_cost").
//
// It bounds what a single Settle may charge; WithMaxDebt bounds the debt a
// Settle may leave. They differ most for windows: a window's count, debt
// or not, lasts until the window ends (see WithMaxDebt), so a cost
// charged, however bounded, can spend a monthly quota until the month
// ends, and only a refusal keeps a bogus one from spending it at all. It is
// a SharedOption and applies to the twelve rate limiters
// of this package, in process and on Redis (where it is checked before the
// script call), and to a Composite through its parts: a Composite's Settle
// is refused when its cost is above any part's bound, each part's by its
// own limiter's option and its key's limit (a part that counts calls,
// Part.PerCall, and a part of units in flight are never charged more than
// one call, and have none). A limits below 1 other than UnboundedSettle is
// an error wrapping ErrInvalidConfig; a concurrency limiter, which has no
// Settle, refuses the option.
func WithMaxSettle(limits int) SharedOption {
	return SharedOption{func(cfg *config) error {
		if limits < 1 && limits != UnboundedSettle {
			return fmt.Errorf("%w: WithMaxSettle: %d limits; want >= 1, or UnboundedSettle", ErrInvalidConfig, limits)
		}
		cfg.maxSettle, cfg.maxSettleSet = settleCap(limits), true
		return nil
	}}
}

// settleCap is a limiter's bound on what one Settle may charge, in
// multiples of the key's limit; below 0, unbounded.
type settleCap int64

// most returns the largest cost a Settle may charge a key whose limit is
// limit (>= 1): the cap times limit, or 2^52 (maxSettleCost) when that is
// larger or the cap is unbounded.
func (c settleCap) most(limit int64) int64 {
	if c < 0 || limit > maxSettleCost/int64(max(c, 1)) {
		return maxSettleCost
	}
	return min(int64(c)*limit, maxSettleCost)
}

// check returns an error wrapping ErrInvalidCost for a Settle of taken and
// cost on a key whose limit is limit, when it charges more than taken and
// cost is above the cap's bound.
func (c settleCap) check(taken, cost, limit int) error {
	if cost <= taken || limit < 1 || int64(cost) <= c.most(int64(limit)) {
		return nil
	}
	return fmt.Errorf("%w: cost = %d is above %d × the key's limit %d, the most one Settle may charge (see WithMaxSettle): nothing was charged", ErrInvalidCost, cost, int64(c), limit)
}
