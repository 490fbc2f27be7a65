package outbound

import (
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// The defaults of a Config's zero fields.
const (
	// DefaultMaxWait is the longest a call waits before it is sent.
	DefaultMaxWait = time.Minute
	// DefaultMaxPause is the longest pause an answer can set: a
	// Retry-After of a year pauses the partition for this long.
	DefaultMaxPause = 15 * time.Minute
	// DefaultForget is how long a stated limit is kept after the last
	// answer that stated it.
	DefaultForget = time.Minute
	// DefaultLimitedPause is the pause of a 429 that says nothing of how
	// long to wait.
	DefaultLimitedPause = time.Second
)

// Config configures an Upstream. The zero Config is valid: pauses and
// learned limits kept in the process, the default parsers and bounds, a
// jittered wait of up to DefaultMaxWait.
type Config struct {
	// Store keeps what answers teach, per partition. Give every replica
	// a RedisStore on the same Redis, so that a 429 one replica gets
	// pauses them all. nil: a MemoryStore of this Upstream's own.
	Store Store
	// MaxWait bounds how long a call waits before it is sent, for the
	// limiter or for a pause, jitter included; a call that would wait
	// longer is not sent, and fails at once with an error wrapping
	// ErrLimited. A call never waits past its context's deadline either.
	// A Transport's retry is a call of its own (see Transport.Retries).
	// 0: DefaultMaxWait; a negative MaxWait never waits (fail fast).
	MaxWait time.Duration
	// MaxPause bounds the pause one answer can set. 0: DefaultMaxPause;
	// negative is an error.
	MaxPause time.Duration
	// Forget is how long a limit the upstream stated is kept after the
	// last answer that stated it: then the limiter's own applies again,
	// until an answer states one. 0: DefaultForget; negative is an error.
	Forget time.Duration
	// LimitedPause is the pause of an answer that is Limited (a 429) but
	// tells no pause, or a pause of 0. 0: DefaultLimitedPause; negative is
	// an error.
	LimitedPause time.Duration
	// Unit names what the limiter's units count, as the IETF fields'
	// qu parameter names it: "" (or "requests") for calls, "tokens" for
	// a limiter a Transport charges an LLM call's tokens. The default
	// parsers learn the stated limits of this unit only (IETFFieldsIn),
	// and what the Upstream learns is kept under the partition's name
	// followed by ` qu=` and the unit, unless it counts calls, so that
	// Upstreams of different units never read each other's limits (nor
	// share pauses) through one Store. It must be printable ASCII
	// without spaces.
	Unit string
	// Parsers read each answer, and their Lessons are merged: the
	// longest pause and the tightest limit win, so that fields that
	// contradict each other are read the cautious way. nil:
	// DefaultParsers(), with IETFFieldsIn(Unit) for IETFFields. Give
	// DefaultParsers() and your own to add one.
	Parsers []Parser
	// IgnorePolicies makes the Upstream learn pauses only, never a
	// limit: for a limiter not built WithPolicyFunc(LearnedPolicy), or
	// one of calls in flight (a concurrency limiter), which New
	// otherwise refuses.
	IgnorePolicies bool
	// NoJitter makes each wait exactly what the limiter or the pause
	// asks. By default each sleep is lengthened by up to a tenth of it
	// (at most 250 ms), so that the callers of a fleet denied together
	// do not all come back at once.
	NoJitter bool
	// Observer, when not nil, is told of every Event: waits, refusals,
	// what answers taught, retries and the store's failures. It is
	// called on the call's goroutine, and must be fast and safe for
	// concurrent use.
	Observer func(Event)
	// Clock is the clock answers are read by (an HTTP-date, a Unix
	// time) and waits are measured on, against MaxWait and against a
	// call's context deadline, which is a time of the system clock: give
	// a Clock that follows it when calls carry deadlines. It is also the
	// clock of the MemoryStore made when Store is nil. nil: the system
	// clock. Sleeps are always the system's timers.
	Clock ratelimit.Clock
}
