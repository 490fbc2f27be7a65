package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Prefetch wraps a rate limiter whose state is shared by a fleet, typically
// a Redis one, and lets each replica decide a hot key's calls in process: it
// takes a block of units from the shared key in one call, spends them
// locally, one call after another, and gives back what it did not use. The
// fleet never admits more than the shared key would (see Exactness below;
// callers' own give-backs aside, see Adjustments).
// It is opt-in: a key is leased only while it is hot on this replica, and
// every other call goes to the backend as it would without the Prefetch.
//
// Backends: RedisTokenBucket, RedisGCRA and RedisFixedWindow, and their
// in-process twins TokenBucket, GCRA and FixedWindow (for tests on a fake
// clock, or to share one in-process limiter between goroutines of one
// process at in-process speed), built with or without WithPolicyFunc. Any
// other Limiter (a Composite, a decorator, a sliding, calendar or
// concurrency limiter, a Limiter of another package) is refused: their
// units do not come back in a way a block can follow.
//
// Hot keys: a key is hot while this replica has seen at least HotCalls
// calls on it within one HotSpan (this span or the one before): with the
// defaults, from about 80 calls a second on the key by this replica (8 in
// 100 ms); a key called less often stays on the backend, so lower
// HotCalls or lengthen HotSpan to lease slower keys. Its calls
// then spend from the replica's block for the key, except that a token
// bucket's or GCRA's key is leased only where it pays for the block's
// decay (below): while this replica's calls on it come at least as fast
// as its units come back, or at least 4 of them wait on the backend at
// once (callers whose pace the round trip sets). When the block cannot
// cover a call's n, one caller (the taker) takes a new block with one
// backend call for the key while the others that need one wait for it (a
// context that ends first returns an error wrapping ErrBackend and the
// context's error); a block's remainder smaller than n is dropped, and
// comes back as the block decays or its window ends. Each block holds
// between 2 and Limit/MaxShare units, MinBlock at first (a call whose n is
// larger takes a block of n, for it to spend whole): the size doubles
// after a block used up by calls, halves after one that decayed half
// unused, and halves when the backend denies a take. A denied take sends
// the key's calls straight to the backend for a back-off (the take's
// RetryAfter, at least a HotSpan, doubling while takes keep being denied,
// up to 16 HotSpans; 16 HotSpans after a block of 2 decayed unused), and
// the call that needed the block is decided by the backend, so its
// Decision, RetryAfter included, is the shared key's own. A direct call
// allowed with at least a block's size left ends the back-off. The
// Prefetch never denies a call itself.
//
// Exactness, token bucket and GCRA (capacity C, one unit back every T ns,
// r = 1/T): let A be the bucket's level plus the units every replica holds
// unspent. A take moves B units from the level to a replica (A is
// unchanged); a call spends units from a block; refill adds to the level
// at r only while it is below C. A block taken by a call sent at t0 may
// have spent at most B − (t − t0)/T units by t: it decays at r from the
// time the take was sent, before the server took the units, so
// conservatively. While anything is held, A therefore falls at least as
// fast as refill raises it, so A never exceeds C, and the units allowed in
// any span [a, b], by blocks and by the backend together, are at most C +
// r·(b − a): the shared bucket's own bound. A block so lives at most B·T.
// The arithmetic is in integer ns (T is the policy's own, from the take's
// Decision). A give-back refunds only the units that are still undecayed
// GiveBackGrace after it is sent (Refund on a token bucket or GCRA adds
// exactly the units it is given, and never above C), which is exact when
// the server applies it within GiveBackGrace (the give-back's context
// carries that deadline; an in-process backend applies it at once).
//
// Exactness, fixed window (limit L): a window's count only grows until the
// window ends, so a block holds until the window that took it ends: its
// units are spent only before the take's send time plus the take's
// ResetAfter (less 1 ms on Redis, whose PTTL is whole milliseconds and may
// round the time left up), which is no later than the window's true end.
// The units of a window are so never more than L. Unspent units at the
// window's end are dropped; a give-back before then refunds them with
// TakenAt the take's reply, so that it never lands in a later window.
//
// Clocks: the Prefetch measures a block's age on its own clock (an
// in-process backend's own clock; on Redis, Clock, the system clock by
// default, whose monotonic reading it uses). Only the rate of the clocks
// matters, not their offset: a block is bounded by its age, which starts
// before the server's time of the take. The argument assumes that the
// client's clock does not run slower than the server's; a client clock
// slower by a fraction e lets a block live e·B·T too long, at most e·B
// units (for e = 10^-4 and B = 10^6, 100 units). A clock that steps back
// makes time stand still for the key until it catches up. On a token
// bucket or GCRA built WithCallerClock(c), the server's clock of this
// argument is c: give the Prefetch c as Clock (or a clock no slower); a
// RedisFixedWindow's windows run on the server's key expiry, in real time,
// whatever its clock, so the Prefetch's Clock must then run no slower than
// real time.
//
// The price: units a replica holds are unavailable to the others until
// they are spent, given back or decayed, at most a block's life, B·T for a
// token bucket or GCRA, the window's end for a fixed window. At full load
// the fleet so admits up to about replicas × Limit/MaxShare units less
// than the bare key over a block's life, and a denial's RetryAfter, the
// shared key's own, does not count the units other replicas hold, which
// may be spent, given back or decayed sooner. Blocks taken at full load
// decay while they wait to be spent: the back-off above keeps a key whose
// takes are denied on the backend, so that steady full load costs little
// (see the package's tests and bench/README.md for figures).
//
// Decisions: a call spent from a block answers Allowed, with Limit the
// key's policy's, Remaining the units left in this replica's block (a
// lower bound of what the key holds: the shared key may hold more),
// RetryAfter 0, and ResetAfter the take's ResetAfter aged since the take
// (a token bucket or GCRA: an upper bound if no other replica took since,
// as the whole block counts as used) or the time left in the block's
// window (fixed window). Its Source is FromBackend, since its units were
// taken from the backend: it may be refunded or settled. Every other call
// answers the backend's own Decision.
//
// Adjustments: Refund and Settle give units back to the key's live block,
// up to the units it has spent (they are then spendable again, as far as
// the block has not decayed), and forward the rest to the backend; on a
// fixed window, the block takes back only units of calls made since its
// take (a TakenAt before it goes to the backend, which ignores it once its
// window has changed). A Settle's extra cost is spent from the block when
// it holds enough and the cost is at most the key's limit; anything else
// is forwarded (so the backend's WithMaxSettle applies). WithToken does not make a
// give-back the block takes idempotent: the block takes each one. Reset
// drops this replica's block and forwards; other replicas' blocks stay
// valid until spent or decayed, so a Reset may let the fleet admit them on
// top of a full key. Callers' give-backs (Refund, or Settle below the
// units taken) while replicas hold blocks may let the fleet exceed the
// bound of Exactness, net of the units given back, by up to the units the
// replicas hold then (at most a block each): the backend caps a token
// bucket's level at C, and takes a window's count no lower than 0, not
// knowing them. On a fixed window, give-backs WithTakenAt their call's
// time cannot (the backend ignores those of an earlier window).
//
// Memory and give-backs: at most MaxKeys keys are tracked; a key not
// called for two HotSpans is forgotten and its block given back by a
// later call on any key (a sweep once per HotSpan, on the calling
// goroutine, of at most 32 give-backs; a failed give-back leaves the
// units to decay). No goroutine is started. Close gives back every key's
// block; after it, every call goes straight to the backend.
//
// Stacks: put the Prefetch directly around the backend, inside a Guard, a
// DenyCache and a Shadow: Guard(Prefetch(redis)). When the backend fails
// while blocks are held, the blocks keep being spent until they decay or
// expire; then a take fails, its error (ErrBackend) reaches the Guard,
// which answers by its failure policy; the key's next call goes to the
// backend, to learn its policy again. Hooks (Hooks): the Prefetch reports one event per call
// (each call it answers from a block, each it forwards), and every
// adjustment to AdjustHooks; the backend's own hooks see its takes (one
// call of the block's size; a denied take is a denial there, although the
// call that needed the block is then forwarded), the calls and
// adjustments forwarded to it, and the Prefetch's give-backs, as Refunds
// the Prefetch does not report. A nil ctx is
// an error. A Prefetch is safe for concurrent use. Create one with
// NewPrefetch.
type Prefetch struct {
	backend  decorated
	window   bool // the backend is a fixed window
	redis    bool // the backend keeps its state on Redis
	hooks    Hooks
	adjust   AdjustHooks
	name     string
	base     clockBase
	hotCalls int64
	hotSpan  int64 // ns
	minBlock int64
	maxShare int64
	maxKeys  int64
	grace    int64 // ns

	// ageClock is the clock on which a Redis backend turns a TakenAt
	// into an age: its WithCallerClock clock; nil for the system clock.
	ageClock Clock

	keys      sync.Map // key → *leaseKey
	count     atomic.Int64
	nextSweep atomic.Int64
	closed    atomic.Bool
}

// PrefetchConfig configures a Prefetch. The zero value means 8 calls within
// 100 ms make a key hot, blocks of 16 units to Limit/16, 10 000 keys, a
// give-back grace of 50 ms, no hooks and the backend's clock.
type PrefetchConfig struct {
	// HotCalls is how many calls on a key within one HotSpan make it hot;
	// 0 means 8. HotCalls / HotSpan is the rate from which this replica
	// leases a key: 80 calls a second with the defaults.
	HotCalls int
	// HotSpan is the span over which calls are counted; 0 means 100 ms.
	// A key not called for two HotSpans is cold again and its block is
	// given back.
	HotSpan time.Duration
	// MinBlock is the size of a key's first block (never more than
	// Limit/MaxShare); 0 means 16. Blocks shrink to 2 at the least.
	MinBlock int
	// MaxShare bounds a block to the key's Limit/MaxShare units; 0 means
	// 16. A key whose Limit/MaxShare is below 2 is never leased.
	MaxShare int
	// MaxKeys is the most keys tracked at once; 0 means 10 000. Calls on
	// other keys go to the backend.
	MaxKeys int
	// GiveBackGrace is how long a give-back of a token bucket's or GCRA's
	// units may take to reach the server: the units that decay by then
	// are not given back; 0 means 50 ms.
	GiveBackGrace time.Duration
	// Hooks receives every call (see Prefetch); nil means NopHooks. When
	// it implements AdjustHooks, it also receives every Refund, Settle
	// and Reset.
	Hooks Hooks
	// Name names the Prefetch in what it reports to Hooks; "" means
	// "Prefetch".
	Name string
	// Clock measures blocks' ages for a Redis backend; nil means the
	// system clock. An in-process backend's own clock is always used, and
	// a Clock for one is an error.
	Clock Clock
}

// NewPrefetch returns a Prefetch around backend: a TokenBucket, GCRA,
// FixedWindow, RedisTokenBucket, RedisGCRA or RedisFixedWindow, built by
// its constructor. It returns an error wrapping ErrInvalidConfig for a nil
// backend, any other backend (naming its type), one not built by its
// constructor, a negative field of cfg, or a Clock with an in-process
// backend.
func NewPrefetch(backend Limiter, cfg PrefetchConfig) (*Prefetch, error) {
	const kind = "NewPrefetch"
	if isNil(backend) {
		return nil, fmt.Errorf("%w: %s: nil backend", ErrInvalidConfig, kind)
	}
	l := &Prefetch{}
	var clock Clock
	e, ok := engineOf(backend)
	if !ok || e.kindOf().blocks() == noBlocks {
		return nil, fmt.Errorf("%w: %s: a %T cannot be leased; the backend must be a TokenBucket, GCRA, FixedWindow, RedisTokenBucket, RedisGCRA or RedisFixedWindow", ErrInvalidConfig, kind, backend)
	}
	l.window = e.kindOf().blocks() == blocksByWindow
	if r, remote := e.(remoteEngine); remote {
		l.redis = true
		if rl := r.remote(); rl != nil {
			l.ageClock = rl.clock
		}
	} else if le, local := e.(localEngine); local && le.clockBase() != nil {
		clock = le.clockBase().clock
	}
	if observerOf(backend) == nil {
		return nil, fmt.Errorf("%w: %s: the backend, a %T, was not built by its constructor", ErrInvalidConfig, kind, backend)
	}
	switch {
	case cfg.HotCalls < 0:
		return nil, fmt.Errorf("%w: %s: HotCalls %d must be >= 0", ErrInvalidConfig, kind, cfg.HotCalls)
	case cfg.HotSpan < 0:
		return nil, fmt.Errorf("%w: %s: HotSpan %v must be >= 0", ErrInvalidConfig, kind, cfg.HotSpan)
	case cfg.MinBlock < 0:
		return nil, fmt.Errorf("%w: %s: MinBlock %d must be >= 0", ErrInvalidConfig, kind, cfg.MinBlock)
	case cfg.MaxShare < 0:
		return nil, fmt.Errorf("%w: %s: MaxShare %d must be >= 0", ErrInvalidConfig, kind, cfg.MaxShare)
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("%w: %s: MaxKeys %d must be >= 0", ErrInvalidConfig, kind, cfg.MaxKeys)
	case cfg.GiveBackGrace < 0:
		return nil, fmt.Errorf("%w: %s: GiveBackGrace %v must be >= 0", ErrInvalidConfig, kind, cfg.GiveBackGrace)
	case !l.redis && !isNil(cfg.Clock):
		return nil, fmt.Errorf("%w: %s: Clock applies to Redis backends only; a %T's own clock is used", ErrInvalidConfig, kind, backend)
	}
	if l.redis {
		clock = cfg.Clock
		if isNil(clock) {
			clock = systemClock{}
		}
	}
	l.backend = decorate(backend)
	l.hooks = activeHooks(cfg.Hooks)
	l.adjust = activeAdjustHooks(cfg.Hooks)
	l.name = cmp.Or(cfg.Name, "Prefetch")
	l.base = newClockBase(clock)
	l.hotCalls = int64(cmp.Or(cfg.HotCalls, 8))
	l.hotSpan = min(int64(cmp.Or(cfg.HotSpan, 100*time.Millisecond)), maxSpan/64)
	l.minBlock = int64(cmp.Or(cfg.MinBlock, 16))
	l.maxShare = int64(cmp.Or(cfg.MaxShare, 16))
	l.maxKeys = int64(cmp.Or(cfg.MaxKeys, 10_000))
	l.grace = min(int64(cmp.Or(cfg.GiveBackGrace, 50*time.Millisecond)), maxSpan)
	return l, nil
}

// leaseKey is what a Prefetch knows of one key. Its fields are guarded by
// mu.
type leaseKey struct {
	mu        sync.Mutex
	gone      bool  // forgotten: a caller looks the key up again
	last      int64 // the latest time read for the key: time stands still before it
	spanStart int64 // the start of the span whose calls are counted
	calls     int64 // calls in the span
	prevCalls int64 // calls in the span before
	// limit and unit are the key's policy as its latest Decision told:
	// its Limit, and ns per unit (token bucket, GCRA; 0 for a window).
	limit, unit int64
	known       bool  // limit and unit are known
	size        int64 // the next block's size; 0 until the first take
	directUntil int64 // calls go to the backend until then
	backoff     int64 // the latest back-off, ns
	inFlight    int64 // backend calls on the key in flight
	blk         *block
	taking      chan struct{} // closed when the take in flight ends; nil when none
}

// block is the units of one take.
type block struct {
	t0      int64 // when the take was sent
	t1      int64 // when its answer came back
	b       int64 // units taken
	next    int64 // index of the next unit to spend (decayed ones skipped)
	spent   int64 // units spent, less those given back to it
	arrived int64 // units spendable when the take's answer came back
	unit    int64 // ns per unit; 0 for a window
	end     int64 // bucket: t0 + b·unit, all decayed; window: its local expiry
	resetAt int64 // when the key would be full again as the take saw it
	dec     Decision
}

// first returns the index of the first unit of blk still spendable at
// now: decayed units are skipped (token bucket, GCRA); blk.b when none is
// (a window that has expired).
func (blk *block) first(now int64) int64 {
	if blk.unit == 0 {
		if now >= blk.end {
			return blk.b
		}
		return blk.next
	}
	age := now - blk.t0
	if age <= 0 {
		return blk.next
	}
	if age >= blk.end-blk.t0 {
		return blk.b
	}
	decayed := (age + blk.unit - 1) / blk.unit // < b: age < b·unit
	return max(blk.next, decayed)
}

// usable returns the units blk can still spend at now.
func (blk *block) usable(now int64) int64 { return max(blk.b-blk.first(now), 0) }

// spend spends n units of blk at now, if it has them, and returns the
// Decision of the call.
func (blk *block) spend(now int64, n int64) (Decision, bool) {
	f := blk.first(now)
	if f+n > blk.b {
		return Decision{}, false
	}
	blk.next, blk.spent = f+n, blk.spent+n
	return blk.decision(now), true
}

// decision returns the Decision of a call answered from blk at now.
func (blk *block) decision(now int64) Decision {
	d := blk.dec
	res := Result{Allowed: true, Limit: blk.dec.Policy.Limit, Remaining: int(blk.usable(now))}
	next := time.Duration(blk.unit) // the key's next unit, at most one unit's time away
	if blk.unit == 0 {
		res.ResetAfter = time.Duration(max(blk.end-now, 0))
		next = res.ResetAfter // the block's window ends
	} else {
		res.ResetAfter = time.Duration(max(blk.resetAt-now, 0))
	}
	d.Result, d.Enforced, d.Source = res, res, FromBackend
	d.Parts, d.WouldDeny = nil, false
	d.next, d.nextSet = next, true
	return d
}

// Allow allows from the key's block when it is leased and asks the backend
// otherwise. See Prefetch.
func (l *Prefetch) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := l.Decide(ctx, key, n)
	return d.Result, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider and Prefetch).
func (l *Prefetch) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if l == nil || !l.backend.built() {
		return Decision{}, notBuilt("Prefetch")
	}
	if ctx == nil {
		return Decision{}, fmt.Errorf("ratelimit: Prefetch: %w", errNilContext)
	}
	start := l.base.elapsed()
	d, err := l.decide(ctx, key, n, start)
	if l.hooks != nil {
		l.hooks.Decided(Event{
			Limiter: l.name, Key: l.backend.keys.event(l.hooks, key), Cost: n, Decision: d, Err: err,
			Latency: time.Duration(l.base.elapsed() - start),
		})
	}
	return d, err
}

// Acquire decides as Decide does and returns a Lease that holds nothing:
// the backends of a Prefetch are rate limiters (see Acquirer).
func (l *Prefetch) Acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	d, err := l.Decide(ctx, key, n)
	return Lease{}, d, err
}

// Policies returns the backend's policies for key (see Decider).
func (l *Prefetch) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if l == nil || !l.backend.built() {
		return nil, notBuilt("Prefetch")
	}
	return l.backend.policies(ctx, key)
}

// decide is Decide for a built Prefetch and a context, at now.
func (l *Prefetch) decide(ctx context.Context, key string, n int, now int64) (Decision, error) {
	if n <= 0 || l.closed.Load() || l.backend.keys.tooLong(key) {
		// A key the backend refuses is refused there, and never tracked.
		return l.backend.decide(ctx, key, n)
	}
	l.maybeSweep(ctx, now)
	k := l.keyOf(key, now)
	if k == nil {
		return l.backend.decide(ctx, key, n)
	}
	cost := int64(n)
	for attempt := 0; ; attempt++ {
		k.mu.Lock()
		if k.gone {
			k.mu.Unlock()
			if k = l.keyOf(key, now); k == nil {
				return l.backend.decide(ctx, key, n)
			}
			continue
		}
		now = max(now, k.last)
		k.last = now
		if attempt == 0 {
			k.counted(now, l.hotSpan)
		}
		if blk := k.blk; blk != nil {
			if d, ok := blk.spend(now, cost); ok {
				k.mu.Unlock()
				return d, nil
			}
		}
		maxBlock := k.limit / l.maxShare
		if !k.known || maxBlock < 2 || cost > k.limit || now < k.directUntil || attempt >= 3 ||
			(k.calls < l.hotCalls && k.prevCalls < l.hotCalls) || !k.pays(now, l.hotSpan) {
			k.mu.Unlock()
			return l.direct(ctx, key, n, k)
		}
		if ch := k.taking; ch != nil {
			k.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return Decision{}, backendErr(fmt.Errorf("ratelimit: Prefetch: waiting for a block of %s: %w", l.backend.keys.quote(key), ctx.Err()))
			}
			now = l.base.elapsed()
			continue
		}
		size := k.nextSize(now, l.minBlock, maxBlock, l.hotSpan)
		if now < k.directUntil {
			k.mu.Unlock()
			return l.direct(ctx, key, n, k)
		}
		size = min(max(size, cost), k.limit)
		ch := make(chan struct{})
		k.taking = ch
		k.inFlight++
		k.mu.Unlock()
		return l.take(ctx, key, cost, size, k, ch)
	}
}

// counted counts a call at now towards the key's heat.
func (k *leaseKey) counted(now, span int64) {
	if now-k.spanStart >= span {
		k.prevCalls = k.calls
		if now-k.spanStart >= 2*span {
			k.prevCalls = 0
		}
		k.spanStart, k.calls = now, 0
	}
	k.calls++
}

// pays reports whether prefetching the key is worth its decay: a fixed
// window's blocks do not decay; a token bucket's or GCRA's block loses a
// unit every unit ns while it is held, so this replica's calls on the key
// must come at least as fast as its units come back (over the span
// before, of span ns, or over the current one so far, counted as at least
// an eighth of a span), so that decay takes at most half of what a block
// holds, or at least 4 of them be waiting on the backend at once (callers
// whose pace the round trip sets, and whose demand it hides).
func (k *leaseKey) pays(now, span int64) bool {
	if k.unit == 0 || k.inFlight >= 4 {
		return true
	}
	fast := func(calls, in int64) bool {
		return calls > 0 && (k.unit > maxSpan/calls || calls*k.unit >= in)
	}
	return fast(k.calls, max(now-k.spanStart, span/8)) || fast(k.prevCalls, span)
}

// nextSize returns the size of the key's next block, within [2,
// maxBlock]: the first is minBlock; after a block that calls used up (at
// least half of what it held when it came back spent), twice the last;
// after one that decayed, half, and a block of 2 that decayed keeps the
// key on the backend for 16 spans (span ns).
func (k *leaseKey) nextSize(now, minBlock, maxBlock, span int64) int64 {
	size := k.size
	switch blk := k.blk; {
	case size == 0:
		size = minBlock
	case blk != nil && 2*blk.spent >= blk.arrived:
		size *= 2
	case blk != nil && blk.usable(now) == 0:
		if size <= 2 {
			k.directUntil = now + 16*span
		}
		size /= 2
	}
	size = min(max(size, 2), maxBlock)
	k.size = size
	return size
}

// take takes a block of size units for key, on which a call of cost
// waits, as k's taker (ch), and decides the call.
func (l *Prefetch) take(ctx context.Context, key string, cost, size int64, k *leaseKey, ch chan struct{}) (Decision, error) {
	t0 := l.base.elapsed()
	td, err := l.backend.decide(ctx, key, int(size))
	t1 := max(l.base.elapsed(), t0)
	k.mu.Lock()
	k.taking = nil
	k.inFlight--
	close(ch)
	if err != nil {
		k.known = false // ask the backend again for the key's policy
		k.mu.Unlock()
		if errors.Is(err, ErrCaller) {
			return l.direct(ctx, key, int(cost), k)
		}
		// The backend failed: the call would fail the same way.
		return td, err
	}
	if !td.Allowed {
		k.learn(&td, l.window)
		k.size = max(size/2, 1)
		k.backoff = min(max(int64(td.RetryAfter), l.hotSpan, 2*k.backoff), 16*l.hotSpan)
		k.directUntil = t1 + k.backoff
		k.mu.Unlock()
		return l.direct(ctx, key, int(cost), k)
	}
	k.backoff = 0
	blk := l.newBlock(&td, size, t0, t1)
	if blk == nil {
		// Not the shape the Prefetch knows (cannot happen with its
		// backends): give the units back and decide directly.
		k.known = false
		k.mu.Unlock()
		l.refund(ctx, key, size, t1)
		return l.direct(ctx, key, int(cost), k)
	}
	k.learn(&td, l.window)
	now := max(t1, k.last)
	k.last = now
	blk.arrived = blk.usable(now)
	d, ok := blk.spend(now, cost)
	closed := l.closed.Load()
	if !closed {
		k.blk = blk
	}
	k.mu.Unlock()
	if closed {
		l.giveBack(ctx, key, blk)
	}
	if ok {
		return d, nil
	}
	// The block decayed on its way: decide directly; the next block is
	// larger, as this one counts as used up.
	return l.direct(ctx, key, int(cost), k)
}

// newBlock returns the block of a take of size units answered td, sent at
// t0 and answered at t1; nil when td is not of the shape of the
// backend's.
func (l *Prefetch) newBlock(td *Decision, size, t0, t1 int64) *block {
	if len(td.rules) != 1 || td.Policy.Limit <= 0 {
		return nil
	}
	blk := &block{t0: t0, t1: t1, b: size, unit: td.rules[0].unit, dec: *td}
	if l.window {
		if blk.unit != 0 {
			return nil
		}
		left := int64(td.ResetAfter)
		if l.redis {
			left -= int64(time.Millisecond)
		}
		blk.end = t0 + max(left, 0)
		blk.resetAt = blk.end
		return blk
	}
	if blk.unit <= 0 || size > maxSpan/blk.unit {
		return nil
	}
	blk.end = t0 + size*blk.unit
	blk.resetAt = t1 + int64(td.ResetAfter)
	return blk
}

// learn notes the key's policy from a Decision of the backend.
func (k *leaseKey) learn(d *Decision, window bool) {
	if len(d.rules) != 1 || d.Policy.Limit <= 0 || window != (d.rules[0].unit == 0) {
		k.known = false
		return
	}
	k.limit, k.unit, k.known = int64(d.Policy.Limit), d.rules[0].unit, true
}

// direct decides n for key on the backend and notes what its answer tells
// of the key (k, when not nil).
func (l *Prefetch) direct(ctx context.Context, key string, n int, k *leaseKey) (Decision, error) {
	if k == nil {
		return l.backend.decide(ctx, key, n)
	}
	k.mu.Lock()
	k.inFlight++
	k.mu.Unlock()
	d, err := l.backend.decide(ctx, key, n)
	k.mu.Lock()
	k.inFlight--
	if err == nil {
		k.learn(&d, l.window)
		if d.Allowed && k.directUntil > 0 && int64(d.Remaining) >= max(k.size, 1) {
			k.directUntil, k.backoff = 0, 0 // room for a block again
		}
	}
	k.mu.Unlock()
	return d, err
}

// keyOf returns the state of key, new if needed; nil when MaxKeys are
// tracked already.
func (l *Prefetch) keyOf(key string, now int64) *leaseKey {
	if v, ok := l.keys.Load(key); ok {
		return v.(*leaseKey)
	}
	if l.count.Load() >= l.maxKeys {
		return nil
	}
	v, loaded := l.keys.LoadOrStore(key, &leaseKey{spanStart: now, last: now})
	if !loaded {
		l.count.Add(1)
	}
	return v.(*leaseKey)
}

// maxGiveBacks bounds the give-backs of one sweep.
const maxGiveBacks = 32

// maybeSweep forgets, once per HotSpan, the keys not called for two
// HotSpans, and gives back their blocks.
func (l *Prefetch) maybeSweep(ctx context.Context, now int64) {
	next := l.nextSweep.Load()
	if now < next || !l.nextSweep.CompareAndSwap(next, now+l.hotSpan) {
		return
	}
	type held struct {
		key string
		blk *block
	}
	var back []held
	l.keys.Range(func(kv, v any) bool {
		k := v.(*leaseKey)
		k.mu.Lock()
		if k.taking == nil && now-k.last >= 2*l.hotSpan {
			k.gone = true
			if k.blk != nil && k.blk.usable(now) > 0 {
				back = append(back, held{kv.(string), k.blk})
			}
			k.blk = nil
			l.keys.Delete(kv)
			l.count.Add(-1)
		}
		k.mu.Unlock()
		return len(back) < maxGiveBacks
	})
	for _, h := range back {
		l.giveBack(ctx, h.key, h.blk)
	}
}

// giveBack gives back to the backend the units of blk, taken for key and
// no longer spent from, that are still undecayed: those a token bucket or
// GCRA still holds GiveBackGrace from now, those of a window that has not
// ended. It returns the backend's error.
func (l *Prefetch) giveBack(ctx context.Context, key string, blk *block) error {
	now := l.base.elapsed()
	var units int64
	if blk.unit == 0 {
		units = blk.usable(now)
	} else {
		units = blk.usable(now + l.grace)
	}
	if units <= 0 {
		return nil
	}
	return l.refund(ctx, key, units, blk.t1)
}

// refund refunds units to key on the backend, taken by a call answered at
// taken, within GiveBackGrace.
func (l *Prefetch) refund(ctx context.Context, key string, units, taken int64) error {
	if ctx == nil {
		ctx = context.Background()
	}
	a := l.backend.adjust
	if a == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(l.grace))
	defer cancel()
	var at time.Time
	if l.redis {
		// A Redis limiter turns TakenAt into an age on its caller's
		// clock, or on the system's monotonic clock.
		at = l.ageNow().Add(-time.Duration(l.base.elapsed() - taken))
	} else {
		at = l.base.start.Add(time.Duration(taken))
	}
	_, err := a.Refund(ctx, key, int(units), TakenAt(at))
	return err
}

// readingOf returns t as a reading of the Prefetch's clock: on Redis, by
// its age as the backend measures it (see refund).
func (l *Prefetch) readingOf(t time.Time) int64 {
	if l.redis {
		return l.base.elapsed() - int64(l.ageNow().Sub(t))
	}
	return int64(t.Sub(l.base.start))
}

// ageNow returns the time from which a Redis backend measures a TakenAt's
// age.
func (l *Prefetch) ageNow() time.Time {
	if l.ageClock != nil {
		return l.ageClock.Now()
	}
	return time.Now()
}

// Close gives back every key's block to the backend and makes every later
// call go straight to the backend. It returns the backends' errors of the
// give-backs, joined (a failed give-back leaves the units to decay). It is
// safe to call more than once, and concurrently with calls.
func (l *Prefetch) Close(ctx context.Context) error {
	if l == nil || !l.backend.built() {
		return notBuilt("Prefetch")
	}
	if ctx == nil {
		return fmt.Errorf("ratelimit: Prefetch: %w", errNilContext)
	}
	l.closed.Store(true)
	var errs []error
	l.keys.Range(func(kv, v any) bool {
		k := v.(*leaseKey)
		k.mu.Lock()
		blk := k.blk
		k.blk = nil
		k.mu.Unlock()
		if blk != nil {
			if err := l.giveBack(ctx, kv.(string), blk); err != nil {
				errs = append(errs, err)
			}
		}
		return true
	})
	return errors.Join(errs...)
}

// Refund gives n units back to key: to this replica's live block for the
// key, up to the units it has spent, and the rest to the backend, which
// must be an Adjuster (see Prefetch, Adjustments).
func (l *Prefetch) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return l.adjustReported(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle replaces taken by cost for key (see Adjuster): a smaller cost
// gives the difference back as Refund does, a larger one spends it from
// this replica's live block for the key when it holds enough and cost is
// at most the key's limit; otherwise the backend settles (and applies its
// bound on one Settle, see WithMaxSettle).
func (l *Prefetch) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return l.adjustReported(ctx, AdjustSettle, key, taken, cost, opts)
}

// Reset drops this replica's block for key and resets the key on the
// backend (see Prefetch for the other replicas' blocks).
func (l *Prefetch) Reset(ctx context.Context, key string) error {
	_, err := l.adjustReported(ctx, AdjustReset, key, 0, 0, nil)
	return err
}

// adjustReported applies the adjustment op and reports it to the adjust
// hooks, if any.
func (l *Prefetch) adjustReported(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if l == nil || !l.backend.built() {
		return Result{}, notBuilt("Prefetch")
	}
	if l.adjust == nil {
		return l.adjustKey(ctx, op, key, taken, cost, opts)
	}
	reading := l.base.elapsed()
	res, err := l.adjustKey(ctx, op, key, taken, cost, opts)
	adjusted(l.adjust, l.name, op, l.backend.keys.event(l.adjust, key), taken, cost, opts, res, err, time.Duration(l.base.elapsed()-reading))
	return res, err
}

// adjustKey applies the adjustment op to key's block when it can, and
// forwards it to the backend otherwise.
func (l *Prefetch) adjustKey(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	a, err := l.backend.adjuster("Prefetch")
	if err != nil {
		return Result{}, err
	}
	if ctx == nil {
		return Result{}, fmt.Errorf("ratelimit: Prefetch: %w", errNilContext)
	}
	adj, err := adjustOptions("Prefetch", opts)
	if err != nil {
		return Result{}, err
	}
	v, ok := l.keys.Load(key)
	if !ok {
		return forwardAdjust(ctx, a, op, key, taken, cost, opts)
	}
	k := v.(*leaseKey)
	k.mu.Lock()
	if op == AdjustReset {
		k.blk = nil
		k.mu.Unlock()
		return forwardAdjust(ctx, a, op, key, taken, cost, opts)
	}
	blk := k.blk
	if blk == nil || taken < 0 || cost < 0 || int64(taken) > k.limit || int64(cost) > k.limit || !k.known {
		// A cost above the limit goes to the backend, which bounds it
		// (WithMaxSettle).
		k.mu.Unlock()
		return forwardAdjust(ctx, a, op, key, taken, cost, opts)
	}
	now := max(l.base.elapsed(), k.last)
	k.last = now
	back := int64(taken) - int64(cost)
	// A window's block takes back only units of calls made since its
	// take: a FixedWindow ignores a give-back whose TakenAt is before the
	// window open now, which the block's window may be.
	mine := !adj.hasTaken || blk.unit != 0 || l.readingOf(adj.takenAt) >= blk.t0
	switch {
	case back > 0 && now < blk.end && mine:
		// Units spent from the block become spendable again, as far as
		// it has not decayed; the rest goes to the backend.
		before := blk.usable(now)
		undo := min(back, blk.spent)
		blk.spent -= undo
		blk.next = max(blk.next-undo, 0)
		gain := blk.usable(now) - before
		if gain < back {
			k.mu.Unlock()
			if op == AdjustRefund {
				return forwardAdjust(ctx, a, op, key, int(back-gain), 0, opts)
			}
			return forwardAdjust(ctx, a, op, key, taken-int(gain), cost, opts)
		}
	case back < 0 && blk.usable(now) >= -back:
		blk.spend(now, -back)
	default:
		k.mu.Unlock()
		return forwardAdjust(ctx, a, op, key, taken, cost, opts)
	}
	d := blk.decision(now)
	k.mu.Unlock()
	return d.Result, nil
}

func (l *Prefetch) limiter() Limiter { return l }

func (l *Prefetch) backendOf() *decorated {
	if l == nil {
		return nil
	}
	return &l.backend
}
