package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/redis/go-redis/v9"
)

// RedisConcurrency is a concurrency limiter kept in Redis: at most limit
// units in flight per key, shared by every process using the same Redis,
// each held by a Lease from Acquire until Release gives it back or its TTL
// passes (see Acquirer).
//
// It decides exactly as a Concurrency of the same limit and TTL does on the
// same schedule: Acquire(n) takes n units when the units held, plus n, are
// within the limit, and Remaining is then the units left free and
// ResetAfter the time until every lease now held has expired, were none
// released or extended. A denial takes nothing; its RetryAfter is the time
// until enough leases have expired for n to fit, were none released or
// extended: for n = 1, the earliest expiry of a lease of the key. It is an
// honest bound, not a promise: a release frees units at once, so a denied
// caller may well succeed sooner, and one that waits RetryAfter may find the
// units taken again. A lease that has expired holds nothing, whether or not
// it has been released. Allow(n) acquires n units that nobody can release:
// they come back when their TTL passes.
//
// Time is the server's TIME, in whole microseconds. Each Acquire, Release
// and Extend is one request of the batch script, an atomic step on the
// server, coalesced with the limiter's other calls as the other Redis
// limiters' are (WithoutCoalescing sends each alone). A key whose Redis
// key (see KeyPrefix) holds one lease is a STRING of it (its name, units
// and expiry), written in one call, with a TTL until it expires; a key
// given a second lease becomes a HASH of the units its leases hold, the
// earliest and latest of their expiries, and a field per lease (its units
// and expiry), with a TTL until its latest lease expires (whole ms,
// rounded up); a Release that leaves it one lease that holds makes it the
// STRING of that lease again. Leases that have expired are swept by the
// first call that finds one due, a key whose leases have all been
// released is deleted, and one whose leases have all expired expires: a
// key holds the leases that hold units (no more than the largest limit
// its policy has given it, at most MaxInFlight) and those that expired
// since its last sweep. A server clock that steps back makes leases last
// longer, never shorter. Leases are named by a random 64-bit number drawn
// when the limiter is built, and a counter, so that the leases of every
// process are apart.
//
// Calls with n < 0 or n > limit are answered without a round trip; n == 0
// reads without creating the key. Redis errors, timeouts and malformed
// replies are returned wrapped in ErrBackend, with Allowed false. An Acquire
// that fails so may have taken its units all the same (the server may have
// run the call whose reply was lost): they come back when that lease's TTL
// passes. A client that retries such a call (go-redis retries a read
// timeout) sends the same lease again, which takes nothing more. A Release that fails so leaves the lease held until it is
// released or expires. A key holding anything else (a value of another
// type, other fields or values) is left exactly as it is, and the call
// returns an error naming it and wrapping ErrCorruptState; a call checks
// what it reads: the key's type, its counters or its one lease, the lease
// it names, and the whole HASH whenever it reads it all (to sweep, to
// deny, and to find the next latest lease when the latest is released or
// shortened). Unlike the other Redis limiters' keys, its keys are told by
// their content, not their TTL, which no call reads (every write that
// moves the latest expiry sets it).
//
// A server that loses its data (a restart without persistence, a FLUSHALL,
// a failover to a replica that missed the last writes) loses its leases:
// their units are free at once, their Extend fails with an error wrapping
// ErrLeaseExpired and their Release does nothing. Until the work they
// covered notices (its next Extend) or ends, it runs beside the leases
// granted since, beyond the limit. On one server's state no unit is ever
// held by two leases that are both valid.
//
// A RedisConcurrency is safe for concurrent use as far as its client is.
// The zero value is not usable (its calls return an error wrapping
// ErrInvalidConfig); create one with NewRedisConcurrency.
type RedisConcurrency struct {
	redisShell
	nonce [16]byte // the limiter's random number, in hex: the start of its leases' names
	seq   atomic.Uint64
}

// NewRedisConcurrency returns a RedisConcurrency of at most limit units in
// flight per key, kept in Redis through client (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client), whose leases last
// ttl unless extended. Its Policy is {limit, ttl}, reported with InFlight
// set. It takes WithKeyPrefix, WithoutCoalescing, WithCallerClock,
// WithPolicyFunc (a key's Policy{Limit, Window} is its limit and TTL),
// WithMaxKeyLength, WithKeysShown, WithHooks and WithName; by default the
// key prefix is DefaultKeyPrefix + "inflight:<limit>:<ttl>:" (see
// KeyPrefix). It returns an error wrapping ErrInvalidConfig for a nil
// client, a limit <= 0 or above MaxInFlight, a ttl below 1 ms, not a whole
// number of microseconds, or above about 73 years, or a nil or invalid
// option or one that does not apply (WithClock, WithMaxDebt, WithMaxSettle).
func NewRedisConcurrency(client redis.Scripter, limit int, ttl time.Duration, opts ...RedisOption) (*RedisConcurrency, error) {
	const kind = "NewRedisConcurrency"
	cfg, err := applyRedisOptions(kind, onRedis, opts)
	if err == nil {
		err = inFlightOptions(kind, cfg)
	}
	if err != nil {
		return nil, err
	}
	if isNil(client) {
		return nil, fmt.Errorf("%w: %s: nil Redis client", ErrInvalidConfig, kind)
	}
	policy := Policy{Limit: limit, Window: ttl}
	_, micros, err := checkRedisInFlight(kind, policy)
	if err != nil {
		return nil, err
	}
	own := redisbatch.NewLimit(redisbatch.Concurrency, int64(limit), micros)
	r := redisLimiter{
		k: concurrencyKind{}, name: "RedisConcurrency", client: client, limit: limit, own: own,
		prefix: redisPrefix(redisParams{
			k: concurrencyKind{}, defaultPrefix: concurrencyPrefix, limit: limit, param: micros,
		}, cfg),
		obs:   newInFlightObserver(cfg, kind, policy),
		clock: cfg.callerClock,
	}
	if r.policyFunc, err = newPolicyFunc(cfg, r.name, policy, checkRedisInFlight); err != nil {
		return nil, err
	}
	limits := []*redisbatch.Limit{own}
	if r.policyFunc != nil {
		limits = nil // each request carries its key's
		r.limits = redisbatch.NewLimitCache(redisbatch.Concurrency)
		r.resetLimit = r.limits.Get(r.policyFunc.defLimit, r.policyFunc.defParam)
	}
	r.send = newSender(client, limits, 1, !cfg.noCoalesce, r.clock, redisbatch.Concurrency)
	c := &RedisConcurrency{redisShell: redisShell{r: r}}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails: it crashes the program first
	hex.Encode(c.nonce[:], b[:])
	return c, nil
}

// checkRedisInFlight checks a RedisConcurrency's policy as checkInFlight
// does, and returns its limit and its TTL in µs.
func checkRedisInFlight(kind string, p Policy) (int64, int64, error) {
	limit, ttl, err := checkInFlight(kind, p)
	return limit, ttl / int64(time.Microsecond), err
}

// errRedisConcurrencyNotBuilt is the error of a call on a nil or
// zero-value *RedisConcurrency.
var errRedisConcurrencyNotBuilt = notBuilt("RedisConcurrency")

// built reports whether c came from NewRedisConcurrency.
func (c *RedisConcurrency) built() bool { return c != nil && c.r.client != nil }

// Acquire takes n units for key and returns the Lease that holds them, or
// a denial that takes nothing (see Acquirer and RedisConcurrency). ctx
// bounds the round trip; a nil ctx is an error.
func (c *RedisConcurrency) Acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	if !c.built() {
		return Lease{}, Decision{}, errRedisConcurrencyNotBuilt
	}
	return c.acquire(ctx, key, n, true)
}

// Allow takes n units for key that come back when the limiter's TTL (the
// key's policy's Window) has passed: no one can release them. See
// RedisConcurrency.
func (c *RedisConcurrency) Allow(ctx context.Context, key string, n int) (Result, error) {
	if !c.built() {
		return Result{}, errRedisConcurrencyNotBuilt
	}
	_, d, err := c.acquire(ctx, key, n, false)
	return d.Result, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy, named "default" and InFlight, is the key's.
func (c *RedisConcurrency) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if !c.built() {
		return Decision{}, errRedisConcurrencyNotBuilt
	}
	_, d, err := c.acquire(ctx, key, n, false)
	return d, err
}

// Policies returns the one policy of key's calls, named "default" and
// InFlight: the limiter's own, or the key's for a limiter built
// WithPolicyFunc (see Decider). It asks nothing of Redis.
func (c *RedisConcurrency) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if !c.built() {
		return nil, errRedisConcurrencyNotBuilt
	}
	p := c.r.obs.policy
	var err error
	if c.r.policyFunc != nil {
		p, _, _, err = c.r.policyFunc.resolve(ctx, key)
	}
	return inFlightPolicies(p, c.r.obs.own), err
}

// Policy returns the limiter's own policy: {limit, ttl}; the zero Policy
// for a nil or zero-value c.
func (c *RedisConcurrency) Policy() Policy {
	if !c.built() {
		return Policy{}
	}
	return c.r.obs.policy
}

// KeyPrefix returns what every Redis key of c starts with: the Redis key
// of key is KeyPrefix() and key in a hash tag (see the package doc, Redis
// keys). It is DefaultKeyPrefix + "inflight:<limit>:<ttl>:", the TTL in
// whole microseconds; built WithPolicyFunc, DefaultKeyPrefix +
// "inflight:keyed:<limit>:<ttl>:" of the constructor's parameters; given
// WithKeyPrefix(p), p + "inflight:". It is "" for a nil
// *RedisConcurrency.
func (c *RedisConcurrency) KeyPrefix() string {
	return c.shell().KeyPrefix()
}

// policyOf returns the policy of a call for key, its limit, its TTL in µs
// and the script's limit it is sent with (nil for the limiter's own).
func (c *RedisConcurrency) policyOf(ctx context.Context, key string) (Policy, int, int64, *redisbatch.Limit, error) {
	if c.r.policyFunc == nil {
		return c.r.obs.policy, c.r.limit, c.r.own.Param, nil, nil
	}
	p, limit, micros, err := c.r.policyFunc.resolve(ctx, key)
	if err != nil {
		return p, int(limit), micros, nil, err
	}
	return p, int(limit), micros, c.r.limits.Get(limit, micros), nil
}

// leaseName returns the name of c's lease id in its key's HASH: c's random
// number and id, in hex.
func (c *RedisConcurrency) leaseName(id uint64) string {
	var b [32]byte
	n := copy(b[:], c.nonce[:])
	return string(strconv.AppendUint(b[:n], id, 16))
}

// acquire is Acquire, whose lease is a Lease only when leased (Allow's
// units cannot be released), on a built c; it reports to the hooks.
func (c *RedisConcurrency) acquire(ctx context.Context, key string, n int, leased bool) (Lease, Decision, error) {
	var start time.Time
	if c.r.obs.hooks != nil {
		start = time.Now()
	}
	lease, res, p, err := c.take(ctx, key, n, leased)
	d := oneDecision(res, inFlightPolicies(p, c.r.obs.own), c.r.obs.rules)
	if c.r.obs.hooks != nil {
		c.r.obs.hooks.Decided(Event{
			Limiter: c.r.obs.name, Key: c.r.obs.keys.event(c.r.obs.hooks, key), Cost: n, Decision: d, Lease: lease, Err: err,
			Latency: time.Since(start),
		})
	}
	return lease, d, err
}

// take decides n for key in Redis, and returns its lease, its Result and
// its policy.
func (c *RedisConcurrency) take(ctx context.Context, key string, n int, leased bool) (Lease, Result, Policy, error) {
	if ctx == nil {
		return Lease{}, Result{Limit: c.r.limit}, c.r.obs.policy, fmt.Errorf("ratelimit: %s: %w", c.r.name, errNilContext)
	}
	if err := c.r.obs.keys.check(c.r.name, key); err != nil {
		return Lease{}, Result{Limit: c.r.limit}, c.r.obs.policy, err
	}
	p, limit, micros, lim, err := c.policyOf(ctx, key)
	if err == nil {
		err = checkCost(n, limit)
	}
	if err != nil {
		return Lease{}, Result{Limit: limit}, p, err
	}
	req := &redisbatch.Request{Ctx: ctx, Key: c.r.redisKey(key, 0), N: n, Limit: lim}
	var id uint64
	if n > 0 {
		id = c.seq.Add(1)
		req.Lease = c.leaseName(id)
	}
	res, err := c.r.request(req, limit)
	if err != nil || !res.Allowed || n == 0 || !leased {
		return Lease{}, res, p, err
	}
	return Lease{holder: c, key: key, id: id, units: n, ttl: time.Duration(micros) * time.Microsecond}, res, p, nil
}

// releaseLease releases l, one of c's leases.
func (c *RedisConcurrency) releaseLease(ctx context.Context, l Lease) error {
	var start time.Time
	if c.r.obs.adjust != nil {
		start = time.Now()
	}
	held, err := c.leaseOp(ctx, redisbatch.Release, l, c.r.resetLimit)
	if c.r.obs.adjust != nil {
		c.r.obs.reportAdjust(AdjustRelease, l.key, l.units, 0, nil, Result{Allowed: held}, err, time.Since(start))
	}
	return err
}

// extendLease renews l, one of c's leases.
func (c *RedisConcurrency) extendLease(ctx context.Context, l Lease) (Lease, error) {
	var start time.Time
	if c.r.obs.adjust != nil {
		start = time.Now()
	}
	_, limit, micros, lim, err := c.policyOf(ctx, l.key)
	if err == nil {
		var renewed bool
		renewed, err = c.leaseOp(ctx, redisbatch.Extend, l, lim)
		switch {
		case err == nil && renewed:
			l.ttl = time.Duration(micros) * time.Microsecond
		case err == nil:
			err = fmt.Errorf("ratelimit: %s: key %s: %w (%v)", c.r.name, c.r.obs.keys.quote(l.key), ErrLeaseExpired, l)
		}
	}
	if c.r.obs.adjust != nil {
		c.r.obs.reportAdjust(AdjustExtend, l.key, l.units, l.units, nil, Result{Allowed: err == nil, Limit: limit}, err, time.Since(start))
	}
	return l, err
}

// leaseOp sends op, a Release or an Extend of l under the script's limit
// lim (nil: the limiter's own), and reports whether the lease held units
// (a Release) or was renewed (an Extend).
func (c *RedisConcurrency) leaseOp(ctx context.Context, op redisbatch.Op, l Lease, lim *redisbatch.Limit) (bool, error) {
	if ctx == nil {
		return false, fmt.Errorf("ratelimit: %s: %w", c.r.name, errNilContext)
	}
	p := &redisbatch.Request{Ctx: ctx, Key: c.r.redisKey(l.key, 0), Op: op, Limit: lim, Lease: c.leaseName(l.id)}
	v, err := c.r.verdict(p)
	if err != nil {
		return false, err
	}
	if v.Allowed != 0 && v.Allowed != 1 || v.Remaining != 0 || v.RetryAfter != 0 || v.ResetAfter != 0 {
		return false, fmt.Errorf("ratelimit: %s %s: %w: %w: %q", c.r.name, c.r.keyName(p), ErrBackend, errOutOfRange, p.Record)
	}
	return v.Allowed == 1, nil
}

// Reset drops every lease of key, deleting its Redis key: their units are
// free at once, and their Extend fails with ErrLeaseExpired. It is for
// administration (a key stuck by a holder that will not come back before
// its TTL). ctx bounds the round trip.
func (c *RedisConcurrency) Reset(ctx context.Context, key string) error {
	if !c.built() {
		return errRedisConcurrencyNotBuilt
	}
	return c.r.resetReported(ctx, key)
}

// shell returns c's shared part; a zero one, which answers that it was
// not built, for a nil c.
func (c *RedisConcurrency) shell() *redisShell {
	if c == nil {
		return &redisShell{}
	}
	return &c.redisShell
}
