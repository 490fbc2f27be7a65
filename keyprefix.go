package ratelimit

// DefaultKeyPrefix starts the key prefix of every Redis limiter built
// without WithKeyPrefix. The default prefix is DefaultKeyPrefix, the
// state's name ("tb" for RedisTokenBucket, "gcra", "fw", "sl", "sc", "cal"
// for RedisCalendarWindow, "inflight" for RedisConcurrency), ":" and the
// numbers that give the state its meaning: for example
// "ratelimit:tb:10:100000:" for a token bucket of capacity 10 refilling 10
// per second (its interval in whole microseconds), "ratelimit:fw:100:60000:"
// for 100 per minute in fixed windows (the window in whole milliseconds),
// and "ratelimit:cal:100:day:Europe/Berlin:" for a calendar window. Limiters
// that decide differently thus never share a key by accident; each type's
// KeyPrefix method says its own.
const DefaultKeyPrefix = "ratelimit:"

// The default prefixes of each state (see DefaultKeyPrefix).
const (
	tokenBucketPrefix    = DefaultKeyPrefix + "tb:"
	gcraPrefix           = DefaultKeyPrefix + "gcra:"
	fixedWindowPrefix    = DefaultKeyPrefix + "fw:"
	slidingLogPrefix     = DefaultKeyPrefix + "sl:"
	slidingCounterPrefix = DefaultKeyPrefix + "sc:"
	calendarPrefix       = DefaultKeyPrefix + "cal:"
	concurrencyPrefix    = DefaultKeyPrefix + "inflight:"
)
