package ratelimit

import (
	"context"
	"time"
)

// AdjustHooks is the optional interface of a Hooks that also hears of
// adjustments: a Hooks given to WithHooks, or to a Guard's, DenyCache's or
// Shadow's config, that implements it has Adjusted called once per
// Refund, Settle and Reset the limiter or decorator was asked for, and
// once per Release and Extend of a Lease the limiter granted, successful
// or not. A Hooks that does not implement it hears of
// decisions only, and adjustments cost its limiters nothing more than a
// check of a nil field.
//
// Who reports:
//   - every limiter of this package built WithHooks, for its own calls;
//   - each part of a Composite built WithHooks, for its own share of the
//     Composite's calls (see AdjustEvent);
//   - a Guard, DenyCache or Shadow, for every adjustment it forwards to its
//     backend: they all apply adjustments to their backend only (a Guard's
//     bypass its breaker and failure policy and never reach its fallback),
//     so their report is the backend's answer as their caller gets it
//     (through a Guard, within its Timeout). A Release or Extend is not
//     theirs to report: it goes to the limiter that granted the lease (a
//     Guard's fallback, for a lease the fallback granted), which reports
//     it, as it alone reports the lease's grant (Event.Lease) and hears
//     of every release, Lease.Release included.
//
// An adjustment that passes several reporters (a limiter built WithHooks
// inside a Guard whose Hooks listen too) is reported once by each, under
// each's Limiter: count one layer (by Limiter), as for decisions.
//
// Adjusted is called on the caller's goroutine after the adjustment
// returns, like Decided: implementations must be safe for concurrent use
// and fast.
type AdjustHooks interface {
	// Adjusted is called once per Refund, Settle, Reset, Release or Extend.
	Adjusted(AdjustEvent)
}

// AdjustOp names the call an AdjustEvent reports.
type AdjustOp uint8

const (
	// AdjustSettle is a Settle.
	AdjustSettle AdjustOp = iota
	// AdjustRefund is a Refund: a Settle of n taken and a cost of 0.
	AdjustRefund
	// AdjustReset is a Reset.
	AdjustReset
	// AdjustRelease is a Lease's Release: Taken is the lease's units,
	// Cost 0. It is reported whether or not the lease was still held;
	// Result.Allowed says whether it was (its units came back now), and
	// the rest of Result is zero.
	AdjustRelease
	// AdjustExtend is a Lease's Extend: Taken and Cost are the lease's
	// units; Err wraps ErrLeaseExpired when the lease was no longer held.
	// Result.Allowed says whether it was renewed, and Result.Limit is the
	// key's limit; the rest is zero.
	AdjustExtend
)

// String returns the call's name in lower case, for metric labels:
// "settle", "refund", "reset", "release" or "extend" ("unknown" for any other value).
func (op AdjustOp) String() string {
	switch op {
	case AdjustSettle:
		return "settle"
	case AdjustRefund:
		return "refund"
	case AdjustReset:
		return "reset"
	case AdjustRelease:
		return "release"
	case AdjustExtend:
		return "extend"
	}
	return "unknown"
}

// AdjustEvent describes one Refund, Settle, Reset, Release or Extend for
// AdjustHooks.
type AdjustEvent struct {
	// Limiter names who reports, as Event's does: the name WithName gave,
	// or the type's ("TokenBucket", "RedisGCRA", ...), or a decorator's
	// Name ("Guard", "DenyCache", "Shadow" by default). A limiter reports
	// what it applied to its own store; a decorator, what its backend
	// answered.
	Limiter string
	// Op is the call.
	Op AdjustOp
	// Key is the call's key; for a part of a Composite, the part's key:
	// as KeyDigest gives it, unless the reporter shows keys whole (see
	// WithKeysShown), and "" for Hooks that never read keys (see
	// KeylessHooks).
	Key string
	// Taken and Cost are the units the call replaced and those it charged
	// instead: a Settle's taken and cost, a Refund's n and 0, and 0 and 0
	// for a Reset. Taken - Cost units were given back when positive;
	// Cost - Taken more were taken when negative. A part of a Composite
	// reports its own share: the call's taken and cost, or, for a part
	// that counts calls (Part.PerCall), 1 for each that is above 0.
	Taken, Cost int
	// Token is the call's WithToken token, "" without one. On Redis, a
	// retry with a token already applied changed nothing, and reports the
	// key's state as the first call did: the hooks cannot tell them
	// apart.
	Token string
	// Result is what the call returned: the key after the adjustment (see
	// Adjuster), or, on an error, a Result with only the Limit. For a part
	// of a Composite, the part's own Result; for a Reset, the zero Result.
	Result Result
	// Err is the error the call returned (for a part of a Composite, the
	// Composite's). errors.Is tells what it means for the key's state: an
	// error of class ErrCaller or ErrCorruptState changed nothing, while
	// one of class ErrBackend (or of a Limiter of another package) may
	// have been applied or not: retry it with the same WithToken token.
	Err error
	// Latency is the time the call took, on the reporter's clock (a Redis
	// limiter's and a Composite's: the system clock).
	Latency time.Duration
}

// Adjusted does nothing.
func (NopHooks) Adjusted(AdjustEvent) {}

// activeAdjustHooks returns h as AdjustHooks, or nil when it does not
// implement them or nothing listens (see activeHooks).
func activeAdjustHooks(h Hooks) AdjustHooks {
	a, _ := activeHooks(h).(AdjustHooks)
	return a
}

// tokenOf returns the WithToken token among opts, "" without one. It is
// read only for the hooks, after the call has checked opts.
func tokenOf(opts []AdjustOption) string {
	if len(opts) == 0 {
		return "" // the usual call: no adjustment to build
	}
	var a adjustment
	for _, opt := range opts {
		if opt != nil {
			opt(&a)
		}
	}
	return a.token
}

// adjusted reports an adjustment to h, which is not nil; key is as the
// event shows it (see keyRules.event).
func adjusted(h AdjustHooks, limiter string, op AdjustOp, key string, taken, cost int, opts []AdjustOption, res Result, err error, latency time.Duration) {
	h.Adjusted(AdjustEvent{
		Limiter: limiter, Op: op, Key: key, Taken: taken, Cost: cost,
		Token: tokenOf(opts), Result: res, Err: err, Latency: latency,
	})
}

// reportAdjust reports an adjustment of the observer's limiter to its
// adjust hooks. The caller has checked that o.adjust is not nil.
func (o *observer) reportAdjust(op AdjustOp, key string, taken, cost int, opts []AdjustOption, res Result, err error, latency time.Duration) {
	adjusted(o.adjust, o.name, op, o.keys.event(o.adjust, key), taken, cost, opts, res, err, latency)
}

// adjusters returns those of a Composite's observers that hear of
// adjustments, or nil when none does.
func adjusters(observers []*observer) []*observer {
	var adj []*observer
	for i, o := range observers {
		if o != nil && o.adjust != nil {
			if adj == nil {
				adj = make([]*observer, len(observers))
			}
			adj[i] = o
		}
	}
	return adj
}

// forwardAdjust applies the adjustment op of taken and cost to key on a:
// a Refund of taken, a Settle, or a Reset (with the zero Result).
func forwardAdjust(ctx context.Context, a Adjuster, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	switch op {
	case AdjustRefund:
		return a.Refund(ctx, key, taken, opts...)
	case AdjustReset:
		return Result{}, a.Reset(ctx, key)
	}
	return a.Settle(ctx, key, taken, cost, opts...)
}
