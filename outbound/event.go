package outbound

import (
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// EventKind says what an Event reports.
type EventKind int

const (
	// Waited: a call waited Wait before it was sent, for the limiter's
	// next unit or a pause to end.
	Waited EventKind = iota + 1
	// Refused: a call was not sent, because it would have waited longer
	// than allowed (Err wraps ErrLimited), or because the limiter failed
	// (Err is its error). Wait is how long it had waited.
	Refused
	// UpstreamLimited: the upstream refused a call for its limit
	// (Status: 429, or 503 with a Retry-After).
	UpstreamLimited
	// Paused: an answer paused the partition for Pause (already bounded
	// by Config.MaxPause).
	Paused
	// Learned: an answer stated a limit other than the one the partition
	// had, and the limiter applies another limit from now on: Policy, as
	// the upstream stated it (the limiter applies it lowered to no more
	// than its own, so that a limit at or above its own brings it back to
	// its own). It is reported once per change, by the replica whose
	// answer made it. A limit forgotten after Config.Forget is not
	// reported: the store lets it lapse.
	Learned
	// Retried: a call the upstream refused is sent again (Attempt is the
	// new attempt's number, from 2), after Status.
	Retried
	// StoreFailed: the Store failed (Err); the call went on as if nothing
	// were learned, or what an answer taught is lost.
	StoreFailed
	// SettleFailed: settling a call's true cost failed (Err, see
	// Transport.Settle); the call keeps the units it took.
	SettleFailed
)

// String returns the kind's name: "waited", "refused",
// "upstream-limited", "paused", "learned", "retried", "store-failed" or
// "settle-failed"; "unknown" for any other value.
func (k EventKind) String() string {
	switch k {
	case Waited:
		return "waited"
	case Refused:
		return "refused"
	case UpstreamLimited:
		return "upstream-limited"
	case Paused:
		return "paused"
	case Learned:
		return "learned"
	case Retried:
		return "retried"
	case StoreFailed:
		return "store-failed"
	case SettleFailed:
		return "settle-failed"
	}
	return "unknown"
}

// Event is what an Upstream reports to its Config.Observer: one wait, one
// refusal, one lesson from an answer, one retry or one failure of its
// store. The fields that do not apply to its Kind are zero.
type Event struct {
	Kind EventKind
	// Partition is the call's partition, as the caller gave it: use a
	// partition that is not a secret (see Transport.Partition).
	Partition string
	// Wait is how long the call waited (Waited, Refused).
	Wait time.Duration
	// Pause is the pause an answer set (Paused).
	Pause time.Duration
	// Policy is the limit an answer stated (Learned).
	Policy ratelimit.Policy
	// Status is the answer's status (UpstreamLimited, Retried).
	Status int
	// Attempt is the number of the attempt about to be sent (Retried).
	Attempt int
	// Err is the error (Refused, StoreFailed, SettleFailed).
	Err error
}
