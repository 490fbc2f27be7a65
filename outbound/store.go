package outbound

import (
	"context"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Store keeps what the Upstreams of a fleet have learned of an upstream's
// limits, per partition: how long the partition is paused and the limit
// the upstream last stated. An Upstream reads it before each call and
// writes it when an answer teaches something, so that what one replica
// learns holds for every replica that shares the store.
//
// NewMemoryStore keeps it in the process; NewRedisStore in Redis, for a
// fleet. Upstreams that share a Store share what they learn of a
// partition, when their limiters count the same units: an Upstream whose
// Config.Unit is not calls keeps its state under the partition's name
// followed by its unit. Implementations must be safe for concurrent use. Times are
// durations from the store's own now, so that replicas whose clocks
// disagree still agree on when a pause ends (see the package
// documentation).
type Store interface {
	// Load returns partition's state now. A partition nothing was
	// learned of has the zero State.
	Load(ctx context.Context, partition string) (State, error)
	// Pause makes partition paused for at least d from now: a pause that
	// ends later is kept. d is > 0.
	Pause(ctx context.Context, partition string, d time.Duration) error
	// Learn makes p the limit the upstream states for partition, for
	// keep from now (keep > 0), replacing the one stored; the zero p
	// forgets it. It reports whether the partition's limit changed: p is
	// not the one it held (none, when it held none or it was
	// forgotten).
	Learn(ctx context.Context, partition string, p ratelimit.Policy, keep time.Duration) (changed bool, err error)
}

// State is what a Store holds of one partition now.
type State struct {
	// Pause is how long the partition stays paused from now: no call is
	// sent before it ends. 0 when it is not paused.
	Pause time.Duration
	// Policy is the limit the upstream last stated, Limit per Window,
	// or the zero Policy when none was stated or it was forgotten.
	Policy ratelimit.Policy
	// PolicyLeft is how long Policy is kept from now, were nothing
	// stated again; 0 with the zero Policy.
	PolicyLeft time.Duration
}
