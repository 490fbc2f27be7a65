package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"
)

// MaxInFlight is the largest limit of a concurrency limiter (Concurrency,
// RedisConcurrency), in units. A key may hold up to its limit in leases,
// and a denial reads every one of them (on Redis, inside one script call,
// which holds the server while it runs), so the limit bounds that work.
const MaxInFlight = 1 << 16

// Concurrency is an in-process concurrency limiter: at most limit units in
// flight per key, each held by a Lease from Acquire until Release gives it
// back or its TTL passes (see Acquirer).
//
// Acquire(n) takes n units when the units held, plus n, are within the
// limit: Remaining is then the units left free, and ResetAfter the time
// until every lease now held has expired, were none released or
// extended. A denial takes nothing; its RetryAfter is the time until
// enough leases have expired for n to fit, were none released or extended:
// for n = 1, the earliest expiry of a lease of the key. It is an honest
// bound, not a promise: a release frees units at once, so a denied caller
// may well succeed sooner, and one that waits RetryAfter may find the
// units taken again. A lease that has expired holds nothing, whether or
// not it has been released.
//
// Allow(n) acquires n units that nobody can release: they come back when
// their TTL passes. Use Acquire for work whose end is known.
//
// The clock (WithClock) never makes a lease expire early: a clock that
// steps back holds time still until it catches up, and every wait includes
// the catching up.
//
// Memory is bounded by the keys that hold leases, plus those touched within
// the last two TTLs, without a goroutine: a key whose leases have all
// expired or been released is dropped as the limiter's time moves on.
//
// A Concurrency is safe for concurrent use. Create one with
// NewConcurrency; the zero value is not usable.
type Concurrency struct {
	base       clockBase
	limit      int64
	ttl        int64 // ns
	maxNow     int64 // time stands still past it
	keys       *keyTable[*heldUnits]
	obs        observer
	policyFunc *policyFunc
}

// NewConcurrency returns a Concurrency of at most limit units in flight per
// key, whose leases last ttl unless extended. Its Policy is {limit, ttl},
// reported with InFlight set. It takes WithClock, WithPolicyFunc (a key's
// Policy{Limit, Window} is its limit and TTL), WithMaxKeyLength,
// WithKeysShown, WithHooks and WithName; WithMaxDebt and WithMaxSettle
// are errors wrapping ErrInvalidConfig that name them, as is a limit <= 0 or above MaxInFlight, or a
// ttl below 1 ms, not a whole number of microseconds, or above about 73
// years.
func NewConcurrency(limit int, ttl time.Duration, opts ...Option) (*Concurrency, error) {
	const kind = "NewConcurrency"
	cfg, err := applyOptions(kind, opts)
	if err == nil {
		err = inFlightOptions(kind, cfg)
	}
	if err != nil {
		return nil, err
	}
	policy := Policy{Limit: limit, Window: ttl}
	if _, _, err := checkInFlight(kind, policy); err != nil {
		return nil, err
	}
	t, err := newPolicyFunc(cfg, "Concurrency", policy, checkInFlight)
	if err != nil {
		return nil, err
	}
	c := &Concurrency{
		base:       newClockBase(cfg.clock),
		limit:      int64(limit),
		ttl:        int64(ttl),
		maxNow:     math.MaxInt64 - 2*maxSpan,
		keys:       newKeyTable[*heldUnits](int64(ttl)).outliving(heldUntil),
		obs:        newInFlightObserver(cfg, kind, policy),
		policyFunc: t,
	}
	return c, nil
}

// heldUntil returns when h holds nothing any more, were no lease released
// or extended.
func heldUntil(h *heldUnits) int64 { return h.latest }

// inFlightOptions refuses the options a concurrency limiter's cfg was
// given that do not apply to it: WithMaxDebt and WithMaxSettle, since it
// has no debt and no Settle.
func inFlightOptions(kind string, cfg config) error {
	if cfg.maxDebtSet {
		return fmt.Errorf("%w: %s: WithMaxDebt does not apply; a concurrency limiter has no debt", ErrInvalidConfig, kind)
	}
	if cfg.maxSettleSet {
		return fmt.Errorf("%w: %s: WithMaxSettle does not apply; a concurrency limiter has no Settle", ErrInvalidConfig, kind)
	}
	return nil
}

// newInFlightObserver returns the observer of a concurrency limiter of
// policy: its own policy is reported InFlight.
func newInFlightObserver(cfg config, kind string, policy Policy) observer {
	o := newObserver(cfg, kind, policy, rule{inFlight: true})
	o.own[0].InFlight = true
	return o
}

// checkInFlight checks a concurrency limiter's policy, in process and on
// Redis alike, and returns its limit and its TTL in ns.
func checkInFlight(kind string, p Policy) (int64, int64, error) {
	if err := checkLimit(kind, "limit", p.Limit, MaxInFlight); err != nil {
		return 0, 0, err
	}
	switch {
	case p.Window < time.Millisecond:
		return 0, 0, fmt.Errorf("%w: %s: lease TTL %v must be at least 1ms", ErrInvalidConfig, kind, p.Window)
	case p.Window%time.Microsecond != 0:
		return 0, 0, fmt.Errorf("%w: %s: lease TTL %v is not a whole number of microseconds, the unit of Redis time", ErrInvalidConfig, kind, p.Window)
	case int64(p.Window) > maxSpan:
		return 0, 0, fmt.Errorf("%w: %s: lease TTL %v overflows the clock", ErrInvalidConfig, kind, p.Window)
	}
	return int64(p.Limit), int64(p.Window), nil
}

// errConcurrencyNotBuilt is the error of a call on a nil or zero-value
// *Concurrency.
var errConcurrencyNotBuilt = notBuilt("Concurrency")

// built reports whether c came from NewConcurrency.
func (c *Concurrency) built() bool { return c != nil && c.keys != nil }

// Acquire takes n units for key and returns the Lease that holds them, or
// a denial that takes nothing (see Acquirer and Concurrency). ctx goes to
// the PolicyFunc, if any; the call never blocks.
func (c *Concurrency) Acquire(ctx context.Context, key string, n int) (lease Lease, d Decision, err error) {
	// Small enough to inline, so that the Lease and Decision are written
	// where the caller keeps them.
	err = c.acquire(ctx, key, n, &lease, &d)
	return lease, d, err
}

// Allow takes n units for key that come back when the limiter's TTL (the
// key's policy's Window) has passed: no one can release them. See
// Concurrency.
func (c *Concurrency) Allow(ctx context.Context, key string, n int) (Result, error) {
	if !c.built() {
		return Result{}, errConcurrencyNotBuilt
	}
	var d Decision
	err := c.acquire(ctx, key, n, nil, &d)
	return d.Result, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy, named "default" and InFlight, is the key's.
func (c *Concurrency) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if !c.built() {
		return Decision{}, errConcurrencyNotBuilt
	}
	var d Decision
	err := c.acquire(ctx, key, n, nil, &d)
	return d, err
}

// Policies returns the one policy of key's calls, named "default" and
// InFlight: the limiter's own, or the key's for a limiter built
// WithPolicyFunc (see Decider).
func (c *Concurrency) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if !c.built() {
		return nil, errConcurrencyNotBuilt
	}
	p, _, _, err := c.policyOf(ctx, key)
	return inFlightPolicies(p, c.obs.own), err
}

// Policy returns the limiter's own policy: {limit, ttl}.
func (c *Concurrency) Policy() Policy {
	if !c.built() {
		return Policy{}
	}
	return c.obs.policy
}

// policyOf returns the policy of a call for key, its limit and its TTL in
// ns.
func (c *Concurrency) policyOf(ctx context.Context, key string) (Policy, int64, int64, error) {
	if c.policyFunc == nil {
		return c.obs.policy, c.limit, c.ttl, nil
	}
	return c.policyFunc.resolve(ctx, key)
}

// acquire is Acquire, which sets *d and, when lease is not
// nil, *lease (Allow's units cannot be released).
func (c *Concurrency) acquire(ctx context.Context, key string, n int, lease *Lease, d *Decision) error {
	if !c.built() {
		return errConcurrencyNotBuilt
	}
	var start int64
	if c.obs.hooks != nil {
		start = c.base.elapsed()
	}
	// The limiter's own policy, without a PolicyFunc, costs no call.
	limit, ttl, policies := c.limit, c.ttl, c.obs.own
	err := c.obs.keys.check("Concurrency", key)
	if err == nil && c.policyFunc != nil {
		var p Policy
		p, limit, ttl, err = c.policyFunc.resolve(ctx, key)
		policies = inFlightPolicies(p, c.obs.own)
	}
	if err == nil && (n < 0 || int64(n) > limit) {
		err = checkCost(n, int(limit))
	}
	d.Result.Limit = int(limit)
	if err == nil {
		c.take(key, int64(n), limit, ttl, lease, &d.Result)
	}
	d.Policies = policies
	d.Policy = policies[0]
	d.Enforced = d.Result
	d.rules = c.obs.rules
	if c.obs.hooks != nil {
		ev := Event{Limiter: c.obs.name, Key: c.obs.keys.event(c.obs.hooks, key), Cost: n, Decision: *d, Err: err, Latency: time.Duration(c.base.elapsed() - start)}
		if lease != nil {
			ev.Lease = *lease
		}
		c.obs.hooks.Decided(ev)
	}
	return err
}

// take decides n (0 <= n <= limit) for key now, holding what it takes
// for ttl ns, and sets *res (whose Limit is set) and, when it grants a
// lease and lease is not nil, *lease.
func (c *Concurrency) take(key string, n, limit, ttl int64, lease *Lease, res *Result) {
	i := c.keys.shardIndex(key)
	reading := c.base.elapsed()
	sh, now := c.keys.lockShard(i, reading, c.maxNow)
	h, at := sh.lookup(key)
	lag := lagBehind(now, reading)
	if at == absent {
		// An absent key holds nothing, so n <= limit fits.
		res.Allowed, res.Remaining = true, int(limit)
		if n > 0 {
			h = new(heldUnits)
			c.grant(sh, i, h, key, n, limit, ttl, now, lag, lease, res)
			sh.write(key, at, h, h.latest)
		}
		sh.mu.Unlock()
		return
	}
	h.sweep(now)
	switch {
	case n == 0:
		res.Allowed = true
	case h.units+n <= limit:
		c.grant(sh, i, h, key, n, limit, ttl, now, lag, lease, res)
	default:
		res.RetryAfter = time.Duration(h.wait(limit, n, now) + lag)
	}
	res.Remaining = int(h.free(limit))
	if h.units > 0 {
		res.ResetAfter = time.Duration(h.latest - now + lag)
	}
	if at == inHot {
		sh.cur.maxExpiry = max(sh.cur.maxExpiry, h.latest)
	} else {
		keep(sh, key, at, h, now)
	}
	sh.mu.Unlock()
}

// grant adds a lease of n units to h, key's state in sh, the shard of
// index i, and sets *res and, when lease is not nil, *lease. The caller
// holds sh.mu.
func (c *Concurrency) grant(sh *tableShard[*heldUnits], i int, h *heldUnits, key string, n, limit, ttl, now, lag int64, lease *Lease, res *Result) {
	// An id names its shard in its low bits, so that a release finds it
	// without hashing the key again.
	sh.seq++
	id := sh.seq*shardCount + uint64(i)
	h.take(heldLease{id: id, units: n, expiry: now + ttl})
	if lease != nil {
		*lease = Lease{holder: c, key: key, id: id, units: int(n), ttl: time.Duration(ttl)}
	}
	res.Allowed = true
	res.Remaining = int(h.free(limit))
	res.ResetAfter = time.Duration(h.latest - now + lag)
}

// keep records that h, key's state found at at (not absent) in sh, was
// changed at now: a key that holds nothing stays until its generation is
// dropped, so that a hot key's state is reused.
func keep(sh *tableShard[*heldUnits], key string, at where, h *heldUnits, now int64) {
	if at == inHot {
		sh.cur.maxExpiry = max(sh.cur.maxExpiry, h.latest)
		return
	}
	sh.write(key, at, h, max(h.latest, now))
}

// releaseLease releases l, one of c's leases.
func (c *Concurrency) releaseLease(_ context.Context, l Lease) error {
	var start int64
	if c.obs.adjust != nil {
		start = c.base.elapsed()
	}
	sh := &c.keys.shards[l.id%shardCount]
	sh.mu.Lock()
	// The shard's time, not the clock's: a lease found expired held
	// nothing, and one found held holds nothing after this either way.
	now := sh.now
	h, at := sh.lookup(l.key)
	held := false
	if at != absent {
		if i := h.find(l.id); i >= 0 {
			held = h.remove(i).expiry > now
			if at != inHot {
				keep(sh, l.key, at, h, now)
			}
		}
	}
	sh.mu.Unlock()
	if c.obs.adjust != nil {
		c.obs.reportAdjust(AdjustRelease, l.key, l.units, 0, nil, Result{Allowed: held}, nil, time.Duration(c.base.elapsed()-start))
	}
	return nil
}

// extendLease renews l, one of c's leases.
func (c *Concurrency) extendLease(ctx context.Context, l Lease) (Lease, error) {
	var start int64
	if c.obs.adjust != nil {
		start = c.base.elapsed()
	}
	_, limit, ttl, err := c.policyOf(ctx, l.key)
	if err == nil {
		l, err = c.renew(l, limit, ttl)
	}
	if c.obs.adjust != nil {
		c.obs.reportAdjust(AdjustExtend, l.key, l.units, l.units, nil, Result{Allowed: err == nil, Limit: int(limit)}, err, time.Duration(c.base.elapsed()-start))
	}
	return l, err
}

// renew moves l's expiry to ttl ns from now, under a key limit of limit.
func (c *Concurrency) renew(l Lease, limit, ttl int64) (Lease, error) {
	reading := c.base.elapsed()
	sh, now := c.keys.lockShard(int(l.id%shardCount), reading, c.maxNow)
	defer sh.mu.Unlock()
	h, at := sh.lookup(l.key)
	i := -1
	if at != absent {
		i = h.find(l.id)
	}
	if i < 0 || h.leases[i].expiry <= now {
		if i >= 0 {
			h.remove(i)
			keep(sh, l.key, at, h, now)
		}
		return l, fmt.Errorf("ratelimit: Concurrency: key %s: %w (%v)", c.obs.keys.quote(l.key), ErrLeaseExpired, l)
	}
	h.renew(i, now+ttl)
	keep(sh, l.key, at, h, now)
	l.ttl = time.Duration(ttl)
	return l, nil
}

// Reset drops every lease of key: their units are free at once, and
// their Extend fails with ErrLeaseExpired. It is for administration (a
// key stuck by a holder that will not come back before its TTL); on a
// built Concurrency it fails only on a key longer than WithMaxKeyLength
// allows (ErrInvalidKey).
func (c *Concurrency) Reset(_ context.Context, key string) error {
	if !c.built() {
		return errConcurrencyNotBuilt
	}
	var start int64
	if c.obs.adjust != nil {
		start = c.base.elapsed()
	}
	err := c.obs.keys.check("Concurrency", key)
	if err == nil {
		c.keys.drop(key, c.base.elapsed(), c.maxNow)
	}
	if c.obs.adjust != nil {
		c.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, err, time.Duration(c.base.elapsed()-start))
	}
	return err
}
