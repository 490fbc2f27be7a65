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
// Every limiter reports its Policy: the most that can be taken at once and
// the time from empty back to full, as clients are told it (httplimit puts
// it in the rate-limit headers). PolicyOf reads it from any Limiter.
//
// # Coalescing
//
// A Redis limiter used through a *redis.Client (one server, or a failover
// client) coalesces its calls. A call that finds fewer than 4 script calls
// of its limiter in flight goes at once, alone: no timer, no added latency.
// Calls that arrive while 4 are in flight wait in a queue; when a script
// call returns, its leader hands the queue (up to 128 requests) to the first
// queued call, which sends it as one call of the batch script and answers
// the others. The script decides them in order, on one reading of the
// server's TIME, and writes each key before the next request reads it, so
// every call gets exactly the Result it would have got alone, calls on the
// same key in one batch see each other's effects, and a key holding foreign
// state answers only its own call with ErrCorruptState. No goroutine is
// started: every caller returns as soon as its answer is there.
//
// A call whose ctx ends while it waits in the queue returns the ctx's error
// at once and is not sent. One whose batch is already on the wire also
// returns at once, but its decision may still be made on the server, as with
// a timeout of a call of its own. A batch is sent with no caller's
// cancellation and with the latest of its callers' deadlines (none if one has
// none), so one caller giving up never fails the others. A server error or
// a lost connection fails the calls of that batch only, each with an error
// wrapping the cause. NOSCRIPT (after SCRIPT FLUSH, a restart or a failover)
// is answered by go-redis sending the script with EVAL. go-redis retries a
// command whose connection failed when MaxRetries >= 0, and a retried batch
// may then be decided twice, as a retried single call may: use
// MaxRetries: -1 with the Redis limiters, or WithoutCoalescing to keep what
// a lost reply puts at risk to one decision. Through a cluster or ring
// client, whose calls are routed by their first key, every decision is a
// script call of its own.
//
// # Exactness
//
// Time is kept in integers: nanoseconds in process, microseconds in Redis.
// Where the time per token is a whole number of those units, every decision
// is exact however many calls are made. A clock that goes backwards never
// creates tokens: time stands still until the clock catches up.
//
// # Memory
//
// An in-process limiter holds state only for keys that are not at their full
// limit. Keys that have refilled are dropped as the limiter is used, without
// background goroutines, so memory is bounded by the keys active within the
// last refill period.
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
// circuit breaker. DenyCache answers floods on denied keys locally without
// ever denying what the backend would allow. Both report to Hooks, for
// metrics. Package httplimit puts any Limiter in front of a net/http handler
// with the standard rate-limit headers.
package ratelimit
