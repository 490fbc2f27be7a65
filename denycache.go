package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// DenyCache wraps a Limiter, typically a Redis one, and answers a flood of
// requests on a denied key locally, without a round trip, for as long as the
// backend cannot possibly allow them.
//
// When the backend denies n for key with RetryAfter r, no request for n or
// more on key can succeed within r: tokens refill no faster than the rate,
// a window does not end early, and other clients only take tokens. So for
// the next r (at most MaxAge), DenyCache denies requests for key of cost n or
// more itself, with the RetryAfter left. Requests for less, peeks, and
// everything after r go to the backend. It never denies what the backend
// would allow, as long as the backend's clock and the DenyCache's run at the
// same rate (the time is taken before the backend is asked, so the round
// trip only shortens what is remembered).
//
// Put it directly around the rate-limiting backend, inside a Guard: a
// fail-closed denial from a Guard is not a verdict of the rate and must not
// be remembered. It reports to Hooks only the calls it answers itself.
//
// Memory is bounded: at most MaxKeys denials, each forgotten once it has
// passed, with no goroutine. A DenyCache is safe for concurrent use. Create
// one with NewDenyCache.
type DenyCache struct {
	backend  Limiter
	hooks    Hooks // nil when nothing listens
	base     clockBase
	maxAge   int64 // ns
	perShard int   // most denials a shard holds
	denials  *keyTable[denial]
}

// denial is a backend's denial of n for a key: until (ns) no request for n or
// more can be allowed.
type denial struct {
	until int64
	at    int64 // when the backend was asked
	n     int
	res   Result
}

// DenyCacheConfig configures a DenyCache. The zero value means a MaxAge of
// 1 s, 100 000 keys, no hooks and the system clock.
type DenyCacheConfig struct {
	// MaxAge is the longest a denial is remembered; 0 means 1 s. Longer
	// saves more calls on long waits; shorter bounds memory in time.
	MaxAge time.Duration
	// MaxKeys is the most keys remembered at once; 0 means 100 000. When
	// full, new denials are not remembered until old ones pass.
	MaxKeys int
	// Hooks receives the calls answered locally; nil means NopHooks.
	Hooks Hooks
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
		backend:  backend,
		hooks:    activeHooks(cfg.Hooks),
		maxAge:   int64(cfg.MaxAge),
		perShard: max(cfg.MaxKeys/shardCount, 1),
		denials:  newKeyTable[denial](int64(cfg.MaxAge)),
	}
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
	if n <= 0 {
		return c.backend.Allow(ctx, key, n)
	}
	reading := c.base.elapsed()
	sh, now := c.denials.lock(key, reading, maxSpan)
	// A cost above the limit goes on to the backend, whose error says so.
	if d, _ := sh.lookup(key); now < d.until && n >= d.n && n <= d.res.Limit {
		res := d.res
		sh.mu.Unlock()
		res.RetryAfter = time.Duration(d.until - now)
		res.ResetAfter = max(res.ResetAfter-time.Duration(now-d.at), res.RetryAfter)
		if c.hooks != nil {
			c.hooks.Decided(Decision{Key: key, Cost: n, Result: res, Source: FromDenyCache, Latency: time.Duration(c.base.elapsed() - reading)})
		}
		return res, nil
	}
	sh.mu.Unlock()

	res, err := c.backend.Allow(ctx, key, n)
	if err != nil || res.Allowed || res.RetryAfter <= 0 {
		return res, err
	}
	until := reading + min(int64(res.RetryAfter), c.maxAge)
	sh, now = c.denials.lock(key, reading, maxSpan)
	if _, w := sh.lookup(key); until > now && (w != absent || sh.size() < c.perShard) {
		sh.write(key, w, denial{until: until, at: reading, n: n, res: res}, until)
	}
	sh.mu.Unlock()
	return res, nil
}
