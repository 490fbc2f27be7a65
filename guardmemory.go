package ratelimit

import (
	"context"
	"math/bits"
)

// Fallbacks that start from what the backend had left: a Guard that fails
// over remembers, for each key it answered recently, what its backend said
// was left of each policy, and when it fails over for that key, it first
// brings the fallback's state down to its share of that (see Guard). A
// fallback that started from full on every replica would let a fleet
// admit, while the backend is away, a whole limit more than the backend
// had left: a monthly quota spent to its last units refilled by every
// replica's share.

// maxMemoParts is the most policies a memo holds: a backend whose
// Decisions list more is not remembered.
const maxMemoParts = 4

// DefaultRememberKeys is how many keys' latest backend answers a Guard
// that fails over remembers, unless GuardConfig.RememberKeys says
// otherwise.
const DefaultRememberKeys = 100_000

// memo is what the backend last said of a key: each policy's Remaining of
// its Limit, and when the key is full again.
type memo struct {
	at     int64 // when the backend answered, ns on the Guard's clock base
	until  int64 // when every part is full again: the memo says nothing after
	parts  [maxMemoParts]memoPart
	n      uint8
	seeded bool // a failed-over call has brought the fallback down to it
}

// memoPart is what the backend said of one policy of a key.
type memoPart struct {
	remaining, limit int64
	full             int64 // when it is full again, ns on the Guard's clock base
	// linear: it refills at a steady rate (a token bucket or GCRA); a
	// window's count, or a sliding window's, is taken to stay until full.
	linear bool
	// skip: units in flight (which come back by their leases, not in
	// time), or no limit: not seeded.
	skip bool
}

// seedTarget is one in-process limiter of a Guard's fallback that a memo
// part seeds: the backend's policy part (its index in the Decision's
// Parts, 0 for a backend of one policy) on key(call key).
type seedTarget struct {
	part    int
	limiter interface {
		Decider
		Adjuster
	}
	key func(string) string // nil: the call's key
}

// seedTargets returns the in-process limiters of fallback that start from
// a memo of backend's answers: for a fallback Composite, each of its parts
// of a rate (not a Concurrency) whose name is one of backend's Composite's
// parts; for a fallback of one policy in front of a backend of one policy,
// the fallback itself. None for a fallback of another package, whose
// state cannot be read.
func seedTargets(backend, fallback Limiter) []seedTarget {
	bc := compositeIn(backend)
	if fc, ok := fallback.(*Composite); ok {
		if fc == nil || fc.local == nil || bc == nil {
			return nil
		}
		var targets []seedTarget
		for _, p := range fc.parts {
			i := -1
			for k, bp := range bc.parts {
				if bp.Name == p.Name {
					i = k
				}
			}
			if l, ok := seedable(p.Limiter); ok && i >= 0 {
				targets = append(targets, seedTarget{part: i, limiter: l, key: p.Key})
			}
		}
		return targets
	}
	if bc != nil {
		return nil
	}
	if l, ok := seedable(fallback); ok {
		return []seedTarget{{limiter: l}}
	}
	return nil
}

// seedable returns l when it is an in-process rate limiter of this
// package (not a Concurrency), whose peek (n == 0) reads its key's state.
func seedable(l Limiter) (interface {
	Decider
	Adjuster
}, bool) {
	e, ok := engineOf(l)
	if _, local := e.(localEngine); !ok || !local || isNil(l) || e.kindOf().inFlight() {
		return nil, false
	}
	v, ok := l.(interface {
		Decider
		Adjuster
	})
	return v, ok
}

// memoPartOf returns what r, the Result of policy i of a Decision whose
// rules are rules (nil when not known), made at at, says of it.
func memoPartOf(r *Result, rules []rule, i int, at int64) memoPart {
	p := memoPart{remaining: int64(max(r.Remaining, 0)), limit: int64(r.Limit), full: at + int64(max(r.ResetAfter, 0))}
	if i < len(rules) {
		p.linear = rules[i].unit > 0
		p.skip = rules[i].inFlight
	}
	p.skip = p.skip || p.limit <= 0
	p.remaining = min(p.remaining, max(p.limit, 0))
	return p
}

// left returns what the backend had left of p at now, p having been
// answered at: what it said, refilled since at a steady rate for a linear
// policy, which is full at p.full.
func (p *memoPart) left(at, now int64) int64 {
	if !p.linear || p.full <= at || now <= at {
		return p.remaining
	}
	missing := p.limit - p.remaining
	// missing × (now − at) / (full − at), rounded down, in 128 bits.
	hi, lo := bits.Mul64(uint64(missing), uint64(now-at))
	q, _ := bits.Div64(hi, lo, uint64(p.full-at))
	return min(p.remaining+int64(q), p.limit)
}

// share returns left × limit / of, rounded down, in 128 bits: a limit's
// share of what was left of another. left <= of.
func share(left, limit, of int64) int64 {
	if of <= 0 || left >= of {
		return limit
	}
	hi, lo := bits.Mul64(uint64(max(left, 0)), uint64(limit))
	q, _ := bits.Div64(hi, lo, uint64(of))
	return int64(q)
}

// usedSeeder is a fallback whose windows are its own (a FixedWindow): a
// Guard seeds it with the units its backend had spent, in a window that
// ends when the backend's does, rather than by a Settle.
type usedSeeder interface {
	seedUsed(ctx context.Context, key string, used, lasts int64)
}
