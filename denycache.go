package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"time"
)

// DenyCache wraps a Limiter, typically a Redis one, and answers a flood of
// requests on a denied key locally, without a round trip, for as long as the
// backend cannot possibly allow them.
//
// When the backend denies n for key with RetryAfter r and n-1 remaining, no
// request for n on key can succeed within r, and its Remaining stays n-1
// until then: tokens refill no faster than the rate, a window does not end
// early, and other clients only take tokens. So for the next r, or MaxAge if
// that is shorter, DenyCache denies requests for key of cost n itself. A
// local denial is the backend's, aged: its RetryAfter and ResetAfter are the
// backend's less the time passed since the backend was asked, so MaxAge
// bounds only how long a denial is remembered, never the wait reported, and
// a local answer is the one the backend would give. Requests of another
// cost, peeks, denials with other Remaining values, and everything after
// that go to the backend. A nil ctx is an error. It never denies what the backend would allow, as
// long as the backend's clock and the DenyCache's run at the same rate (the
// time is taken before the backend is asked, so the round trip only shortens
// what is remembered).
//
// Put it directly around the rate-limiting backend, inside a Guard: a
// fail-closed denial from a Guard is not a verdict of the rate and must not
// be remembered. It reports to Hooks only the calls it answers itself, and
// reports its backend's Policy as its own.
//
// When the backend chooses its policy per key (WithPolicyFunc), each
// denial is remembered with the key's policy when it was made, and answers
// only while the key's policy is still that one: a limit raised or lowered
// sends the key's next call to the backend.
//
// Memory is bounded: at most MaxKeys denials are held at once, each
// forgotten once it has passed, with no goroutine. A DenyCache is safe for
// concurrent use. Create one with NewDenyCache.
type DenyCache struct {
	backend decorated
	hooks   Hooks  // nil when nothing listens
	name    string // in what it reports to hooks
	base    clockBase
	maxAge  int64 // ns
	maxKeys int64
	denials *keyTable[denial]
}

// denial is a backend's denial of n for a key: until (ns) no request for n or
// more can be allowed.
type denial struct {
	until int64
	at    int64 // when the backend was asked
	n     int
	res   Result
	bound int // the index of the backend's policy that bound res
	// policy is the key's policy when the backend chooses its policy per
	// key: the denial holds only while the key's policy is still this one.
	policy Policy
}

// DenyCacheConfig configures a DenyCache. The zero value means a MaxAge of
// 1 s, 100 000 keys, no hooks and the system clock.
type DenyCacheConfig struct {
	// MaxAge is the longest a denial is remembered; 0 means 1 s. Longer
	// saves more calls on long waits; shorter bounds memory in time. It
	// does not change the RetryAfter a local denial reports.
	MaxAge time.Duration
	// MaxKeys is the most keys remembered at once; 0 means 100 000. When
	// that many are held, new denials are not remembered until old ones
	// are dropped, which happens within two MaxAges of their passing.
	MaxKeys int
	// Hooks receives the calls answered locally; nil means NopHooks.
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
		backend: decorate(backend),
		hooks:   activeHooks(cfg.Hooks),
		name:    cmp.Or(cfg.Name, "DenyCache"),
		maxAge:  min(int64(cfg.MaxAge), maxSpan),
		maxKeys: int64(cfg.MaxKeys),
		denials: newKeyTable[denial](min(int64(cfg.MaxAge), maxSpan)),
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
	res, _, err := c.AllowBound(ctx, key, n)
	return res, err
}

// AllowBound decides as Allow does, and also returns the index in Policies
// of the policy that bound the decision: the backend's, remembered with its
// denial, when the backend is a MultiPolicy; 0 otherwise.
func (c *DenyCache) AllowBound(ctx context.Context, key string, n int) (Result, int, error) {
	res, bound, _, err := c.AllowSource(ctx, key, n)
	return res, bound, err
}

// AllowSource decides as AllowBound does, and also says who answered:
// FromDenyCache for a remembered denial, otherwise the backend (its own
// account when it is a SourceLimiter). Only a denial the backend itself
// made (FromBackend) is remembered.
func (c *DenyCache) AllowSource(ctx context.Context, key string, n int) (Result, int, Source, error) {
	if c == nil || !c.backend.built() {
		return Result{}, 0, FromBackend, notBuilt("DenyCache")
	}
	if ctx == nil {
		return Result{Limit: c.backend.policy.Limit}, 0, FromBackend, fmt.Errorf("ratelimit: DenyCache: %w", errNilContext)
	}
	if n <= 0 {
		return c.backend.allowSource(ctx, key, n)
	}
	// A denial is tied to the key's policy when it was made: a changed
	// policy (a raised limit) may allow what it denied.
	var policy Policy
	if c.backend.keyPolicies != nil {
		policy = c.backend.policyFor(ctx, key)
	}
	reading := c.base.elapsed()
	sh, now := c.denials.lock(key, reading, maxSpan)
	// A cost above the limit goes on to the backend, whose error says so.
	if d, _ := sh.lookup(key); now < d.until && n == d.n && d.policy == policy {
		sh.mu.Unlock()
		res := d.res.aged(time.Duration(now - d.at))
		if c.hooks != nil {
			c.hooks.Decided(Decision{
				Limiter: c.name, Policy: cmp.Or(policy, c.backend.policy), Key: key, Cost: n, Result: res,
				Source: FromDenyCache, Latency: time.Duration(c.base.elapsed() - reading),
			})
		}
		return res, d.bound, FromDenyCache, nil
	}
	sh.mu.Unlock()

	res, bound, source, err := c.backend.allowSource(ctx, key, n)
	// Only a denial whose Remaining cannot change before the same request
	// is allowed (n-1 left: it grows no further until n are there) is
	// remembered, so that a local answer equals the backend's, aged.
	if err != nil || source != FromBackend || res.Allowed || res.RetryAfter <= 0 || res.Remaining != n-1 {
		return res, bound, source, err
	}
	c.remember(key, denial{until: reading + min(int64(res.RetryAfter), c.maxAge), at: reading, n: n, res: res, bound: bound, policy: policy})
	return res, bound, source, nil
}

// Policies returns the backend's policies (see PoliciesOf).
func (c *DenyCache) Policies() []NamedPolicy {
	if c == nil {
		return nil
	}
	return c.backend.copyPolicies()
}

// Refund forwards to the backend, which must be an Adjuster, and then
// forgets any denial remembered for key: units given back may let it
// through.
func (c *DenyCache) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return c.Settle(ctx, key, n, 0, opts...)
}

// Settle forwards to the backend, which must be an Adjuster, and then
// forgets any denial remembered for key when cost differs from taken: units
// given back may let it through, and a debt changes what the backend would
// answer.
func (c *DenyCache) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	a, err := c.adjuster()
	if err != nil {
		return Result{}, err
	}
	res, err := a.Settle(ctx, key, taken, cost, opts...)
	if err == nil && cost != taken {
		c.forget(key)
	}
	return res, err
}

// Reset forwards to the backend, which must be an Adjuster, and forgets
// any denial remembered for key.
func (c *DenyCache) Reset(ctx context.Context, key string) error {
	a, err := c.adjuster()
	if err != nil {
		return err
	}
	err = a.Reset(ctx, key)
	if err == nil {
		c.forget(key)
	}
	return err
}

// adjuster returns the backend as an Adjuster, or an error saying it is
// not one.
func (c *DenyCache) adjuster() (Adjuster, error) {
	if c == nil || !c.backend.built() {
		return nil, notBuilt("DenyCache")
	}
	return c.backend.adjuster("DenyCache")
}

// forget drops the denial remembered for key, if any.
func (c *DenyCache) forget(key string) {
	c.denials.drop(key, c.base.elapsed(), maxSpan)
}

// remember holds d for key until d.until, unless it has passed already or
// MaxKeys are held.
func (c *DenyCache) remember(key string, d denial) {
	for swept := false; ; swept = true {
		sh, now := c.denials.lock(key, d.at, maxSpan)
		if d.until <= now {
			sh.mu.Unlock()
			return
		}
		if _, w := sh.lookup(key); w != absent || c.denials.reserve(c.maxKeys) {
			sh.write(key, w, d, d.until)
			sh.mu.Unlock()
			return
		}
		sh.mu.Unlock()
		if swept {
			return
		}
		// Full: shards no call has touched may hold denials that have
		// passed.
		c.denials.sweep(c.base.elapsed(), maxSpan)
	}
}

// aged returns r as it reads elapsed later: its waits shortened by elapsed,
// never below 0, and ResetAfter never below RetryAfter.
func (r Result) aged(elapsed time.Duration) Result {
	r.RetryAfter = max(r.RetryAfter-elapsed, 0)
	r.ResetAfter = max(r.ResetAfter-elapsed, r.RetryAfter)
	return r
}

// Policy returns the backend's Policy, or the zero Policy if the backend
// reports none.
func (c *DenyCache) Policy() Policy { return c.backend.policy }

// KeyPolicies returns the backend's (see KeyPolicyReporter).
func (c *DenyCache) KeyPolicies() PolicyFunc {
	if c == nil {
		return nil
	}
	return c.backend.keyPolicies
}
