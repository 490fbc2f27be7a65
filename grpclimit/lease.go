package grpclimit

import (
	"context"
	"errors"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold"
	"google.golang.org/grpc"
)

// WithLeases makes the Interceptor hold each call's units for as long as
// its handler runs, as a limit on calls in flight needs (a
// ratelimit.Concurrency or RedisConcurrency, or a Composite with such a
// part): a unary call's until its handler returns, a stream's for the
// stream's whole life. NewInterceptor refuses such a limiter without it:
// each call would take its units with Decide and hold them for the
// policy's whole lease TTL, as no one could give them back.
//
// Unary and Stream then decide each call by the limiter's Acquire instead of
// Decide. The ratelimit.Lease that holds an allowed call's units is
// released once the handler has returned, and when it panics, before the
// panic goes on up unchanged; under the call's context without its
// cancellation (context.WithoutCancel: the client may have gone, and the
// units must come back anyway), bounded by 5 s. While the handler runs,
// the lease is extended every third of its TTL (Lease.TTL, as last
// granted or extended), under the same context and bound, by a timer
// (time.AfterFunc) that starts no goroutine until it fires and is stopped
// when the handler returns. A failed release or extension goes to the
// WithOnError hook, wrapping ErrLease and the limiter's error, and cancels
// nothing: the handler goes on. An extension that fails with
// ratelimit.ErrLeaseExpired (the lease expired before it could be
// extended, or its key was Reset) means the call's units are no longer
// held, and the lease is not extended again; any other failure is tried
// again a third of the TTL later. The handler finds its lease with
// LeaseOf (a stream's handler, in its ServerStream's Context).
//
// A denial is answered as any other: codes.ResourceExhausted with a
// RetryInfo of the time until enough of the key's leases expire, were
// none released (a release can free a slot much sooner), and the metadata
// of the policy in flight, which names the draft's quota unit and has no
// w (its t is the retry-after; an allowed call's item has none, as a
// release may free a slot at any moment):
//
//	ratelimit-policy: "default";q=5;qu="concurrent-requests"
//	ratelimit: "default";r=0;t=12
//
// A call whose lease holds nothing (decided by a limiter that holds nothing
// in flight, such as the rate limiters, or one a ratelimit.Shadow let
// through against a denial) is served exactly as without this option: with
// a rate limiter, WithLeases changes nothing.
//
// Limit, which returns before the call it decides runs, cannot hold a
// lease: with a limiter of calls in flight it answers codes.Internal.
func WithLeases() Option {
	return func(s *settings) error {
		s.leases = true
		return nil
	}
}

// ErrLease is wrapped, with the limiter's error, by the errors the
// WithOnError hook gets when extending or releasing the lease of a call
// fails (see WithLeases). The call is served either way; the error says
// whether its units are still held (see ratelimit.ErrLeaseExpired).
var ErrLease = errors.New("grpclimit: holding a call's lease failed")

// LeaseOf returns the lease that holds the units of the call whose context
// is ctx (or one derived from it), as last extended, and true; or the zero
// Lease and false when none does: the Interceptor was not built
// WithLeases, or the call took nothing in flight or was skipped.
//
// The interceptor extends and releases the lease itself. A handler may
// Extend it too, before a step that must not outlive it; releasing it
// early frees its units while the handler still runs, and the
// interceptor's next extension then reports ratelimit.ErrLeaseExpired to
// the WithOnError hook.
func LeaseOf(ctx context.Context) (ratelimit.Lease, bool) {
	return leaseOwner.LeaseOf(ctx)
}

// leaseOwner makes the interceptor's holds, whose errors wrap ErrLease.
var leaseOwner = &leasehold.Owner{Err: ErrLease}

// leaseHold holds one call's lease while its handler runs (see
// leasehold.Hold): it is the context the handler gets, and it reports its
// failures to the interceptor's WithOnError hook with the call's context
// and method.
type leaseHold struct {
	leasehold.Hold
	in     *Interceptor
	method string
}

// hold starts holding lease, a held one, for the call of method whose
// context is ctx: its extension timer runs from now on.
func (i *Interceptor) hold(ctx context.Context, method string, lease ratelimit.Lease) *leaseHold {
	h := &leaseHold{in: i, method: method}
	h.Start(ctx, leaseOwner, lease, i.after, h)
	return h
}

// ReportLease passes err, a failed Extend or Release, to the WithOnError
// hook, if any.
func (h *leaseHold) ReportLease(err error) {
	if h.in.onError != nil {
		h.in.onError(h.Context, h.method, err)
	}
}

// release gives back lease, held for the call of method whose context is
// ctx, at once (see leasehold.Owner.Release); its failure goes to the
// WithOnError hook. A lease that holds nothing is left alone.
func (i *Interceptor) release(ctx context.Context, method string, lease ratelimit.Lease) {
	if err := leaseOwner.Release(ctx, lease); err != nil && i.onError != nil {
		i.onError(ctx, method, err)
	}
}

// leasedStream is a stream whose Context carries its lease.
type leasedStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context with its lease.
func (s *leasedStream) Context() context.Context { return s.ctx }
