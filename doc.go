// Package ratelimit decides, per key, whether n units of work may proceed
// now: limiter.Allow(ctx, key, n) answers at once with a Result that says
// whether the work was allowed, how much is left, when to retry and when the
// key is back to its full limit. A denial is a Result, not an error; n == 0
// is a peek. The Limiter interface is Allow alone; every limiter, Composite
// and decorator of this package is also a Decider, with Decide (the whole
// Decision of a call) and Policies (those that apply to a key). All are safe
// for concurrent use. Each section names its guide in the repository.
//
// # Limiters
//
//   - NewTokenBucket, NewRedisTokenBucket: a bucket of burst tokens
//     refilling at a Rate, for "r per second, with bursts of b":
//     NewTokenBucket(PerSecond(r), b).
//   - NewGCRA, NewRedisGCRA: limit per period, deciding exactly as a token
//     bucket of capacity limit refilling limit per period, with one
//     timestamp per key.
//   - NewFixedWindow, NewRedisFixedWindow: limit per window, opened by a
//     key's first counted request; the simplest and the cheapest on Redis,
//     but up to twice the limit around a window's end.
//   - NewSlidingLog, NewRedisSlidingLog: at most limit in any span of the
//     window, exactly, with an exact RetryAfter; one entry per allowed
//     call in the window, so limits up to MaxSlidingLogLimit.
//   - NewCalendarWindow, NewRedisCalendarWindow: limit per minute, hour,
//     day, week or month of the wall clock in a time zone (a Calendar),
//     for quotas that reset at midnight or on the 1st, for every key at
//     once; days across a daylight-saving change last 23 or 25 hours.
//   - NewSlidingCounter, NewRedisSlidingCounter: about limit per window in
//     any span of the window's length, in O(1) per key: the previous fixed
//     window weighted by its share still in the span; its error against
//     an exact sliding count is bounded and documented.
//   - NewConcurrency, NewRedisConcurrency: at most limit units in flight,
//     each held by a Lease until it is released or expires (see
//     Concurrency limits below).
//
// The in-process limiters keep state in memory; the Redis ones decide in one
// atomic script call on the server's clock, shared by every replica, through
// any go-redis v9 client (Cluster included). Each reports its constructor's
// Policy. See docs/limiters.md.
//
// Limiters take their two or three numbers as arguments and the rare rest as
// Options (WithKeyPrefix, WithPolicyFunc, ...), so that the usual call is
// short; the services around them (Guard, DenyCache, Shadow, Prefetch,
// Fleet, PolicyTable, Breaker) take a Config struct, whose zero fields are
// the defaults and each of whose fields documents one knob. The in-process
// constructors take Options and the Redis ones RedisOptions; the options
// that apply to both return a SharedOption, which is each, so an option
// that applies to Redis limiters only (WithKeyPrefix, WithoutCoalescing,
// WithCallerClock) does not compile in process. What the types cannot say
// (WithClock on a Redis limiter but RedisCalendarWindow, WithMaxDebt or
// WithMaxSettle on a concurrency limiter) is refused by the constructor
// with an error wrapping ErrInvalidConfig that names the option. The test
// clock lives in package ratelimittest.
//
// # One decision
//
// A Decision holds the Result, the policy that bound it (Policy), every
// policy that applied (Policies), a Composite's per-part Results (Parts),
// who answered (Source) and a Shadow's WouldDeny. The function Decide asks
// any Limiter. A decorator builds its Decision from its backend's, and
// httplimit and grpclimit read nothing else. See docs/limiters.md.
//
// # Errors
//
// A denial is not an error. Every error this package makes is of one of
// three classes, which errors.Is tells apart (a foreign Limiter's error that
// a decorator passes on is left as it is):
//
//   - ErrCaller, the caller's mistake: ErrInvalidCost, ErrCostExceedsLimit,
//     ErrKeysApart (a Composite's Redis keys in different hash slots),
//     ErrPolicy or ErrInvalidConfig (a policy unread or refused, a limiter
//     never built), ErrLeaseExpired (an Extend of a lease no longer held),
//     ErrInvalidKey (a key longer than WithMaxKeyLength allows), a nil
//     ctx.
//   - ErrCorruptState: one key's data in Redis is not the limiter's own;
//     every other key is decided as before.
//   - ErrBackend: Redis unreachable, a timeout (the call's ctx ended first),
//     a server error, a reply that cannot be read.
//
// A Guard answers only ErrBackend (and a foreign Limiter's errors) by its
// failure policy. See "Errors by class" in docs/production.md.
//
// Errors and hook events show a key as its digest (KeyDigest), so that an
// API key used as a rate-limit key never reaches a log; WithKeysShown shows
// keys whole. See "Keys in errors and hooks" in docs/production.md.
//
// # Concurrency limits
//
// A concurrency limiter is an Acquirer: Acquire(ctx, key, n) takes n units
// of the key's limit in flight and returns the Lease that holds them, or a
// denial that takes nothing. Release gives the units back when the work
// ends; it is idempotent. A lease also ends when its TTL passes, so the
// units of a holder that died come back by themselves; Extend renews it
// for long work, and fails with ErrLeaseExpired once it is no longer held.
// A denial's RetryAfter is the time until enough leases expire, were none
// released: a bound, since a release frees units at once. A Composite with
// a concurrency part and rate parts ("5 in flight and 100 a minute") takes
// all or nothing. The function Acquire asks any Limiter; one that holds
// nothing in flight decides as Decide does. See docs/concurrency.md.
//
// # Several limits in one decision
//
// A Composite allows n only when every part allows it, and then takes n from
// every part; a denial takes nothing from any. A part may derive its key from
// the call's (a user's tenant). On Redis one script request decides all
// parts, whose keys must share a hash slot on a cluster: parts on the
// call's key always do (see Redis keys), and derived keys need one hash
// tag ("{acme}:alice", "{acme}"), or the call is refused (ErrKeysApart).
// NewComposite refuses parts on the call's key that keep every key in one
// place (one limiter twice, two of one configuration). One part may be a
// Concurrency (in process) or a RedisConcurrency (on Redis), for "5 in
// flight and 100 a minute": Acquire takes the slot and the rate units
// together or not at all, and returns the part's Lease. See
// docs/composite.md.
//
// # Costs settled afterwards
//
// Every limiter, Composite, Guard, DenyCache and Shadow is an Adjuster:
// Refund gives units back (a fixed window's only to the window that took
// them, see TakenAt), Settle replaces an estimate by the true cost, into
// debt if need be (at most one limit of it by default, see WithMaxDebt;
// a cost above ten limits is refused, see WithMaxSettle), and Reset
// returns a key to full. On Redis an adjustment
// is sent at most once; WithToken makes a caller's own retry of it safe.
// See docs/composite.md.
//
// # Shadow mode
//
// A Shadow decides and spends every call as if enforced, but lets a denial
// through: Allowed, with WouldDeny, Source FromShadow and the denial in
// Enforced. SetEnforce switches it at run time. See docs/rollout.md.
//
// # Policies per key
//
// WithPolicyFunc makes any of the fourteen limiters choose each call's Policy
// from its key and context: plans and per-customer overrides, changed live.
// A key keeps what it has used across a change of its limit; a sliding
// counter or calendar window counts apart in each window (period and zone)
// its policy gives it, since a count means nothing in another. Nothing is
// kept per policy.
// A Composite's parts may be built with it, each deciding by its key's
// policy (docs/composite.md). A PolicyTable shares such policies, plans
// that keys follow (one write moves a key), and the flags Shadows follow,
// among a fleet through Redis: each replica reads its own copy, which Run
// keeps current from the table in Redis, never from what its channel
// says. See docs/rollout.md and docs/production.md.
//
// # Metrics
//
// WithHooks makes any limiter report every decision to Hooks.Decided (one
// without hooks pays a nil check per call); Guard, DenyCache and Shadow
// report their own. Hooks that also implement AdjustHooks hear every
// Refund, Settle and Reset, and every Release and Extend of a Lease, too.
// The otelratelimit module turns Hooks into OpenTelemetry metrics, leases
// held among them. See docs/rollout.md and docs/production.md.
//
// # Coalescing
//
// A Redis limiter coalesces its calls. A call that finds fewer than 2 script
// calls of its limiter in flight, and none waiting, goes at once, alone.
// Calls that arrive meanwhile go together, up to 128 checks (a Composite's
// request is one per part), in one call of the batch script, which decides
// them in order on one reading of the server's TIME: each gets exactly the
// Result it would have got alone. No timer, and no goroutine through a
// client built with ContextTimeoutEnabled (without it, a call whose ctx has
// a deadline waits for its reply apart from a goroutine that sends its
// script call, so that the deadline holds). A script call is
// sent at most once, never again by go-redis's retries (except through a
// *redis.AutoPipeliner). WithoutCoalescing sends every decision alone.
// docs/redis.md has the rest: routing, a caller that gives up, a failed batch.
//
// # Redis keys
//
// A Redis limiter's key for key is its KeyPrefix, which names its kind and
// its policy (see WithKeyPrefix), then, for a sliding counter or a
// calendar window built WithPolicyFunc, the window (period and zone) of
// the key's policy, then key in a hash tag: "{" + key + "}" for a key
// with no '}'; the key as it is when it has a hash tag of its own
// ("{acme}:alice"), unless that tag opens it and ends it or is followed
// by '#' ("{acme}": "{acme}#{acme}"); otherwise (an empty key, or one
// with a '}' and no tag) "{" + three letters or digits in its slot + "}#"
// + key. No two keys share a Redis key, and every Redis key of one key,
// of any limiter, is in the hash slot the key alone is in (and has the
// same hash tag on a Ring), so that a Composite's parts on one key need no
// braces on a cluster; a PolicyFunc and the hooks see the key as given.
// Two limiters never share a key unless given one prefix on purpose.
//
// # Exactness
//
// Time is kept in integers: nanoseconds in process, microseconds in Redis.
// Where the time per token is a whole number of those units, every decision
// is exact. A clock that goes backwards never creates tokens, and the waits
// include the catching up: in process, time stands still for the keys of a
// shard; on Redis, a token-bucket or GCRA key owes the step its server's
// clock went back, until the clock catches up. While time only moves
// forward, the in-process and Redis limiters decide and adjust identically.
// See docs/exactness.md.
//
// # Memory
//
// An in-process limiter drops keys back at their full limit as it is used,
// with no goroutine: memory is bounded by the keys active within the last
// two refill periods (or windows), and keys in debt. A Redis key expires when
// full. See docs/limiters.md.
//
// # Waiting
//
// Wait blocks until a limiter allows the work, for clients and workers that
// should slow down rather than fail. See docs/limiters.md.
//
// # Running in production
//
// Guard adds a per-call timeout, a failure policy (fail open, fail closed or
// a local fallback) and a circuit breaker, its own or a Breaker that the
// Guards in front of one backend share. A Fleet counts the replicas alive
// through a heartbeat in Redis, and sizes each replica's fallback as its
// share of the shared limit (Fleet.Fallback), which it keeps while Redis is
// away. DenyCache answers floods on denied
// keys locally; a give-back it does not see can make it deny, for up to
// MaxAge (1 s by default), what the backend would now allow. httplimit and
// grpclimit put any Limiter in front of net/http and gRPC servers. See
// docs/production.md (the whole stack) and docs/http-grpc.md.
package ratelimit
