package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync/atomic"
	"time"
)

// DenyCache wraps a Limiter, typically a Redis one, and answers a flood of
// requests on a denied key locally, without a round trip, for as long as the
// backend, with no other traffic, would deny them too.
//
// One denial bounds what a key can hold later: a token bucket or GCRA
// refills no faster than its rate, a fixed window's count stays until the
// window ends, and other calls only take units. So after the backend
// denies a call on key, DenyCache answers any later call on key, of any
// cost, that every policy of the backend still bounds: a cost above what
// the policy that denied can hold by then. It reports the Remaining,
// RetryAfter and ResetAfter the backend would report for that cost if
// nothing else had touched the key since (its denial, aged), and Source
// FromDenyCache. Calls that may succeed, peeks, costs above the limit, and
// every call once MaxAge has passed since the denial go to the backend. A
// call the backend allows on such a key tells the DenyCache what the key
// holds now, which it answers from until that same end, never later; an
// allowed call under policies other than the denial's drops it. This
// holds for the token bucket, GCRA and fixed window, in process and on
// Redis, for a Composite (each part counted as it counts: a PerCall part
// takes 1 of any call), and for limiters built WithPolicyFunc: a denial
// answers only while the key's policies are still those it was made under.
// A calendar window's count stays until its window ends, as a fixed
// window's does. A sliding log's or sliding counter's units come back bit
// by bit, so its denial of n bounds only calls of n: it answers them until
// its RetryAfter, and a call of another cost goes to the backend (which,
// if it allows it, drops the denial).
//
// Units in flight (a Concurrency or RedisConcurrency, or a Composite
// holding one, see
// Acquirer): a denial of such a policy is never remembered, on Allow,
// Decide or Acquire alike, since a release may free units at any moment;
// every such call goes to the backend, and Acquire returns the backend's
// Lease, which its own Release and Extend give back to the limiter that
// granted it.
//
// Give-backs: a Refund, a Settle whose cost differs from taken, or a Reset
// made through the DenyCache forgets every remembered denial it can
// change, including, for a Composite, the denials of other keys that
// share a part's key with it (a tenant's, say); so does one that completes
// while a denial is on its way back from the backend, which then never
// answers a call. A give-back the DenyCache does not see, made by another
// process (another replica) or around it, cannot be known locally: until
// MaxAge has passed, the DenyCache may deny a call that the backend would
// now allow. MaxAge bounds that, and its default, 1 s, keeps it within the
// whole second to which RateLimit-Reset and Retry-After round a wait.
//
// Time: a denial is aged on the DenyCache's clock from a time taken before
// the backend was asked, so the round trip only shortens what is
// remembered; it never denies what the backend would allow as long as the
// backend's clock and the DenyCache's run at the same rate.
//
// Put it directly around the rate-limiting backend, inside a Guard and
// inside a Shadow: only a denial the backend itself made (Source
// FromBackend) is remembered, so a fail-closed denial is never kept; but
// the denials of an enforcing Shadow look like the backend's, and around a
// Shadow they would go on being answered for up to MaxAge after it stops
// enforcing. A denial made while the backend's in-process clock had
// stepped back is not remembered. It reports to Hooks only the calls it
// answers itself (and, to AdjustHooks, every adjustment), and reports its backend's policies as its own. For a
// backend that does not say how its state moves (a Limiter of another
// package, or a decorator of another package that does not pass Decide's
// Decision on), only a denial of n with n-1 left is remembered, and it
// answers calls of that same n until its RetryAfter. A nil ctx is an
// error.
//
// Memory is bounded: at most MaxKeys denials are held at once, each
// forgotten once it has passed, with no goroutine. A full DenyCache keeps
// the denials that save the most backend calls: a new denial takes the
// place of one that has passed or that has answered no more calls than
// the new one's key did (a key denied again inherits half of the calls its
// previous denial answered), chosen among a few sampled; with none such,
// it is not remembered. So a flood of distinct keys, each denied once,
// replaces only its own denials and never one that answers a hot key's
// calls. A DenyCache is safe for concurrent use. Create one with
// NewDenyCache.
type DenyCache struct {
	backend decorated
	hooks   Hooks       // nil when nothing listens
	adjust  AdjustHooks // hooks, when they hear of adjustments; nil otherwise
	name    string      // in what it reports to hooks
	base    clockBase
	maxAge  int64 // ns
	maxKeys int64
	denials *keyTable[*denial] // each immutable once held
	// gens counts the give-backs seen for each slot of hashed part keys:
	// a denial holds only while the sum over its keys' slots has not
	// changed since before the backend was asked.
	gens *[genSlots]atomic.Uint64
	seed maphash.Seed
}

// genSlots is the number of give-back counters of a DenyCache: two keys
// that share one only forget each other's denials more often.
const genSlots = 1024

// DenyCacheConfig configures a DenyCache. The zero value means a MaxAge of
// 1 s, 100 000 keys, no hooks and the system clock.
type DenyCacheConfig struct {
	// MaxAge is the longest a denial is remembered; 0 means 1 s. Longer
	// saves more calls on long waits; shorter bounds memory in time. It
	// does not change the RetryAfter a local denial reports.
	MaxAge time.Duration
	// MaxKeys is the most keys remembered at once; 0 means 100 000. When
	// that many are held, a new denial takes the place of one that has
	// passed or has answered no more calls (see DenyCache), and is not
	// remembered otherwise.
	MaxKeys int
	// Hooks receives the calls answered locally; nil means NopHooks. When
	// it implements AdjustHooks, it also receives every Refund, Settle and
	// Reset the DenyCache forwards.
	Hooks Hooks
	// Name names the DenyCache in what it reports to Hooks (Decision's
	// Limiter); "" means "DenyCache".
	Name string
	// Clock measures how long denials last; nil means the system clock.
	Clock Clock
}

// NewDenyCache returns a DenyCache around backend. It returns an error
// wrapping ErrInvalidConfig for a nil backend or a negative MaxAge or
// MaxKeys.
func NewDenyCache(backend Limiter, cfg DenyCacheConfig) (*DenyCache, error) {
	const kind = "NewDenyCache"
	switch {
	case isNil(backend):
		return nil, fmt.Errorf("%w: %s: nil backend", ErrInvalidConfig, kind)
	case cfg.MaxAge < 0:
		return nil, fmt.Errorf("%w: %s: MaxAge %v must be >= 0", ErrInvalidConfig, kind, cfg.MaxAge)
	case cfg.MaxKeys < 0:
		return nil, fmt.Errorf("%w: %s: MaxKeys %d must be >= 0", ErrInvalidConfig, kind, cfg.MaxKeys)
	}
	if cfg.MaxAge == 0 {
		cfg.MaxAge = time.Second
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = 100_000
	}
	c := &DenyCache{
		gens:    new([genSlots]atomic.Uint64),
		seed:    maphash.MakeSeed(),
		backend: decorate(backend),
		hooks:   activeHooks(cfg.Hooks),
		adjust:  activeAdjustHooks(cfg.Hooks),
		name:    cmp.Or(cfg.Name, "DenyCache"),
		maxAge:  min(int64(cfg.MaxAge), maxSpan),
		maxKeys: int64(cfg.MaxKeys),
		denials: newKeyTable[*denial](min(int64(cfg.MaxAge), maxSpan)),
	}
	c.denials.counted = true
	clock := cfg.Clock
	if isNil(clock) {
		clock = systemClock{}
	}
	c.base = newClockBase(clock)
	return c, nil
}

// Allow denies locally while a remembered denial covers the request, and asks
// the backend otherwise. See DenyCache.
func (c *DenyCache) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := c.Decide(ctx, key, n)
	return d.Result, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): a remembered denial, aged, with Source FromDenyCache, or the
// backend's.
func (c *DenyCache) Decide(ctx context.Context, key string, n int) (Decision, error) {
	_, d, err := c.call(ctx, key, n, false)
	return d, err
}

// Acquire takes n units for key through the backend's Acquire (see
// Acquirer) and returns its Lease and Decision. A denial of a policy of
// units in flight is never remembered (see DenyCache), so a backend whose
// policies hold leases is asked every time; over a rate limiter, which is
// not an Acquirer, Acquire decides as Decide does, remembered denials
// included, and returns a Lease that holds nothing.
func (c *DenyCache) Acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	return c.call(ctx, key, n, true)
}

// call is Decide, or Acquire when leased.
func (c *DenyCache) call(ctx context.Context, key string, n int, leased bool) (Lease, Decision, error) {
	if c == nil || !c.backend.built() {
		return Lease{}, Decision{}, notBuilt("DenyCache")
	}
	if ctx == nil {
		return Lease{}, Decision{}, fmt.Errorf("ratelimit: DenyCache: %w", errNilContext)
	}
	if n <= 0 {
		return c.ask(ctx, key, n, leased)
	}
	reading := c.base.elapsed()
	sh, now := c.denials.lock(key, reading, maxSpan)
	rec, _ := sh.lookup(key)
	sh.mu.Unlock()
	held := rec != nil && now < rec.until
	if held {
		if d, ok := c.local(ctx, key, n, rec, now); ok {
			rec.hit()
			if c.hooks != nil {
				c.hooks.Decided(Event{
					Limiter: c.name, Key: c.backend.keys.event(c.hooks, key), Cost: n, Decision: d,
					Latency: time.Duration(c.base.elapsed() - reading),
				})
			}
			return Lease{}, d, nil
		}
	}
	stamp := c.stampOf(key)
	lease, d, err := c.ask(ctx, key, n, leased)
	if err != nil || d.Source != FromBackend {
		return lease, d, err
	}
	lasts, ok := bounds(&d, n, held)
	switch {
	case ok && !d.Allowed:
		c.remember(key, &denial{until: reading + min(lasts, c.maxAge), at: reading, d: d, n: n, slots: c.slots(key), stamp: stamp})
	case ok:
		c.renew(key, rec, d, n, lasts, reading, stamp)
	case held && d.Allowed:
		// The call took units from a key whose denial of another cost is
		// held: that denial now waits longer than it says, so it goes.
		c.denials.drop(key, reading, maxSpan)
	}
	return lease, d, nil
}

// renew replaces rec, the denial held for key when a call of n began at
// reading, by the backend's answer d, which allowed that call and bounds
// the key as it is now for lasts ns: a fresher view of the key, which
// never makes rec last longer. It keeps rec's end (MaxAge after the
// backend's denial at the latest) while the key's policies are those rec
// was made under and no give-back was seen since rec was made (stamp, read
// before the backend was asked, is still rec's); otherwise the key's
// denial goes, since an allowed answer under another policy is no denial.
// A denial written since rec (another call's) is left as it is.
func (c *DenyCache) renew(key string, rec *denial, d Decision, n int, lasts, reading int64, stamp uint64) {
	sh, now := c.denials.lock(key, reading, maxSpan)
	defer sh.mu.Unlock()
	cur, w := sh.lookup(key)
	if cur != rec {
		return
	}
	if until := min(rec.until, reading+lasts); until > now && stamp == rec.stamp && samePolicies(d.Policies, rec.d.Policies) {
		fresh := &denial{until: until, at: reading, d: d, n: n, slots: rec.slots, stamp: stamp}
		fresh.hits.Store(rec.hits.Load())
		sh.write(key, w, fresh, until)
		return
	}
	c.denials.remove(sh, key, w)
}

// ask asks the backend's Acquire when leased, and its decision otherwise.
func (c *DenyCache) ask(ctx context.Context, key string, n int, leased bool) (Lease, Decision, error) {
	if leased {
		return c.backend.acquire(ctx, key, n)
	}
	d, err := c.backend.decide(ctx, key, n)
	return Lease{}, d, err
}

// bounds reports whether the backend's answer d to a call of n is
// remembered, and for how long it can deny anything (ns): a denial is; so
// is an allowed call on a key whose denial is held, which it may replace
// (see renew), since both bound the key exactly as it is now. A backend that does not
// say how its state moves has only its denials of n with n-1 left
// remembered, until their RetryAfter: they hold for n alone; so has a
// sliding window, whatever it has left (see rule.gradual). A denial
// made behind a clock that stepped back is not (see lagging), nor one of a
// policy of units in flight, which a release may free at any moment.
func bounds(d *Decision, n int, held bool) (int64, bool) {
	switch {
	case d.inFlight():
		return 0, false
	case d.Allowed && !held:
		return 0, false
	case d.rules == nil:
		return int64(d.RetryAfter), !d.Allowed && d.RetryAfter > 0 && d.Remaining == n-1
	case d.gradual():
		// A denial of n holds for n until its RetryAfter, whatever is
		// left: the units come back bit by bit.
		return int64(d.RetryAfter), !d.Allowed && d.RetryAfter > 0
	case len(d.rules) != len(d.Policies) || lagging(d):
		return 0, false
	}
	longest := d.ResetAfter
	for _, p := range d.Parts {
		longest = max(longest, p.ResetAfter)
	}
	return int64(longest), true
}

// local returns the answer of the denial rec, remembered for key, to a
// call of n at the table's time now, and true, when every policy the
// backend decides key by still bounds it so that n is denied; false when
// the backend must be asked.
func (c *DenyCache) local(ctx context.Context, key string, n int, rec *denial, now int64) (Decision, bool) {
	if c.stamp(rec.slots) != rec.stamp {
		return Decision{}, false // a give-back may have let it through
	}
	if rec.d.rules == nil {
		return c.localSameCost(n, rec, now)
	}
	policies, err := c.backend.policies(ctx, key)
	if err != nil || !samePolicies(policies, rec.d.Policies) {
		return Decision{}, false // a changed policy may allow what it denied
	}
	if rec.d.gradual() {
		return c.localSameCost(n, rec, now)
	}
	for _, p := range policies {
		if !p.PerCall && n > p.Limit {
			return Decision{}, false // the backend's error says so
		}
	}
	elapsed := now - rec.at
	d := rec.d
	d.Source, d.nextSet = FromDenyCache, false // its Results are aged, not a block's
	d.ageNext(time.Duration(elapsed))          // a part's told as the window it ends ages
	if d.Parts == nil {
		res, denied := aged(d.Result, d.rules[0], d.Policy.PerCall, elapsed, n)
		d.Result, d.Enforced = res, res
		return d, denied
	}
	parts, denied := make([]Result, len(d.Parts)), false
	for i, r := range d.Parts {
		var deny bool
		parts[i], deny = aged(r, d.rules[i], d.Policies[i].PerCall, elapsed, n)
		denied = denied || deny
	}
	d.PolicyIndex = bound(parts)
	d.Policy, d.Parts = d.Policies[d.PolicyIndex], parts
	d.Result = combine(parts, d.PolicyIndex)
	d.Enforced = d.Result
	return d, denied
}

// lagging reports whether a policy of d, a token bucket or GCRA in
// process, answered from a clock behind its own time (stepped back): its
// ResetAfter then holds more than the units it owes, which stand still
// until the clock catches up, and aging it would deny what the key holds.
func lagging(d *Decision) bool {
	for i, rl := range d.rules {
		res := d.Result
		if d.Parts != nil {
			res = d.Parts[i]
		}
		if rl.unit > 0 && res.Remaining > 0 && int64(res.ResetAfter) > int64(res.Limit-res.Remaining)*rl.unit {
			return true
		}
	}
	return false
}

// localSameCost is local for a denial of a backend that does not say how
// its state moves: a denial of n with n-1 left answers calls of n alone,
// until its RetryAfter, as the backend's denial aged (each part's waits
// too, so that none tells a wait already passed).
func (c *DenyCache) localSameCost(n int, rec *denial, now int64) (Decision, bool) {
	elapsed := time.Duration(now - rec.at)
	if n != rec.n || rec.d.RetryAfter <= elapsed {
		return Decision{}, false
	}
	d := rec.d
	d.RetryAfter -= elapsed
	d.ResetAfter = max(d.ResetAfter-elapsed, d.RetryAfter)
	d.Enforced, d.Source = d.Result, FromDenyCache
	if d.Parts != nil {
		parts := make([]Result, len(d.Parts))
		for i, r := range d.Parts {
			r.RetryAfter, r.ResetAfter = max(r.RetryAfter-elapsed, 0), max(r.ResetAfter-elapsed, 0)
			parts[i] = r
		}
		d.Parts = parts
	}
	d.ageNext(elapsed)
	return d, true
}

// aged returns what a policy that answered res, and whose state moves by
// rl, answers a call of n elapsed ns later if nothing else touched the
// key, and whether it denies it: a token bucket or GCRA has paid off
// elapsed of what it owed, and a fixed window's count stays until its end.
// A PerCall policy counts 1 for any n.
func aged(res Result, rl rule, perCall bool, elapsed int64, n int) (Result, bool) {
	cost := int64(n)
	if perCall {
		cost = 1
	}
	limit := int64(res.Limit)
	out := Result{Limit: res.Limit}
	if rl.unit > 0 {
		owed := max(int64(res.ResetAfter)-elapsed, 0)
		out.Remaining = int(max(limit*rl.unit-owed, 0) / rl.unit)
		out.ResetAfter = time.Duration(owed)
		if retry := owed - (limit-cost)*rl.unit; retry > 0 {
			out.RetryAfter = time.Duration(retry)
			return out, true
		}
		return out, false
	}
	left := int64(res.ResetAfter) - elapsed
	if left <= 0 {
		out.Remaining = res.Limit // the window has ended
		return out, false
	}
	out.Remaining, out.ResetAfter = res.Remaining, time.Duration(left)
	if cost > int64(res.Remaining) {
		out.RetryAfter = out.ResetAfter
		return out, true
	}
	return out, false
}

// samePolicies reports whether a and b list the same policies: at once
// when they are one slice, as a limiter's own policies are on every call.
func samePolicies(a, b []NamedPolicy) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0] || slices.Equal(a, b))
}

// slots returns the give-back counters of the keys a call on key touches.
func (c *DenyCache) slots(key string) []uint16 {
	if c.backend.keysOf == nil {
		return []uint16{c.slot(0, key)}
	}
	keys := c.backend.keysOf(key)
	slots := make([]uint16, len(keys))
	for i, k := range keys {
		slots[i] = c.slot(i, k)
	}
	return slots
}

// stampOf returns the sum of the give-back counters of the keys a call on
// key touches: for a backend whose calls touch key alone, without
// allocating.
func (c *DenyCache) stampOf(key string) uint64 {
	if c.backend.keysOf == nil {
		return c.gens[c.slot(0, key)].Load()
	}
	return c.stamp(c.slots(key))
}

// slot returns the give-back counter of the key of policy i.
func (c *DenyCache) slot(i int, key string) uint16 {
	return uint16((maphash.String(c.seed, key) ^ uint64(i)*0x9e3779b97f4a7c15) % genSlots)
}

// stamp returns the sum of the give-back counters slots.
func (c *DenyCache) stamp(slots []uint16) uint64 {
	var sum uint64
	for _, s := range slots {
		sum += c.gens[s].Load()
	}
	return sum
}

// gaveBack records a give-back on key: every denial of a key that shares
// one of its part keys is forgotten.
func (c *DenyCache) gaveBack(key string) {
	if c.backend.keysOf == nil {
		// A backend whose calls touch key alone, without allocating.
		c.gens[c.slot(0, key)].Add(1)
	} else {
		for _, s := range c.slots(key) {
			c.gens[s].Add(1)
		}
	}
	c.denials.drop(key, c.base.elapsed(), maxSpan)
}

// Policies returns the backend's policies for key (see Decider).
func (c *DenyCache) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if c == nil || !c.backend.built() {
		return nil, notBuilt("DenyCache")
	}
	return c.backend.policies(ctx, key)
}

// Refund forwards to the backend, which must be an Adjuster, and then
// forgets any denial remembered for key: units given back may let it
// through.
func (c *DenyCache) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return c.adjustReported(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle forwards to the backend, which must be an Adjuster, and then
// forgets any denial remembered for key when cost differs from taken: units
// given back may let it through, and a debt changes what the backend would
// answer.
func (c *DenyCache) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return c.adjustReported(ctx, AdjustSettle, key, taken, cost, opts)
}

// forward forwards the adjustment op of taken and cost to the backend,
// and forgets any denial remembered for key when it may have changed what
// the backend would answer: after a Reset, or a Refund or Settle whose
// cost differs from taken.
func (c *DenyCache) forward(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	a, err := c.adjuster()
	if err != nil {
		return Result{}, err
	}
	res, err := forwardAdjust(ctx, a, op, key, taken, cost, opts)
	if cost != taken || op == AdjustReset {
		// Even after an error: the Settle may have been applied.
		c.gaveBack(key)
	}
	return res, err
}

// Reset forwards to the backend, which must be an Adjuster, and forgets
// any denial remembered for key.
func (c *DenyCache) Reset(ctx context.Context, key string) error {
	_, err := c.adjustReported(ctx, AdjustReset, key, 0, 0, nil)
	return err
}

// adjustReported forwards the adjustment op of taken and cost to the
// backend, and reports it to the adjust hooks, if any.
func (c *DenyCache) adjustReported(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if c == nil || c.adjust == nil {
		return c.forward(ctx, op, key, taken, cost, opts)
	}
	reading := c.base.elapsed()
	res, err := c.forward(ctx, op, key, taken, cost, opts)
	adjusted(c.adjust, c.name, op, c.backend.keys.event(c.adjust, key), taken, cost, opts, res, err, time.Duration(c.base.elapsed()-reading))
	return res, err
}

// adjuster returns the backend as an Adjuster, or an error saying it is
// not one.
func (c *DenyCache) adjuster() (Adjuster, error) {
	if c == nil || !c.backend.built() {
		return nil, notBuilt("DenyCache")
	}
	return c.backend.adjuster("DenyCache")
}

// remember holds d for key until d.until, unless it has passed already.
// When MaxKeys are held, it takes the place of a denial that has passed or
// is worth no more (see evict), and is not remembered when there is none.
func (c *DenyCache) remember(key string, d *denial) {
	for tries := 0; ; tries++ {
		sh, now := c.denials.lock(key, d.at, maxSpan)
		if d.until <= now {
			sh.mu.Unlock()
			return
		}
		old, w := sh.lookup(key)
		if w != absent || c.denials.reserve(c.maxKeys) {
			d.inherit(old)
			sh.write(key, w, d, d.until)
			sh.mu.Unlock()
			return
		}
		sh.mu.Unlock()
		switch {
		case tries == 2:
			return // others took the places made: this denial is not kept
		case c.evict(key, d.hits.Load(), c.base.elapsed()):
		case tries == 0:
			// Shards no call has touched may hold denials that have
			// passed, beyond those the sample found.
			c.denials.sweep(c.base.elapsed(), maxSpan)
		default:
			return
		}
	}
}

func (d *DenyCache) limiter() Limiter { return d }

func (d *DenyCache) backendOf() *decorated {
	if d == nil {
		return nil
	}
	return &d.backend
}

// evict removes one denial worth no more than worth, at a clock reading
// of reading, from key's shard or the few after it (see
// denycacheevict.go), and reports whether it did. The caller holds no
// shard's lock.
func (c *DenyCache) evict(key string, worth uint32, reading int64) bool {
	first := c.denials.shardIndex(key)
	for i := range evictShards {
		sh, now := c.denials.lockShard((first+i)%shardCount, reading, maxSpan)
		victim, w, ok := evictable(sh, now, worth)
		if ok {
			c.denials.remove(sh, victim, w)
		}
		sh.mu.Unlock()
		if ok {
			return true
		}
	}
	return false
}
