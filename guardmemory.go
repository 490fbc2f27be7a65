package ratelimit

import (
	"context"
	"math/bits"
	"time"
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

// since returns the time of start, a reading of the Guard's clock, on its
// clock base; the time now when start is the zero Time (not read).
func (g *Guard) since(start time.Time) int64 {
	if start.IsZero() {
		return g.base.elapsed()
	}
	return int64(start.Sub(g.base.start))
}

// remember keeps what the backend's answer d, made at (on the Guard's
// clock base), says of key, unless RememberKeys keys are held already.
func (g *Guard) remember(key string, d *Decision, at int64) {
	var m memo
	m.at, m.until = at, at
	if d.Parts != nil {
		if len(d.Parts) > maxMemoParts {
			return
		}
		for i := range d.Parts {
			m.parts[i] = memoPartOf(&d.Parts[i], d.rules, i, at)
			m.until = max(m.until, m.parts[i].full)
		}
		m.n = uint8(len(d.Parts))
	} else {
		m.parts[0] = memoPartOf(&d.Result, d.rules, 0, at)
		m.until, m.n = max(m.until, m.parts[0].full), 1
	}
	t := g.memory
	for swept := false; ; swept = true {
		sh, now := t.lock(key, at, maxSpan)
		_, w := sh.lookup(key)
		switch {
		case m.until <= now:
			// Full again at once: nothing to start from.
			t.remove(sh, key, w)
		case w != absent || t.reserve(g.rememberKeys):
			sh.write(key, w, m, m.until)
		case !swept:
			// Full: shards no call has touched may hold memos of keys
			// that are full again.
			sh.mu.Unlock()
			t.sweep(g.base.elapsed(), maxSpan)
			continue
		}
		sh.mu.Unlock()
		return
	}
}

// adjustMemo keeps key's memo true to an adjustment the backend applied
// through the Guard: a Reset forgets it (the key is full), and a Settle
// that took more than it gave back takes that from each policy's
// remaining (1 call from a PerCall part's, as it counts); a give-back
// leaves it as it was, lower than the backend's, which only makes the
// fallback start lower. The memo then seeds again at the next failed-over
// call.
func (g *Guard) adjustMemo(key string, op AdjustOp, taken, cost int) {
	t := g.memory
	sh, _ := t.lock(key, g.base.elapsed(), maxSpan)
	defer sh.mu.Unlock()
	m, w := sh.lookup(key)
	if w == absent {
		return
	}
	if op == AdjustReset {
		t.remove(sh, key, w)
		return
	}
	for i := range int(m.n) {
		more := int64(cost) - int64(taken)
		if i < len(g.perCall) && g.perCall[i] {
			more = int64(once(cost) - once(taken))
		}
		if more > 0 {
			m.parts[i].remaining = max(m.parts[i].remaining-more, 0)
		}
	}
	m.seeded = false
	sh.write(key, w, m, m.until)
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

// seed brings the fallback's state of key down, for each of its seed targets,
// to its share of what the backend last said was left (see Guard), once
// per memo: the first failed-over call after a backend answer seeds, and
// the calls after it find the fallback's state as it left it.
func (g *Guard) seed(ctx context.Context, key string) {
	if g.memory == nil {
		return
	}
	now := g.base.elapsed()
	t := g.memory
	sh, now := t.lock(key, now, maxSpan)
	m, w := sh.lookup(key)
	sh.mu.Unlock()
	if w == absent || m.seeded || m.until <= now {
		return
	}
	for _, target := range g.seeds {
		if target.part >= int(m.n) {
			continue
		}
		p := m.parts[target.part]
		if p.skip || p.full <= now {
			continue
		}
		k := key
		if target.key != nil {
			k = target.key(key)
		}
		cur, err := target.limiter.Decide(ctx, k, 0)
		if err != nil || cur.Limit <= 0 {
			continue
		}
		want := share(p.left(m.at, now), int64(cur.Limit), p.limit)
		if w, ok := target.limiter.(usedSeeder); ok {
			// Its windows are its own: the units the backend had spent
			// are counted in a window that ends when the backend's does.
			w.seedUsed(ctx, k, int64(cur.Limit)-want, p.full-now)
			continue
		}
		if extra := int64(cur.Remaining) - want; extra > 0 {
			_, _ = target.limiter.Settle(ctx, k, 0, int(extra))
		}
	}
	sh, _ = t.lock(key, now, maxSpan)
	if m2, w := sh.lookup(key); w != absent && m2.at == m.at {
		m2.seeded = true
		sh.write(key, w, m2, m2.until)
	}
	sh.mu.Unlock()
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

// seedUsed counts at least used units in key's window: in the window open
// now, or, when none is, in one it opens that lasts lasts ns (at most the
// key's window), so that what a backend's window had spent stays spent
// until that window ends, and no longer. It never lowers a count.
func (w *FixedWindow) seedUsed(ctx context.Context, key string, used, lasts int64) {
	if used <= 0 || lasts <= 0 {
		return
	}
	r := w.windowRate
	if w.policyFunc != nil {
		var err error
		if r, err = w.policyFuncRate(ctx, key); err != nil {
			return
		}
	}
	sh, now := w.windows.lock(key, w.base.elapsed(), w.maxNow)
	defer sh.mu.Unlock()
	win, at := sh.lookup(key)
	if !win.open(now) {
		win = openWindow{end: now + min(lasts, r.window)}
	}
	if used = min(used, r.limit); win.count < used {
		win.count = used
		sh.write(key, at, win, win.end)
	}
}
