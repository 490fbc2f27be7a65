package ratelimit

import "fmt"

// WithCallerClock makes a Redis limiter decide on c's time instead of the
// server's TIME: for servers whose scripts may not call TIME (some managed
// offerings refuse it), or that sit behind a proxy where the server's
// clock is not one clock. Each script call carries c's time, read once per
// call (once per coalesced batch, when the batch is sent), in whole
// microseconds of Unix time rounded down, and the limiter runs a variant
// of the batch script, with its own SHA1, that never calls TIME. A nil c
// is the system clock (time.Now); a typed nil such as (*FakeClock)(nil) is
// an error wrapping ErrInvalidConfig. c must read Unix time (a FakeClock
// set to a date, not one started at the zero time.Time) and be safe for
// concurrent use.
//
// It applies to every Redis limiter of this package: RedisTokenBucket,
// RedisGCRA, RedisFixedWindow, RedisSlidingLog, RedisSlidingCounter,
// RedisCalendarWindow and RedisConcurrency; an in-process limiter (or a
// FleetShare) built with it fails with ErrInvalidConfig. WithClock still
// does not apply to the Redis limiters, but for RedisCalendarWindow, whose
// windows' bounds come from WithClock's clock when it is given and from c
// otherwise. A Composite's Redis parts are decided in one script call on
// one time, so they must all decide on the server's TIME, or all on the
// same c (equal values of one comparable type, such as one *FakeClock):
// NewComposite fails with ErrInvalidConfig naming the two parts' clocks
// otherwise. Fleet and PolicyTable still read the server's TIME (see
// docs/redis.md).
//
// A reading before 1970 or at or after 2^52 µs of Unix time (about the year
// 2112), which the script cannot decide on, fails the call (every call of
// its batch) with an error wrapping ErrInvalidConfig, of class ErrCaller,
// before anything is sent: nothing changes in Redis. The script checks the
// time again and refuses one out of that range with an error (ErrBackend)
// before it writes anything.
//
// Clients whose clocks disagree share keys safely in this sense: a key
// keeps the latest time any client wrote to it, as it does for a server
// clock that steps back, so a client whose clock is behind that time never
// gets a unit its own clock would not give it from that state; it waits
// longer. A client ahead of the others by d takes, once, units the others
// would have had to wait up to d for: measured on one shared key against
// a client d behind it (tests TestCallerClockSkew*), at most
// min(limit, ⌈d × rate⌉) units beyond what one clock allows over any span
// for a token bucket and a GCRA (rate = limit per period), at most limit
// units in any window for a sliding log and a sliding counter (d
// shortens the window by d as the ahead client sees the log's entries),
// and nothing for a fixed window, whose windows run on the server's key
// expiry (the caller's clock does not enter its decisions). A calendar
// window's count is of the window that holds the caller's time: a client
// ahead by d counts in the next window d early, so up to 2 × limit units
// may pass within d of a boundary. A RedisConcurrency lease granted by a
// client ahead by d expires for the others d late, and one granted by a
// client behind by d expires for the others d early: a unit may be held
// twice for up to d. Keep clients' clocks synchronized (NTP) to well
// under a period.
func WithCallerClock(c Clock) Option {
	return func(cfg *config) error {
		switch {
		case c == nil:
			c = systemClock{}
		case isNil(c):
			return fmt.Errorf("%w: WithCallerClock: a nil %T; give nil itself for the system clock", ErrInvalidConfig, c)
		}
		cfg.callerClock = c
		return nil
	}
}
