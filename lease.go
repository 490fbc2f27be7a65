package ratelimit

import (
	"context"
	"fmt"
	"time"
)

// Acquirer limits work in flight: at most a limit of units held at once
// per key, each held by a Lease until it is released or expires. The
// concurrency limiters (Concurrency, RedisConcurrency) are Acquirers, and
// so are the Composite, Guard, DenyCache and Shadow of this package,
// whatever their backend: over limiters that hold nothing in flight (the
// rate limiters), their Acquire decides as Decide does and returns a Lease
// that holds nothing.
//
// A denial is not an error: Acquire returns a Lease that holds nothing and
// a Decision whose Allowed is false, and takes nothing. Releasing or
// extending a Lease that holds nothing does nothing and returns nil, so
// that
//
//	lease, d, err := l.Acquire(ctx, key, 1)
//	if err != nil || !d.Allowed {
//		return // ...
//	}
//	defer lease.Release(context.WithoutCancel(ctx))
//
// is always right. Implementations are safe for concurrent use.
type Acquirer interface {
	Decider
	// Acquire takes n units for key and returns the Lease that holds
	// them, or a denial that takes nothing, with the call's Decision
	// (see Decider). n follows Allow's contract: n == 0 is a peek that
	// holds nothing, n < 0 fails with ErrInvalidCost, and n above the
	// limit with ErrCostExceedsLimit.
	Acquire(ctx context.Context, key string, n int) (Lease, Decision, error)
}

// ErrLeaseExpired is wrapped by the error of Extend on a lease that is no
// longer held: it expired, was released, or its key was Reset (or, on
// Redis, lost with the server's data). The work it covered is no longer
// counted and should stop, or acquire again. It is of class ErrCaller: it
// concerns one lease, not the backend's health, so a Guard never answers
// it by its failure policy.
var ErrLeaseExpired error = &classed{"ratelimit: the lease is no longer held", ErrCaller}

// Lease holds units of work in flight for a key, taken by an Acquire of a
// concurrency limiter (or of a Composite with a concurrency part). Its
// units count against the key's limit until Release gives them back or its
// TTL passes without an Extend, whichever comes first: a process that dies
// holding a lease gives its units back by the lease's expiry at the
// latest.
//
// A Lease is a small value; copies are the same lease. The zero Lease,
// which a denial, a peek and every limiter that holds nothing in flight
// return, holds nothing: Held is false, and Release and Extend do nothing.
// A Lease is released and extended by its own methods, which go to the
// limiter that granted it, whatever layer (Composite, Guard, Shadow)
// returned it: a Guard's fallback's lease to the fallback. No limiter has
// Release or Extend methods of its own, so a lease cannot be handed to a
// limiter that did not grant it.
type Lease struct {
	holder leaseHolder // who granted it; nil when it holds nothing
	key    string      // the key as holder knows it (a Composite part's)
	id     uint64      // unique among holder's leases
	units  int
	ttl    time.Duration
}

// leaseHolder is a limiter that grants leases: it releases and extends the
// leases it granted.
type leaseHolder interface {
	releaseLease(ctx context.Context, l Lease) error
	extendLease(ctx context.Context, l Lease) (Lease, error)
}

// Held reports whether the lease holds units: false for the zero Lease.
// A lease that has expired, or was released, still reports true: only its
// limiter knows (see Extend).
func (l Lease) Held() bool { return l.holder != nil }

// Key returns the key whose units the lease holds, as its limiter keeps
// it: a Composite's part's key (after Part.Key). It is "" for a lease that
// holds nothing.
func (l Lease) Key() string { return l.key }

// Units returns the number of units the lease holds: the n of its Acquire.
func (l Lease) Units() int { return l.units }

// TTL returns how long the lease lasted when it was granted or last
// extended: its key's policy's Window. Extend well within it (every TTL/3,
// say) to keep a lease through long work.
func (l Lease) TTL() time.Duration { return l.ttl }

// String returns the lease's key, as KeyDigest gives it (Key returns the
// key itself), its units and its id, for logs.
func (l Lease) String() string {
	if l.holder == nil {
		return "lease{}"
	}
	return fmt.Sprintf("lease{key=%s units=%d id=%x}", KeyDigest(l.key), l.units, l.id)
}

// Release gives the lease's units back to its key at once. It is
// idempotent: releasing a lease twice, after it expired, after its key
// was Reset, or a lease that holds nothing, changes nothing and returns
// nil. It fails on a nil ctx (ErrCaller), when the limiter cannot be
// reached (a Redis limiter's backend error, ErrBackend), or when the key
// holds state that is not the limiter's (ErrCorruptState): the lease is
// then still held until it is released or expires. ctx should outlive the
// work's own (use context.WithoutCancel), so that a cancelled request
// still gives its units back.
func (l Lease) Release(ctx context.Context) error {
	switch {
	case l.holder == nil:
		return nil
	case ctx == nil:
		return fmt.Errorf("ratelimit: Lease.Release: %w", errNilContext)
	}
	return l.holder.releaseLease(ctx, l)
}

// Extend renews the lease for another TTL from now (the key's policy's
// Window now), and returns the renewed lease. A lease that is no longer
// held (expired, released or Reset) cannot be renewed: Extend returns an
// error wrapping ErrLeaseExpired and changes nothing, and the work should
// stop. Extending a lease that holds nothing returns it and nil; a nil
// ctx is an error wrapping ErrCaller.
func (l Lease) Extend(ctx context.Context) (Lease, error) {
	switch {
	case l.holder == nil:
		return l, nil
	case ctx == nil:
		return l, fmt.Errorf("ratelimit: Lease.Extend: %w", errNilContext)
	}
	return l.holder.extendLease(ctx, l)
}

// inFlightPolicies returns p as the one in-flight policy of a concurrency
// limiter, named "default": own (shared) when p is its own policy.
func inFlightPolicies(p Policy, own []NamedPolicy) []NamedPolicy {
	if len(own) == 1 && own[0].Policy == p {
		return own
	}
	return []NamedPolicy{{Name: defaultPolicyName, Policy: p, InFlight: true}}
}
