package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// Adjuster is a Limiter whose takings can be corrected after the work they
// admitted: given back, settled at their true cost, or wiped. Every rate
// limiter of this package implements it (the concurrency limiters do not:
// their units come back by their leases, and they have a Reset of their
// own), as do Composite, Guard, DenyCache and Shadow, and the in-process and Redis limiters adjust identically while
// the clock moves forward (see Exactness in the package documentation).
//
// The Result of Refund and Settle describes the key after the adjustment:
// Allowed is true (an adjustment is never refused for lack of units),
// Remaining is what is left, never below 0 even in debt, RetryAfter is 0,
// and ResetAfter is the wait until the key is full again, debt included.
// A Composite's is combined as its Allow's is.
//
// Implementations are safe for concurrent use.
type Adjuster interface {
	Limiter
	// Refund gives back n units that an allowed call took from key, never
	// filling it above its limit. A fixed window gives them back only to
	// the window that took them (see TakenAt), and a window whose count
	// falls to 0 ends. It is Settle(ctx, key, n, 0, opts...).
	Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error)
	// Settle replaces taken, the units an allowed call took from key on an
	// estimate, by cost, the work's true cost. A smaller cost gives back
	// the difference as Refund does; a larger one takes the rest at once,
	// even when that leaves the key in debt (a token bucket or GCRA with
	// less than nothing, a window counted past its limit): calls are then
	// denied until the debt is paid, at the limiter's rate or by the
	// window's end. A debt never lets a key allow more later. A debt is
	// bounded by the limiter's WithMaxDebt, by default one limit: what a
	// Settle would take beyond it is forgotten, and the Result does not
	// say that it was; how long a debt lasts depends on the kind (a token
	// bucket's is paid at its rate, a window's lasts until the window
	// ends, a calendar month's until the month ends: see WithMaxDebt). A
	// cost above the limiter's WithMaxSettle, by default ten limits, is
	// refused as a unit mix-up or a bogus report, so that one cannot lock
	// a key out for days or spend a month's quota (a key of 100 a minute
	// settled at 10^9 is as it was). taken must be between 0 and the
	// limit; cost may exceed the limit, up to that bound and 2^52. Either
	// below 0 or cost above 2^52 or the bound (ErrInvalidCost), or taken
	// above the limit (ErrCostExceedsLimit), is an error of class
	// ErrCaller that changes nothing.
	Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error)
	// Reset returns key to its full limit, as if it had never been used;
	// for example, a successful login clearing failed attempts.
	Reset(ctx context.Context, key string) error
}

// AdjustOption qualifies one Refund or Settle call.
type AdjustOption func(*adjustment)

// adjustment collects what the AdjustOptions of one call set.
type adjustment struct {
	token    string
	tokenSet bool
	takenAt  time.Time
	hasTaken bool
}

// WithToken makes a Refund or Settle on Redis idempotent: the first call
// with token for a key applies, and any later one with the same token for
// the same key (a retry after a timeout or a lost connection, when the
// first may have run) changes nothing and answers the key's state. The
// token is remembered for SettleTokenTTL in a Redis key that the script
// call on the limiter's Redis key (see KeyPrefix) also reads and writes:
// "ratelimit:settled:" + the length of the Redis key in decimal + ":" +
// the Redis key + ":" + token, so that no two pairs of a key and a token
// share a name, in the Redis key's hash slot: the Redis key's hash tag is
// the name's first, and a Redis key without one (given a prefix with
// braces) has "{" + three letters or digits in its slot + "}" put after
// "ratelimit:settled:". So every key takes a token on every client. A token is any non-empty string of at most 128
// bytes; use one per unit of work, such as a request ID. Without a token, a
// Redis call is sent at most once and is not repeated by go-redis's retries
// (except through a *redis.AutoPipeliner, see the package doc), so a caller
// that retries an ambiguous failure itself must pass one. In process, where
// a call cannot fail halfway, the token is checked and otherwise ignored.
func WithToken(token string) AdjustOption {
	return func(a *adjustment) { a.token, a.tokenSet = token, true }
}

// TakenAt says when the units being refunded or settled were taken: a time
// read just after the Allow call that took them returned. A FixedWindow
// gives units back only when the window open now had opened by t, so that a
// refund never lands in a later window (one that opened after t); the units
// of the call that opened the window are given back to it. Without TakenAt,
// it gives them back to the window open now. A CalendarWindow does the same
// with its calendar windows; a SlidingCounter gives them back to the window
// that holds t, the one open now or the previous one, and to none that
// ended before; a SlidingLog to its newest entries taken at or before t.
// Token buckets and GCRA ignore it. t must be a reading of the clock the
// limiter measures ages on: an in-process limiter's clock (WithClock; the
// system clock by default); on Redis, the system clock, or the caller's
// clock of a limiter built WithCallerClock, and for a RedisCalendarWindow
// the clock its windows' bounds come from (WithClock, else the caller's
// clock, else the system clock). On Redis, t is turned into an age on that
// clock (the system clock's monotonic reading), so client and server clocks
// need not agree, and a window counts as open by t when it opened no more
// than 1 ms after it, as Redis keeps a window's end in whole milliseconds.
func TakenAt(t time.Time) AdjustOption {
	return func(a *adjustment) { a.takenAt, a.hasTaken = t, true }
}

// SettleTokenTTL is how long a Redis limiter remembers a WithToken token
// after the call that applied it: long enough to cover go-redis's own
// retries (seconds) and a caller's retry of a call that timed out (seconds
// to a minute or two), short enough that memory stays small: one key of
// about 100 bytes per token, so 1,000 settles a second keep about 30 MB.
const SettleTokenTTL = 5 * time.Minute

// maxTokenLen bounds a WithToken token, which is stored in a key name.
const maxTokenLen = 128

// adjustOptions applies opts to an adjustment, rejecting nil options and
// tokens that are empty or longer than maxTokenLen. kind names the limiter
// in errors.
func adjustOptions(kind string, opts []AdjustOption) (adjustment, error) {
	if len(opts) == 0 {
		// a escapes to the heap, as the options are opaque: a call
		// without options allocates nothing.
		return adjustment{}, nil
	}
	var a adjustment
	for i, opt := range opts {
		if opt == nil {
			return a, fmt.Errorf("%w: %s: adjust option %d is nil", ErrInvalidConfig, kind, i)
		}
		opt(&a)
	}
	if a.tokenSet && a.token == "" {
		return a, fmt.Errorf("%w: %s: WithToken: empty token", ErrInvalidConfig, kind)
	}
	if len(a.token) > maxTokenLen {
		return a, fmt.Errorf("%w: %s: WithToken: a token of %d bytes; at most %d", ErrInvalidConfig, kind, len(a.token), maxTokenLen)
	}
	return a, nil
}

// settleArgs checks a Settle of taken and cost on a limiter that bounds
// taken by takenLimit, named kind in errors, on a key whose limit is limit
// and whose Settles most bounds (see WithMaxSettle), and returns what its
// opts set (see adjustOptions and checkSettle).
func settleArgs(kind string, taken, cost, takenLimit, limit int, most settleCap, opts []AdjustOption) (adjustment, error) {
	a, err := adjustOptions(kind, opts)
	if err != nil {
		return a, err
	}
	if err := checkSettle(taken, cost, takenLimit); err != nil {
		return a, err
	}
	return a, most.check(taken, cost, limit)
}

// maxSettleCost bounds the cost of a Settle: 2^52, the largest whole
// number every store holds exactly.
const maxSettleCost = 1 << 52

// checkSettle returns an error for a Settle that cannot be applied on a
// limiter of limit: taken or cost below 0, or cost above 2^52
// (ErrInvalidCost), taken above the limit (ErrCostExceedsLimit: no allowed
// call took that much).
func checkSettle(taken, cost, limit int) error {
	if taken < 0 || cost < 0 || cost > maxSettleCost {
		return fmt.Errorf("%w: taken = %d and cost = %d must be >= 0, and cost at most 2^52", ErrInvalidCost, taken, cost)
	}
	if taken > limit {
		return fmt.Errorf("%w: taken = %d, limit = %d", ErrCostExceedsLimit, taken, limit)
	}
	return nil
}
