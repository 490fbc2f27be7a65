// Package ratelimit decides, per key, whether n units of work may proceed
// now: limiter.Allow(ctx, key, n) answers at once with a Result that says
// whether the work was allowed, how much is left, when to retry and when the
// key is back to its full limit. A denial is a Result, not an error.
//
// # Algorithms
//
// Token bucket (NewTokenBucket, NewRedisTokenBucket): each key has a bucket
// of capacity tokens that refills continuously at a rate. Bursts up to the
// capacity pass at once; over time, work is held to the rate. Choose it when
// you think in "N per second, with bursts of C".
//
// GCRA (NewGCRA, NewRedisGCRA): the generic cell rate algorithm, configured as
// "limit per period". It decides exactly as a token bucket of capacity limit
// and rate limit/period, and stores a single timestamp per key. Choose it when
// you think in "L per period" and want the smallest state.
//
// Fixed window (NewFixedWindow, NewRedisFixedWindow): a key may do limit units
// of work in a window that opens at its first counted request and lasts the
// window's length. It is the simplest to explain to users, and the cheapest on
// Redis, but lets up to twice the limit through around a window's end.
//
// The in-process limiters keep state in memory, for one process. The Redis
// limiters keep it in Redis and decide in one atomic script call on the
// server's clock, so every replica of a service shares one limit; they work
// with any go-redis v9 client, Redis Cluster included.
//
// Each of the six limiters reports its constructor's Policy (its Policy
// method): the most that can be taken at once and the time from empty back
// to full, as clients are told it (httplimit puts it in the rate-limit
// headers).
//
// # One decision
//
// Allow returns a Result; Decide returns the whole Decision of the same
// call, as every layer tells it: the Result, the policy that bound it
// (Policy, a NamedPolicy with its name, Limit and Window), every policy
// that applied (Policies, with Policy at index Bound), a Composite's
// per-part Results (Parts), who answered (Source: the backend, a Guard's
// fallback, fail-open or fail-closed answer, a DenyCache's remembered
// denial, or a Shadow), and, for a call a Shadow let through against a
// denial, WouldDeny with the denial in Enforced. Every limiter, Composite
// and decorator of this package is a Decider: Decide, and Policies(ctx,
// key), the policies that apply to a key's calls without deciding
// anything. A limiter of one policy names it "default". The function
// Decide asks any Limiter: a Limiter of another package, which tells only
// a Result, is given one policy "default" of the Result's Limit (when that
// is > 0). A
// decorator builds its Decision from its backend's, and httplimit and
// grpclimit read nothing else.
//
// # Errors
//
// A denial is not an error. Every error this package makes is of one of
// three classes, which errors.Is tells apart (the error of a Limiter of
// another package that a decorator passes on is left as it is):
//
//   - ErrCaller, the caller's mistake: a bad cost (ErrInvalidCost), a cost
//     above the limit (ErrCostExceedsLimit), keys a store cannot serve
//     together (ErrKeysApart: a Composite's Redis keys in different hash
//     slots of a cluster), a policy that cannot be read or is refused
//     (ErrPolicy, ErrInvalidConfig), a limiter that was never built
//     (ErrInvalidConfig), or a nil ctx.
//   - ErrCorruptState: one key's data in Redis is not the limiter's own.
//     Every other key is decided as before.
//   - ErrBackend: a failure of the backend: Redis unreachable, a timeout
//     (the call's ctx ended first), a server error, or a reply that cannot
//     be read.
//
// A Guard answers only ErrBackend, and the errors of a Limiter of another
// package (which have no class), by its failure policy, and counts only
// those toward its breaker, unless its caller's ctx has ended; it returns
// every other error to its caller as it is. httplimit answers a cost above
// the limit 413, lets a request through on a backend failure unless
// WithFailClosed (503), and answers any other limiter error 503 unless
// WithPolicyErrorsPass.
//
// # Several limits in one decision
//
// A Composite holds several parts, each a limiter with its own algorithm and
// configuration and, optionally, a key derived from the call's (a user's and
// its tenant's), and allows n only when every part allows it: then it takes
// n from every part, and a denial takes nothing from any. In process the
// parts are decided under all their locks at once; on Redis one script
// request decides them all, coalesced with other calls. Its Result is that
// of the part that bound the decision, with the longest RetryAfter and
// ResetAfter of all parts; its Decision names the part that bound
// (Policy, Bound), lists every part's policy (Policies: httplimit sends
// every one in its headers) and gives every part's Result (Parts). On
// Redis Cluster the parts' Redis keys must share a hash slot: give them one
// hash tag, as in "{acme}:alice" for the user and "{acme}" for the tenant;
// a call whose keys do not is refused with an error wrapping ErrKeysApart,
// and nothing is spent.
//
// # Costs settled afterwards
//
// Every limiter, Composite, Guard, DenyCache and Shadow is an Adjuster. Refund gives
// units back; Settle replaces the estimate an allowed call took by the true
// cost, giving back the difference or taking the rest, into debt if need
// be, so that the next calls wait until it is paid; Reset returns a key to
// full. A fixed window gives units back only to the window that took them
// (TakenAt). On Redis an adjustment is a request of the same batch script,
// sent at most once; WithToken makes a caller's own retry of it safe, the
// token being remembered for SettleTokenTTL on the key's server, in its hash
// slot on a cluster, whatever the key.
// A DenyCache forgets the denials a give-back through it can change,
// those of other keys that share a Composite part's key included.
//
// # Shadow mode
//
// A Shadow runs a limiter without enforcing it: every call is decided and
// spent as if enforced, and a denial is let through: its Decision has
// Allowed true, WouldDeny true, Source FromShadow and the denial in
// Enforced, and Hooks get it so. SetEnforce switches to enforcing at run
// time.
//
// # Policies per key, changed live
//
// WithPolicyFunc makes any limiter choose each call's Policy by a function
// of the call's key and context: plans (free, pro, enterprise) and
// per-customer overrides, read from wherever the program keeps them, so a
// customer's limit changes on its next call without a redeploy. A key keeps
// what it has used across a change: a token bucket or GCRA converts the
// units a key owes to the new rate (raised, the difference is there at
// once; lowered, the key may be in debt), and a fixed window checks its
// count against the new limit. Policies(ctx, key) returns the key's
// policy, also through a Guard, DenyCache or Shadow; a DenyCache answers
// from a denial only while the key's policy is the one it was made under;
// and httplimit and grpclimit report each key's own policy.
// Nothing is kept per policy, so a policy per customer costs no memory.
//
// # Metrics
//
// WithHooks makes any limiter report every decision to Hooks.Decided as an
// Event: its name (WithName), the key and cost, the call's Decision (the
// key's policy, the Result, who answered), its error and its latency; a
// limiter without hooks pays one nil check per call. Guard, DenyCache and
// Shadow report what they decide themselves. The otelratelimit module
// turns Hooks into OpenTelemetry metrics.
//
// # Coalescing
//
// A Redis limiter coalesces its calls. A call that finds fewer than 2 script
// calls of its limiter in flight goes at once, alone: no timer, no added
// latency. Calls that arrive while 2 are in flight wait in a queue; when a
// script call returns, its leader answers its calls and hands the queue (up
// to 128 requests; 128 checks for a Composite, whose requests check each
// part) to the first queued call, which sends it and answers the others.
// After a batch of several calls, when fewer calls wait than it has just
// answered, the leader first yields the processor once (runtime.Gosched),
// so that the callers it answered run first, and those that call again
// while no batch can go join the queue: larger batches, fewer script calls
// (bench/README.md). The yield delays the next batch by what the Go
// scheduler runs first; in a process whose every processor is busy, that
// may be a scheduling round. The batch
// script decides a call's requests in order, on one reading of the server's
// TIME, and writes each key before the next request reads it, so every call
// gets exactly the Result it would have got alone, calls on the same key in
// one batch see each other's effects, and a key holding foreign state
// answers only its own call with ErrCorruptState. No goroutine is started:
// every caller returns as soon as its answer is there.
//
// Through a *redis.Client (one server, or a failover client) a batch is one
// script call. Through a *redis.ClusterClient it is one script call per hash
// slot, since a script may only touch the keys of one slot, and the calls
// for each node go in one pipeline; through a *redis.Ring, one per hash tag,
// pipelined to each shard. Through any other redis.Scripter every decision
// is a call of its own.
//
// A call whose ctx ends while it waits in the queue returns the ctx's error
// at once and is not sent. One whose batch is already on the wire also
// returns at once, but its decision may still be made on the server, as with
// a timeout of a call of its own. A batch is sent with no caller's
// cancellation and with the latest of its callers' deadlines (none if one has
// none), so one caller giving up never fails the others. A server error or
// a lost connection fails the calls of that batch only, each with an error
// wrapping the cause. NOSCRIPT (after SCRIPT FLUSH, a restart or a failover)
// is answered by sending the script again with EVAL.
//
// A script call is sent at most once. go-redis retries a command whose
// connection failed after it was sent (when MaxRetries >= 0), though the
// server may have run it; the Redis limiters let go-redis send a script call
// again only when it follows a cluster's MOVED or ASK to another node, so a
// retry never decides a batch twice: the calls of a batch whose reply was
// lost get an error, and their decisions may have been made. A
// *redis.AutoPipeliner, which reads a command's arguments before it sends
// them, is the exception: through it calls go with go-redis's own retries.
//
// WithoutCoalescing makes every decision a script call of its own: for a
// client shared with latency-sensitive work that should not wait behind a
// batch, or to keep what one lost reply puts at risk to one decision.
//
// # Exactness
//
// Time is kept in integers: nanoseconds in process, microseconds in Redis.
// Where the time per token is a whole number of those units, every decision
// is exact however many calls are made. A clock that goes backwards never
// creates tokens, and the waits include the catching up. In process, time
// stands still for the keys of a shard until the clock catches up. On Redis,
// a token-bucket or GCRA key keeps the time at which it is full again, so a
// server clock that steps back makes the key owe the step until the clock
// catches up: with 5 of 10 tokens left (1 a second) and the clock set back
// 10 s, it has 0 left and denies for 6 s, where an in-process bucket still
// has 5. The two may differ until the clock catches up; on schedules where
// time only moves forward they decide identically.
//
// # Memory
//
// An in-process limiter holds state for keys that are not at their full
// limit, and for full ones until it drops them. Keys that have refilled are
// dropped as the limiter is used, without background goroutines, so memory
// is bounded by the keys active within the last two refill periods (or
// windows), and keys still in debt after a Settle.
//
// # Waiting
//
// Wait blocks until a limiter allows the work, for clients and workers that
// should slow down rather than fail.
//
// # Running in production
//
// Guard wraps a limiter whose backend can fail: a per-call timeout, a
// failure policy (fail open, fail closed, or a local fallback limiter) and a
// circuit breaker; while the backend fails, its answers name the backend's
// policies. DenyCache answers floods on denied keys locally, any cost that a
// remembered denial still bounds, as the backend would answer it if nothing
// else had touched the key; a give-back it does not see (another
// replica's) can make it deny, for up to MaxAge (1 s by default), what the
// backend would now allow. Both report to Hooks, for metrics. Package
// httplimit puts any Limiter in front of a net/http handler with the
// standard rate-limit headers.
//
// # Guides
//
// The repository has a guide to each subject, in docs/:
// docs/limiters.md (the limiters), docs/redis.md (Redis and coalescing),
// docs/production.md (running in production), docs/composite.md (several
// limits, settled costs), docs/rollout.md (rolling out a limit),
// docs/http-grpc.md (HTTP and gRPC) and docs/exactness.md (exactness and
// clocks).
package ratelimit
