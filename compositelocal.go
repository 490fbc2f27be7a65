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
// Concurrency part's: its Acquire's and Reset's). It asks each part's
// engine (partEngine) and tells no kind from another.
//
// A call locks the shard of every part's key in one global order, by the
// shard's address, so that calls of Composites sharing limiters, in any order
// of parts, never deadlock; a shard two parts' keys fall on is locked once.
// Each part keeps its own time: its shard's, from its own clock's reading, as
// its own Allow would.
type localParts struct {
	parts []localPart
	// buffers holds *callBuffers of len(parts) partCalls, cleared, so
	// that a call allocates none once warm.
	buffers sync.Pool
}

// localPart is one part: its limiter's engine, what the engine said of
// itself when the Composite was built, and how the part reads its clock.
type localPart struct {
	e         partEngine
	own       partRate   // e.own()
	segmented bool       // e.segmented()
	base      *clockBase // e.clock()
	// from is the index of the part whose clock reading this part shares:
	// its own, or an earlier part's on the same clock. Parts on the system
	// clock read its monotonic time, at from's reading plus offset, which
	// is exact: offset is the monotonic time between their starts.
	from   int
	offset int64
}

// partLimiter is an in-process limiter that can be a Composite's part: every
// in-process limiter of this package, each in its kind's declaration file.
type partLimiter interface {
	localEngine
	// part returns the limiter's engine as a Composite's part; nil unless
	// the limiter was built by its constructor.
	part() partEngine
}

// partEngine is an in-process limiter as a Composite's part, as its kind's
// declaration file gives it (partLimiter.part). A call locks every part's
// shard (shardLock, in address order), then asks each part whether its
// cost fits (peek), then has each write what the call decided and make its
// Result (commit), all under the locks. The engine keeps what it read
// between peek and commit in the part's partCall, which it must not keep
// after the call. The part's policy for the call is c.policy when c.keyed,
// its own otherwise.
type partEngine interface {
	// policyFunc returns the part's PolicyFunc resolver; nil for a part of
	// one policy.
	policyFunc() *policyFunc
	// own returns the part's own policy in its engine's numbers: its limit,
	// and its interval (a schedule's), its window or its lease TTL (ns),
	// or its calendar period, with its zone.
	own() partRate
	// unit returns the ns one unit of the part's param makes in its rule:
	// 1 for a schedule (its interval, in ns), 0 for any other.
	unit() int64
	// observer returns the part's observer.
	observer() *observer
	// clock returns the clock the part decides on.
	clock() *clockBase
	// segmented reports whether the part's keys name their policy in its
	// table (a calendar window's or a sliding counter's built
	// WithPolicyFunc); tableKey then returns the key as its table keeps it
	// under the policy r.
	segmented() bool
	tableKey(key string, r partRate) string

	// shardLock sets c's shard to the one that holds key and returns its
	// lock, which the caller takes.
	shardLock(c *partCall, key string) *sync.Mutex
	// peek moves c's shard to the part's time, reads key and reports
	// whether cost units fit, setting c.now, c.where and c.allowed.
	peek(c *partCall, key string, cost int) bool
	// commit takes cost when the call is allowed (writing nothing for a
	// peek, cost 0, or a denial, unless the key must be written back) and
	// sets c.res to the part's Result as its own Allow would: a part that
	// would have allowed a denied call reports its state untouched, with
	// nothing to wait for. It sets c.nextOut, when c.wantNext, to the
	// part's next unit where its Result does not tell it (see
	// Decision.partNext), and c.lease, when c.leased, to the Lease that
	// holds a concurrency part's units.
	commit(c *partCall, key string, cost int, allowed bool)
	// settle takes d more units from key (gives -d back when negative) as
	// the part's Settle would, and returns its Result.
	settle(c *partCall, key string, d int64, a adjustment) Result
	// reset returns key to full.
	reset(c *partCall, key string)
}

// policyFunc returns part i's PolicyFunc resolver; nil for a part of one
// policy.
func (l *localParts) policyFunc(i int) *policyFunc { return l.parts[i].e.policyFunc() }

// own returns part i's own policy in its engine's numbers (see
// partEngine.own).
func (l *localParts) own(i int) partRate { return l.parts[i].own }

// unit returns the ns one unit of part i's param makes in its rule (see
// partEngine.unit).
func (l *localParts) unit(i int) int64 { return l.parts[i].e.unit() }

// observer returns part i's observer.
func (l *localParts) observer(i int) *observer { return l.parts[i].e.observer() }

// tableKeys returns the parts' keys, keys, as their tables keep them for a
// call whose parts' policies are rates (nil: each part's own): keys
// itself, or a copy when a part's keys name their policy (see
// partEngine.segmented).
func (l *localParts) tableKeys(keys []string, rates []partRate) []string {
	var out []string
	for i := range l.parts {
		p := &l.parts[i]
		if !p.segmented {
			continue
		}
		r := p.own
		if rates != nil {
			r = rates[i]
		}
		if out == nil {
			out = append([]string(nil), keys...)
		}
		out[i] = p.e.tableKey(keys[i], r)
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
		if l.parts[i].segmented {
			return true
		}
	}
	return false
}

// newLocalParts returns the engine of a Composite of limiters, or an error
// naming the first that is not an in-process limiter of this package.
func newLocalParts(limiters []Limiter) (*localParts, error) {
	l := &localParts{parts: make([]localPart, len(limiters))}
	for i, lim := range limiters {
		p := &l.parts[i]
		e, ok := engineOf(lim)
		le, local := e.(partLimiter)
		if !ok || !local {
			return nil, fmt.Errorf("part %d is a %T, not a *TokenBucket, *GCRA, *FixedWindow, *SlidingLog, *SlidingCounter, *CalendarWindow or *Concurrency", i, lim)
		}
		if p.e = le.part(); p.e == nil {
			return nil, fmt.Errorf("part %d is a nil or zero-value %T", i, lim)
		}
		p.own, p.segmented, p.base = p.e.own(), p.e.segmented(), p.e.clock()
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

// partCall is one part's share of a call: its time, where its key is, the
// part's policy for the call, where its Result goes, and what its engine
// read between peek and commit (each engine uses the fields it needs).
type partCall struct {
	reading int64     // the part's clock reading, in its time base
	at      time.Time // the clock's reading, when it is not the system clock
	now     int64     // the part's shard's time

	mu     *sync.Mutex // the shard's
	shard  any         // the part's table's shard that holds the key (a *tableShard[S])
	idx    int         // the shard's index in its table, when the engine needs it
	where  where       // where the shard holds the key
	shared bool        // another part's key falls on the same shard

	keyed    bool          // the part decides by policy, not by its own
	policy   partRate      // the part's key's policy for the call, when keyed
	res      Result        // the part's Result, which commit sets
	wantNext bool          // the call asks for the part's next unit
	nextOut  time.Duration // the part's next unit, which commit sets when wantNext (0 if it does not tell it)
	leased   bool          // the call is an Acquire
	lease    Lease         // a concurrency part's Lease, which commit sets when leased

	allowed   bool
	converts  bool         // a PolicyFunc schedule's key is read at another interval
	cur, next int64        // a schedule's tat in force and after the call
	win, nwin openWindow   // a window's window open and after the call
	held      *heldUnits   // a Concurrency's leases of the key, swept
	log       entryLog     // a sliding log's log of the key, swept
	ncur, nnx counterState // a sliding counter's state at now and after the call
	nleft     int64        // a sliding counter's units left at now
}

// callBuffer holds a call's partCalls and the order of their locks, one
// of each per part. The engines are reached through partEngine, which the
// compiler cannot see through, so a partCall handed to one escapes: the
// buffers live on the heap, and localParts keeps them in a sync.Pool.
type callBuffer struct {
	calls []partCall
	order []int
}

// get returns a cleared callBuffer for l's parts.
func (l *localParts) get() *callBuffer {
	if b, ok := l.buffers.Get().(*callBuffer); ok {
		return b
	}
	n := len(l.parts)
	return &callBuffer{calls: make([]partCall, n), order: make([]int, n)}
}

// put clears b, so that the pool keeps no key's shard, log, leases or
// Lease, and returns it to the pool.
func (l *localParts) put(b *callBuffer) {
	clear(b.calls)
	l.buffers.Put(b)
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
	buf := l.get()
	parts, calls, order := l.parts, buf.calls, buf.order
	// Equal lengths spare the loops their bounds checks.
	calls, keys, costs, results = calls[:len(parts)], keys[:len(parts)], costs[:len(parts)], results[:len(parts)]
	l.lock(keys, calls, order)
	allowed := true
	for i := range parts {
		c := &calls[i]
		if rates != nil {
			c.keyed, c.policy = true, rates[i]
		}
		c.wantNext, c.leased = nexts != nil, leased
		allowed = parts[i].e.peek(c, keys[i], costs[i]) && allowed
	}
	for i := range parts {
		parts[i].e.commit(&calls[i], keys[i], costs[i], allowed)
	}
	unlock(calls, order)
	var lease Lease
	for i := range calls {
		c := &calls[i]
		results[i] = c.res
		if nexts != nil {
			nexts[i] = c.nextOut
		}
		if c.lease.holder != nil {
			lease = c.lease
		}
	}
	l.put(buf)
	return lease
}

// settle takes changes[i] more units from keys[i] on every part i (gives
// -changes[i] back when negative), as the part's Settle would for a cost
// that much above what was taken, each part by its policy in rates (nil:
// each part's own), and fills results with each part's Result. Each
// change is valid for its part: at least minus its limit (or 2^52 for a
// PolicyFunc part), at most 2^52. A Concurrency part is left as it is,
// whatever its change, and reports its state.
func (l *localParts) settle(keys []string, changes []int, a adjustment, rates []partRate, results []Result) {
	buf := l.get()
	calls, order := buf.calls, buf.order
	l.lock(keys, calls, order)
	for i := range calls {
		c := &calls[i]
		if rates != nil {
			c.keyed, c.policy = true, rates[i]
		}
		results[i] = l.parts[i].e.settle(c, keys[i], int64(changes[i]), a)
	}
	unlock(calls, order)
	l.put(buf)
}

// reset returns every part's key to full: a Concurrency part's holds no
// lease any more.
func (l *localParts) reset(keys []string) {
	buf := l.get()
	calls, order := buf.calls, buf.order
	l.lock(keys, calls, order)
	for i := range calls {
		l.parts[i].e.reset(&calls[i], keys[i])
	}
	unlock(calls, order)
	l.put(buf)
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
		c.mu = p.e.shardLock(c, keys[i])
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

// lockPart finds the shard of t that holds key for a part's call c, keeps
// it in c for peek, and returns its lock for localParts.lock to take.
func lockPart[V any](t *keyTable[V], c *partCall, key string) *sync.Mutex {
	sh := t.shard(key)
	c.shard = sh
	return &sh.mu
}

// readPart moves c's shard of t (locked) to the part's time, at most
// maxNow, sets c.now and c.where, and returns key's state there.
func readPart[V any](t *keyTable[V], c *partCall, key string, maxNow int64) V {
	sh := c.shard.(*tableShard[V])
	c.now = t.advance(sh, c.reading, maxNow)
	var st V
	st, c.where = sh.lookup(key)
	return st
}
