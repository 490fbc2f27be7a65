package ratelimit

import "fmt"

// WithCallerClock makes a Redis limiter decide on c's time instead of the
// server's TIME: for servers whose scripts may not call TIME (some managed
// offerings refuse it), or that sit behind a proxy where the server's
// clock is not one clock. Each script call carries c's time, read once per
// call (once per coalesced batch, when the batch is sent), in whole
// microseconds of Unix time rounded down, and the limiter runs a variant
// of the batch script, with its own SHA1, that never calls TIME. A nil c
// is the system clock (time.Now); a typed nil such as (*ratelimittest.Clock)(nil) is
// an error wrapping ErrInvalidConfig. c must read Unix time (a ratelimittest.Clock
// set to a date, not one started at the zero time.Time) and be safe for
// concurrent use.
//
// It applies to every Redis limiter of this package: RedisTokenBucket,
// RedisGCRA, RedisFixedWindow, RedisSlidingLog, RedisSlidingCounter,
// RedisCalendarWindow and RedisConcurrency. It is a RedisOption, so passing
// it to an in-process limiter's constructor (or a Fleet's Fallback) does not
// compile. WithClock still
// does not apply to the Redis limiters, but for RedisCalendarWindow, whose
// windows' bounds come from WithClock's clock when it is given and from c
// otherwise. A Composite's Redis parts are decided in one script call on
// one time, so they must all decide on the server's TIME, or all on the
// same c (equal values of one comparable type, such as one *ratelimittest.Clock):
// NewComposite fails with ErrInvalidConfig naming the two parts' clocks
// otherwise. A Settle's TakenAt becomes an age on c. Fleet and PolicyTable
// take a clock of their own in their configs (FleetConfig.CallerClock,
// PolicyTableConfig.CallerClock). The Decisions are those of the server's
// TIME at the same time: on one clock, every Redis limiter decides as its
// in-process twin on the same schedule, as it does on the server's TIME
// (but the fixed window, whose windows still run on the server's key
// expiry, in real time).
//
// A reading before 1970 or at or after 2^52 µs of Unix time (about the
// year 2112), which the script cannot decide on, fails the call (every
// call of its batch) with an error wrapping ErrInvalidConfig, of class
// ErrCaller, before anything is sent: nothing changes in Redis. The script
// checks the time again and refuses one out of that range with an error
// (ErrBackend) before it writes anything.
//
// Clients whose clocks disagree may share keys. A key keeps the latest
// time any client wrote to it, as it does when the server's clock steps
// back (a tat never moves back, a log's entry is stamped no earlier than
// its newest, a count of a later window stays), so a client whose clock
// is behind never sees more units than a client at that latest time:
// it waits longer. A key's TTL is computed from its writer's clock, and
// ends when that writer sees the key full. A client ahead of another by
// D takes units that one would have had to wait for; what the tests
// (TestCallerClockSkew*, two clients 10 s apart sharing a key over random
// schedules) measure beyond what one clock allows:
//
//   - RedisTokenBucket, RedisGCRA: at most min(limit, ⌈D × rate⌉) units in
//     any span (rate = limit per period). Measured: 5 for 20 per 40 s
//     (⌈D × rate⌉ = 5, reached), 3 for 4 per 2 s (bound 4); a client ahead
//     of a key just emptied by the other takes exactly ⌈D × rate⌉, capped
//     at the limit, at once.
//   - RedisFixedWindow: nothing; its decisions do not read the time (its
//     windows run on the server's key expiry): a skewed run decides call
//     for call as a run on one clock.
//   - RedisSlidingLog: an entry counts for every client for at least
//     W − D after it is taken, so any span shorter than W − D passes at
//     most limit units, and any span of W at most limit × ⌈W / (W − D)⌉.
//     Measured: 6 beyond 10 per 20 s; with W <= D there is no bound
//     (4 beyond 4 per 4 s).
//   - RedisSlidingCounter: the client ahead weighs the previous window's
//     count by D/W less, about ⌈limit × D / W⌉ units more. Measured: 4
//     beyond a log's bound for 10 per 20 s, where one clock already
//     passes 1.
//   - RedisCalendarWindow: each client counts in the window of its own
//     clock, so within D of a boundary both windows take units: a window
//     of one clock may pass up to 3 × limit. Measured: 9 beyond 10 per
//     minute.
//   - RedisConcurrency: a lease's expiry is on its granting client's
//     clock, and it holds for every client for at least TTL − D, so at
//     most limit × ⌈TTL / (TTL − D)⌉ units are held at once. Measured: 4
//     beyond 5 for a TTL of 20 s; with TTL <= D a lease granted by a
//     client behind holds nothing for one ahead, and there is no bound
//     (10 beyond 3 for a TTL of 4 s).
//
// Keep clients' clocks synchronized (NTP) well within every period,
// window and lease TTL.
func WithCallerClock(c Clock) RedisOption {
	return redisOnly(func(cfg *config) error {
		switch {
		case c == nil:
			c = systemClock{}
		case isNil(c):
			return fmt.Errorf("%w: WithCallerClock: a nil %T; give nil itself for the system clock", ErrInvalidConfig, c)
		}
		cfg.callerClock = c
		return nil
	})
}
