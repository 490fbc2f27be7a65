package ratelimit

import (
	"fmt"
	"reflect"
	"sync"
	"time"
	"unsafe"
)

// localParts decides a Composite's in-process parts under all their locks at
// once, with the engines their own Allow, Settle and Reset use (a
// Concurrency part's: its Acquire's and Reset's, see compositeinflight.go).
//
// A call locks the shard of every part's key in one global order, by the
// shard's address, so that calls of Composites sharing limiters, in any order
// of parts, never deadlock; a shard two parts' keys fall on is locked once.
// Each part keeps its own time: its shard's, from its own clock's reading, as
// its own Allow would.
type localParts struct {
	parts []localPart
}

// localPart is one part: a schedule (TokenBucket, GCRA), a FixedWindow, a
// SlidingLog, a SlidingCounter, a CalendarWindow or a Concurrency, and how
// it reads its clock. A schedule built WithPolicyFunc decides by its
// PolicyFunc engine k, whose keys keep their interval.
type localPart struct {
	s  *schedule
	k  *policyFuncSchedule // s's, when built WithPolicyFunc; nil otherwise
	w  *FixedWindow
	c  *Concurrency
	g  *SlidingLog
	n  *SlidingCounter
	cw *CalendarWindow

	base *clockBase // s's, w's, c's, g's, n's or cw's
	// from is the index of the part whose clock reading this part shares:
	// its own, or an earlier part's on the same clock. Parts on the system
	// clock read its monotonic time, at from's reading plus offset, which
	// is exact: offset is the monotonic time between their starts.
	from   int
	offset int64
}

// policyFunc returns part i's PolicyFunc resolver; nil for a part of one
// policy.
func (l *localParts) policyFunc(i int) *policyFunc {
	switch p := &l.parts[i]; {
	case p.k != nil:
		return p.k.policyFunc
	case p.w != nil:
		return p.w.policyFunc
	case p.c != nil:
		return p.c.policyFunc
	case p.g != nil:
		return p.g.policyFunc
	case p.cw != nil:
		return p.cw.policyFunc
	case p.n != nil:
		return p.n.policyFunc
	}
	return nil
}

// own returns part i's own policy in its engine's numbers: its limit, and
// its interval (a schedule's), its window or its lease TTL (ns).
func (l *localParts) own(i int) partRate {
	if p := &l.parts[i]; p.s != nil {
		return partRate{limit: p.s.capacity, param: p.s.interval}
	} else if p.c != nil {
		return partRate{limit: p.c.limit, param: p.c.ttl}
	} else if p.g != nil {
		return partRate{limit: p.g.limit, param: p.g.window}
	} else if p.cw != nil {
		return partRate{limit: p.cw.limit, param: int64(p.cw.cal.Period), zone: p.cw.zones.own}
	} else if p.n != nil {
		return partRate{limit: p.n.limit, param: p.n.window}
	}
	w := l.parts[i].w
	return partRate{limit: w.limit, param: w.window}
}

// rateOf returns part i's rate for a call whose parts' policies are rates
// (nil: each part's own): a schedule's.
func (l *localParts) rateOf(i int, rates []partRate) rate {
	if rates == nil {
		return l.parts[i].s.rate
	}
	r := rates[i]
	return rate{interval: r.param, capacity: r.limit, tau: r.limit * r.param}
}

// windowRateOf is rateOf for a window part; a CalendarWindow's has its
// limit alone, which is all its Results read.
func (l *localParts) windowRateOf(i int, rates []partRate) windowRate {
	if l.parts[i].cw != nil {
		return windowRate{limit: l.calendarRateOf(i, rates).limit}
	}
	if rates == nil {
		return l.parts[i].w.windowRate
	}
	return windowRate{limit: rates[i].limit, window: rates[i].param}
}

// logRateOf is rateOf for a sliding log part.
func (l *localParts) logRateOf(i int, rates []partRate) logRate {
	if rates == nil {
		return l.parts[i].g.logRate
	}
	return logRate{limit: rates[i].limit, window: rates[i].param}
}

// calendarRateOf returns a CalendarWindow part's limit and period (as
// param) for a call whose parts' policies are rates (nil: each part's
// own).
func (l *localParts) calendarRateOf(i int, rates []partRate) partRate {
	if rates == nil {
		return l.own(i)
	}
	return rates[i]
}

// counterRateOf is rateOf for a sliding counter part.
func (l *localParts) counterRateOf(i int, rates []partRate) counterRate {
	if rates == nil {
		return l.parts[i].n.counterRate
	}
	return counterRate{limit: rates[i].limit, window: rates[i].param}
}

// tableKeys returns the parts' keys, keys, as their tables keep them for a
// call whose parts' policies are rates (nil: each part's own): keys
// itself, or a copy when a part's keys name their policy (a calendar
// window's or a sliding counter's built WithPolicyFunc, see their
// tableKey).
func (l *localParts) tableKeys(keys []string, rates []partRate) []string {
	var out []string
	for i := range l.parts {
		p := &l.parts[i]
		var tk string
		switch {
		case p.cw != nil && p.cw.policyFunc != nil:
			r := l.calendarRateOf(i, rates)
			tk = p.cw.tableKey(keys[i], CalendarPeriod(r.param), r.zone)
		case p.n != nil && p.n.policyFunc != nil:
			tk = p.n.tableKey(keys[i], l.counterRateOf(i, rates).window)
		default:
			continue
		}
		if out == nil {
			out = append([]string(nil), keys...)
		}
		out[i] = tk
	}
	if out == nil {
		return keys
	}
	return out
}

// segmented reports whether a part's keys name their policy in its table
// (see tableKeys).
func (l *localParts) segmented() bool {
	for i := range l.parts {
		if p := &l.parts[i]; p.cw != nil && p.cw.policyFunc != nil || p.n != nil && p.n.policyFunc != nil {
			return true
		}
	}
	return false
}

// observer returns part i's observer.
func (l *localParts) observer(i int) *observer {
	switch p := &l.parts[i]; {
	case p.s != nil:
		return &p.s.obs
	case p.c != nil:
		return &p.c.obs
	case p.g != nil:
		return &p.g.obs
	case p.cw != nil:
		return &p.cw.obs
	case p.n != nil:
		return &p.n.obs
	}
	return &l.parts[i].w.obs
}

// newLocalParts returns the engine of a Composite of limiters, or an error
// naming the first that is not an in-process limiter of this package.
func newLocalParts(limiters []Limiter) (*localParts, error) {
	l := &localParts{parts: make([]localPart, len(limiters))}
	for i, lim := range limiters {
		p := &l.parts[i]
		switch v := lim.(type) {
		case *TokenBucket:
			if s := (*schedule)(v); s.built() {
				p.s, p.k = s, s.policyFunc
			}
		case *GCRA:
			if s := (*schedule)(v); s.built() {
				p.s, p.k = s, s.policyFunc
			}
		case *FixedWindow:
			if v != nil && v.windows != nil {
				p.w = v
			}
		case *Concurrency:
			if v.built() {
				p.c = v
			}
		case *SlidingLog:
			if v != nil && v.logs != nil {
				p.g = v
			}
		case *CalendarWindow:
			if v != nil && v.windows != nil {
				p.cw = v
			}
		case *SlidingCounter:
			if v != nil && v.keys != nil {
				p.n = v
			}
		default:
			return nil, fmt.Errorf("part %d is a %T, not a *TokenBucket, *GCRA, *FixedWindow, *SlidingLog, *SlidingCounter, *CalendarWindow or *Concurrency", i, lim)
		}
		switch {
		case p.s != nil:
			p.base = &p.s.base
		case p.w != nil:
			p.base = &p.w.base
		case p.c != nil:
			p.base = &p.c.base
		case p.g != nil:
			p.base = &p.g.base
		case p.cw != nil:
			p.base = &p.cw.base
		case p.n != nil:
			p.base = &p.n.base
		default:
			return nil, fmt.Errorf("part %d is a nil or zero-value %T", i, lim)
		}
		p.from = i
		for j := range i {
			if q := &l.parts[j]; q.from == j && sameClock(q.base, p.base) {
				p.from = j
				if p.base.system {
					p.offset = int64(q.base.start.Sub(p.base.start))
				}
				break
			}
		}
	}
	return l, nil
}

// sameClock reports whether a and b read one clock: the system clock, or
// the same Clock value behind a pointer. Other Clock values are not compared,
// as comparing them could panic.
func sameClock(a, b *clockBase) bool {
	if a.system || b.system {
		return a.system && b.system
	}
	if a == b {
		return true
	}
	va, vb := reflect.ValueOf(a.clock), reflect.ValueOf(b.clock)
	return va.Kind() == reflect.Pointer && va.Type() == vb.Type() && va.Pointer() == vb.Pointer()
}

// partCall is one part's share of a call: its time, where its key is, and
// what its engine made of it.
type partCall struct {
	reading int64     // the part's clock reading, in its time base
	at      time.Time // the clock's reading, when it is not the system clock
	now     int64     // the part's shard's time

	mu     *sync.Mutex // the shard's
	tsh    *tableShard[int64]
	ksh    *tableShard[policyFuncTat]
	wsh    *tableShard[openWindow]
	gsh    *tableShard[entryLog]
	csh    *tableShard[*heldUnits]
	nsh    *tableShard[counterState]
	cidx   int   // the index of csh in its table
	where  where // where the shard holds the key
	shared bool  // another part's key falls on the same shard

	allowed   bool
	converts  bool       // a PolicyFunc schedule's key is read at another interval
	cur, next int64      // a schedule's tat in force and after the call
	win, nwin openWindow // a fixed window's window open and after the call
	held      *heldUnits // a Concurrency's leases of the key, swept
	log       entryLog   // a sliding log's log of the key, swept

	ncur, nnx counterState // a sliding counter's state at now and after the call
	nleft     int64        // a sliding counter's units left at now
}

// callBuffer holds the partCalls of up to four parts, without allocating.
type callBuffer struct {
	calls [4]partCall
	order [4]int
}

// slices returns calls and order of length n, in b when they fit.
func (b *callBuffer) slices(n int) ([]partCall, []int) {
	if n <= len(b.calls) {
		return b.calls[:n], b.order[:n]
	}
	return make([]partCall, n), make([]int, n)
}

// allow decides costs[i] (0 <= costs[i] <= part i's limit) for keys[i] on
// every part i, all or nothing, each part by its policy in rates (nil:
// each part's own), and fills results with each part's Result: for a
// denial, a part that denies says so as its own Allow would, and the
// others report their state untouched, with RetryAfter 0; every part's
// Allowed is false. A PolicyFunc part's key written at another interval
// is written converted to its policy's, whatever the call decides, as its
// own Allow would. A Concurrency part's units, when taken, are held for
// its TTL; allow returns the Lease that holds them when leased, and a
// Lease that holds nothing otherwise. nexts, when not nil, gets each
// part's next unit where its Result does not tell it (see
// Decision.partNext): a sliding window's with units counted, an empty
// calendar window's end; 0 for the others.
func (l *localParts) allow(keys []string, costs []int, rates []partRate, results []Result, nexts []time.Duration, leased bool) Lease {
	var buf callBuffer
	parts := l.parts
	calls, order := buf.slices(len(parts))
	// Equal lengths spare the loops their bounds checks.
	calls, keys, costs, results = calls[:len(parts)], keys[:len(parts)], costs[:len(parts)], results[:len(parts)]
	l.lock(keys, calls, order)
	allowed := true
	for i := range parts {
		p, c := &parts[i], &calls[i]
		switch {
		case p.k != nil:
			r := l.rateOf(i, rates)
			c.now = p.k.tats.advance(c.ksh, c.reading, policyFuncMaxNow)
			var st policyFuncTat
			st, c.where = c.ksh.lookup(keys[i])
			c.converts = r.converts(st, c.now)
			c.cur, c.next, c.allowed = r.take(r.carry(st, c.now), c.now, costs[i])
		case p.s != nil:
			c.now = p.s.tats.advance(c.tsh, c.reading, p.s.maxNow)
			var tat int64
			tat, c.where = c.tsh.lookup(keys[i])
			c.cur, c.next, c.allowed = p.s.take(tat, c.now, costs[i])
		case p.c != nil:
			c.allowed = l.peekHeld(i, c, keys[i], costs[i], rates)
		case p.g != nil:
			c.now = p.g.logs.advance(c.gsh, c.reading, p.g.maxNow)
			c.log, c.where = c.gsh.lookup(keys[i])
			r := l.logRateOf(i, rates)
			c.log.sweep(c.now, r.window)
			c.allowed = int64(costs[i]) <= max(r.limit-c.log.sum, 0)
		case p.cw != nil:
			r := l.calendarRateOf(i, rates)
			c.now = p.cw.windows.advance(c.wsh, c.reading, calendarMaxNow)
			var win openWindow
			win, c.where = c.wsh.lookup(keys[i])
			c.win, c.nwin, c.allowed = p.cw.take(r.limit, CalendarPeriod(r.param), r.zone, win, c.now, costs[i])
		case p.n != nil:
			c.now = p.n.keys.advance(c.nsh, c.reading, p.n.maxNow)
			var st counterState
			st, c.where = c.nsh.lookup(keys[i])
			c.ncur, c.nnx, c.nleft, c.allowed = l.counterRateOf(i, rates).take(st, c.now, costs[i])
		default:
			c.now = p.w.windows.advance(c.wsh, c.reading, p.w.maxNow)
			var win openWindow
			win, c.where = c.wsh.lookup(keys[i])
			c.win, c.nwin, c.allowed = l.windowRateOf(i, rates).take(win, c.now, costs[i])
		}
		allowed = allowed && c.allowed
	}
	var lease Lease
	for i := range parts {
		p, c := &parts[i], &calls[i]
		switch {
		case p.c != nil:
			// Under the lock: a denial's wait reads the key's leases.
			lease, results[i] = l.hold(i, c, keys[i], costs[i], rates, allowed, leased)
		case p.g != nil:
			// Under the lock: a denial's wait, and the next unit, read the
			// key's log.
			var next time.Duration
			results[i], next = l.takeLog(i, c, keys[i], costs[i], rates, allowed, nexts != nil)
			if nexts != nil {
				nexts[i] = next
			}
		case p.k != nil:
			tat := c.cur // a peek or a denial keeps the key, converted
			if allowed {
				tat = c.next
			}
			if tat != c.cur || c.converts {
				if c.shared {
					_, c.where = c.ksh.lookup(keys[i])
				}
				c.ksh.write(keys[i], c.where, policyFuncTat{tat: tat, interval: l.rateOf(i, rates).interval}, tat)
			}
		case !allowed || costs[i] == 0: // a denial or a peek writes nothing
		case p.s != nil:
			if c.shared {
				// Another part's write may have moved the key in the
				// shard they share.
				_, c.where = c.tsh.lookup(keys[i])
			}
			c.tsh.write(keys[i], c.where, c.next, c.next)
		case p.n != nil:
			if c.shared {
				_, c.where = c.nsh.lookup(keys[i])
			}
			c.nsh.write(keys[i], c.where, c.nnx, c.nnx.expiry)
		default:
			if c.shared {
				_, c.where = c.wsh.lookup(keys[i])
			}
			c.wsh.write(keys[i], c.where, c.nwin, c.nwin.end)
		}
	}
	unlock(calls, order)

	for i := range parts {
		p, c := &parts[i], &calls[i]
		if p.c != nil || p.g != nil {
			continue // its result was made under the lock
		}
		lag := lagBehind(c.now, c.reading)
		// A part that would have allowed a denied call reports its state
		// untouched, with nothing to wait for.
		if p.s != nil {
			r := l.rateOf(i, rates)
			switch {
			case allowed:
				results[i] = r.result(true, c.next, c.now, lag)
			case c.allowed:
				results[i] = r.result(false, c.cur, c.now, lag)
			default:
				results[i] = r.denial(c.cur, c.next, c.now, lag)
			}
			continue
		}
		if p.n != nil {
			r := l.counterRateOf(i, rates)
			st, left := c.ncur, c.nleft
			switch {
			case allowed:
				st, left = c.nnx, c.nleft-int64(costs[i])
				results[i] = r.resultLeft(true, st, left, c.now, lag)
			case c.allowed:
				results[i] = r.resultLeft(false, st, left, c.now, lag)
			default:
				results[i] = r.denial(st, left, c.now, int64(costs[i]), lag)
			}
			if nexts != nil && left < r.limit {
				nexts[i] = r.nextUnit(st, left, c.now, lag)
			}
			continue
		}
		wr := l.windowRateOf(i, rates)
		win := c.win
		switch {
		case allowed:
			win = c.nwin
			results[i] = wr.result(true, win, c.now, lag)
		case c.allowed:
			results[i] = wr.result(false, win, c.now, lag)
		default:
			results[i] = wr.denial(win, c.now, lag)
		}
		if nexts != nil && p.cw != nil && win.count <= 0 {
			// An empty calendar window: the next unit taken counts until
			// the window open now ends.
			r := l.calendarRateOf(i, rates)
			nexts[i] = time.Duration(p.cw.span(CalendarPeriod(r.param), r.zone, c.now).end - c.now + lag)
		}
	}
	return lease
}

// settle takes changes[i] more units from keys[i] on every part i (gives
// -changes[i] back when negative), as the part's Settle would for a cost
// that much above what was taken, each part by its policy in rates (nil:
// each part's own), and fills results with each part's Result. Each
// change is valid for its part: at least minus its limit (or 2^52 for a
// PolicyFunc part), at most 2^52. A Concurrency part is left as it is,
// whatever its change, and reports its state (see heldState).
func (l *localParts) settle(keys []string, changes []int, a adjustment, rates []partRate, results []Result) {
	var buf callBuffer
	calls, order := buf.slices(len(l.parts))
	l.lock(keys, calls, order)
	for i := range calls {
		d := int64(changes[i])
		p, c := &l.parts[i], &calls[i]
		switch {
		case p.k != nil:
			now := p.k.tats.advance(c.ksh, c.reading, policyFuncMaxNow)
			results[i] = p.k.settleLocked(l.rateOf(i, rates), c.ksh, keys[i], d, now, lagBehind(now, c.reading))
		case p.s != nil:
			now := p.s.tats.advance(c.tsh, c.reading, p.s.maxNow)
			results[i] = p.s.settleLocked(c.tsh, keys[i], d, now, lagBehind(now, c.reading))
		case p.c != nil:
			// Units in flight come back by their leases alone: the part
			// reports its state.
			results[i] = l.heldState(i, c, keys[i], rates)
		case p.g != nil:
			now := p.g.logs.advance(c.gsh, c.reading, p.g.maxNow)
			results[i] = p.g.settleAt(l.logRateOf(i, rates), c.gsh, keys[i], d, a, now, lagBehind(now, c.reading))
		case p.cw != nil:
			r := l.calendarRateOf(i, rates)
			now := p.cw.windows.advance(c.wsh, c.reading, calendarMaxNow)
			results[i] = p.cw.settleAt(r.limit, CalendarPeriod(r.param), r.zone, c.wsh, keys[i], d, a, now, lagBehind(now, c.reading))
		case p.n != nil:
			now := p.n.keys.advance(c.nsh, c.reading, p.n.maxNow)
			results[i] = p.n.settleAt(l.counterRateOf(i, rates), c.nsh, keys[i], d, a, now, lagBehind(now, c.reading))
		default:
			now := p.w.windows.advance(c.wsh, c.reading, p.w.maxNow)
			results[i] = p.w.settleAt(l.windowRateOf(i, rates), c.wsh, keys[i], d, a, now, lagBehind(now, c.reading))
		}
	}
	unlock(calls, order)
}

// reset returns every part's key to full: a Concurrency part's holds no
// lease any more.
func (l *localParts) reset(keys []string) {
	var buf callBuffer
	calls, order := buf.slices(len(l.parts))
	l.lock(keys, calls, order)
	for i := range calls {
		p, c := &l.parts[i], &calls[i]
		switch {
		case p.k != nil:
			p.k.tats.advance(c.ksh, c.reading, policyFuncMaxNow)
			_, w := c.ksh.lookup(keys[i])
			p.k.tats.remove(c.ksh, keys[i], w)
		case p.s != nil:
			p.s.tats.advance(c.tsh, c.reading, p.s.maxNow)
			_, w := c.tsh.lookup(keys[i])
			p.s.tats.remove(c.tsh, keys[i], w)
		case p.c != nil:
			// Every lease of the key is dropped, as Concurrency.Reset does.
			p.c.keys.advance(c.csh, c.reading, p.c.maxNow)
			_, w := c.csh.lookup(keys[i])
			p.c.keys.remove(c.csh, keys[i], w)
		case p.g != nil:
			p.g.logs.advance(c.gsh, c.reading, p.g.maxNow)
			_, w := c.gsh.lookup(keys[i])
			p.g.logs.remove(c.gsh, keys[i], w)
		case p.cw != nil:
			p.cw.windows.advance(c.wsh, c.reading, calendarMaxNow)
			_, w := c.wsh.lookup(keys[i])
			p.cw.windows.remove(c.wsh, keys[i], w)
		case p.n != nil:
			p.n.keys.advance(c.nsh, c.reading, p.n.maxNow)
			_, w := c.nsh.lookup(keys[i])
			p.n.keys.remove(c.nsh, keys[i], w)
		default:
			p.w.windows.advance(c.wsh, c.reading, p.w.maxNow)
			_, w := c.wsh.lookup(keys[i])
			p.w.windows.remove(c.wsh, keys[i], w)
		}
	}
	unlock(calls, order)
}

// lock reads every part's clock, each clock once, and locks the shards of
// all keys in the order of their addresses, each once, writing that order
// into order. The caller moves each shard's time (keyTable.advance; a shard
// two parts share is moved to the same reading twice, which is moving it
// once) and unlocks with unlock(calls, order).
func (l *localParts) lock(keys []string, calls []partCall, order []int) {
	parts := l.parts
	calls, keys = calls[:len(parts)], keys[:len(parts)]
	for i := range parts {
		p, c := &parts[i], &calls[i]
		switch {
		case p.from != i && p.base.system:
			c.reading = calls[p.from].reading + p.offset
		case p.from != i:
			c.reading = int64(calls[p.from].at.Sub(p.base.start))
		case p.base.system:
			c.reading = p.base.elapsed()
		default:
			c.at = p.base.clock.Now()
			c.reading = int64(c.at.Sub(p.base.start))
		}
		switch {
		case p.k != nil:
			c.ksh = p.k.tats.shard(keys[i])
			c.mu = &c.ksh.mu
		case p.s != nil:
			c.tsh = p.s.tats.shard(keys[i])
			c.mu = &c.tsh.mu
		case p.c != nil:
			c.cidx = p.c.keys.shardIndex(keys[i])
			c.csh = &p.c.keys.shards[c.cidx]
			c.mu = &c.csh.mu
		case p.g != nil:
			c.gsh = p.g.logs.shard(keys[i])
			c.mu = &c.gsh.mu
		case p.cw != nil:
			c.wsh = p.cw.windows.shard(keys[i])
			c.mu = &c.wsh.mu
		case p.n != nil:
			c.nsh = p.n.keys.shard(keys[i])
			c.mu = &c.nsh.mu
		default:
			c.wsh = p.w.windows.shard(keys[i])
			c.mu = &c.wsh.mu
		}
		// Insertion sort, by the address of the shard's lock.
		j := i
		for ; j > 0 && lockAddr(calls[order[j-1]].mu) > lockAddr(c.mu); j-- {
			order[j] = order[j-1]
		}
		order[j] = i
	}
	for k, i := range order {
		if k > 0 && calls[order[k-1]].mu == calls[i].mu {
			calls[order[k-1]].shared, calls[i].shared = true, true
			continue
		}
		calls[i].mu.Lock()
	}
}

// unlock unlocks the shards lock locked.
func unlock(calls []partCall, order []int) {
	for k, i := range order {
		if k == 0 || calls[order[k-1]].mu != calls[i].mu {
			calls[i].mu.Unlock()
		}
	}
}

// lockAddr is the address of a lock, which orders the locks a call takes.
func lockAddr(mu *sync.Mutex) uintptr { return uintptr(unsafe.Pointer(mu)) }

// takeLog takes cost for key on part i, a sliding log whose key's log c
// holds swept, when the call is allowed, and returns the part's Result,
// under the lock: a part that would have allowed a denied call reports its
// log untouched, with nothing to wait for. With wantNext, it also returns
// the part's next unit when its log holds units (see logRate.nextUnit).
func (l *localParts) takeLog(i int, c *partCall, key string, cost int, rates []partRate, allowed, wantNext bool) (Result, time.Duration) {
	r := l.logRateOf(i, rates)
	lag := lagBehind(c.now, c.reading)
	var res Result
	switch {
	case allowed && cost > 0:
		c.log.add(c.now, int64(cost), r.limit)
		c.log.end = c.now + r.window
		if c.shared {
			_, c.where = c.gsh.lookup(key)
		}
		c.gsh.write(key, c.where, c.log, c.log.end)
		res = r.result(true, &c.log, c.now, lag)
	case allowed:
		res = r.result(true, &c.log, c.now, lag)
	case c.allowed:
		res = r.result(false, &c.log, c.now, lag)
	default:
		res = r.denial(&c.log, int64(cost), c.now, lag)
	}
	if !wantNext || c.log.sum <= 0 {
		return res, 0
	}
	return res, r.nextUnit(&c.log, c.now, lag)
}
