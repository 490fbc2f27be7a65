package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit"
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
// Unary and Stream then decide each call by ratelimit.Acquire instead of
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
// w:
//
//	ratelimit-policy: "default";q=5;qu="concurrent-requests"
//	ratelimit: "default";r=0;t=12
//
// A call whose lease holds nothing (decided by a limiter that holds nothing
// in flight, such as the rate limiters, a call of cost 0, one a
// ratelimit.Shadow let through against a denial) is served exactly as
// without this option: with a rate limiter, WithLeases changes nothing.
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
	if ctx == nil {
		return ratelimit.Lease{}, false
	}
	h, ok := ctx.Value(leaseKey{}).(*leaseHold)
	if !ok {
		return ratelimit.Lease{}, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease, true
}

// leaseTimeout bounds each Release and Extend the interceptor makes of a
// call's lease.
const leaseTimeout = 5 * time.Second

// leaseTimer is the timer that extends a held lease: a *time.Timer.
type leaseTimer interface {
	Stop() bool
	Reset(d time.Duration) bool
}

// afterFunc starts the timer of a held lease: time.AfterFunc.
func afterFunc(d time.Duration, f func()) leaseTimer { return time.AfterFunc(d, f) }

// leaseKey is the context key of a call's leaseHold.
type leaseKey struct{}

// leaseHold holds one call's lease while its handler runs: it is the
// context the handler gets (the call's, whose Value also finds the hold),
// and it extends the lease on its timer until end releases it.
type leaseHold struct {
	context.Context
	in     *Interceptor
	method string

	mu    sync.Mutex
	lease ratelimit.Lease
	timer leaseTimer // nil when the lease is not extended
	ended bool       // end has run: no more extensions
}

// Value returns the hold for leaseKey, and otherwise the call context's
// value for key.
func (h *leaseHold) Value(key any) any {
	if key == (leaseKey{}) {
		return h
	}
	return h.Context.Value(key)
}

// hold starts holding lease, a held one, for the call of method whose
// context is ctx: its extension timer runs from now on.
func (i *Interceptor) hold(ctx context.Context, method string, lease ratelimit.Lease) *leaseHold {
	h := &leaseHold{Context: ctx, in: i, method: method, lease: lease}
	if every := lease.TTL() / 3; every > 0 {
		h.mu.Lock()
		h.timer = i.after(every, h.extend)
		h.mu.Unlock()
	}
	return h
}

// extend renews the lease, on its timer, unless the handler has returned,
// and sets the timer for the next extension. A failure goes to the
// WithOnError hook; after one that says the lease is no longer held, the
// timer is not set again.
func (h *leaseHold) extend() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.Context), leaseTimeout)
	old := h.lease
	lease, err := old.Extend(ctx)
	cancel()
	if err == nil {
		h.lease = lease
	}
	if err == nil || !errors.Is(err, ratelimit.ErrLeaseExpired) {
		if every := h.lease.TTL() / 3; every > 0 {
			h.timer.Reset(every)
		}
	}
	h.mu.Unlock()
	if err != nil && h.in.onError != nil {
		h.in.onError(h.Context, h.method, fmt.Errorf("%w: Extend of %v: %w", ErrLease, old, err))
	}
}

// end stops extending the lease and releases it. An extension under way
// finishes first.
func (h *leaseHold) end() {
	h.mu.Lock()
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
	lease := h.lease
	h.mu.Unlock()
	h.in.release(h.Context, h.method, lease)
}

// release gives back lease, held for the call of method whose context is
// ctx, under ctx without its cancellation and bounded by leaseTimeout; its
// failure goes to the WithOnError hook. A lease that holds nothing is left
// alone.
func (i *Interceptor) release(ctx context.Context, method string, lease ratelimit.Lease) {
	if !lease.Held() {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaseTimeout)
	err := lease.Release(rctx)
	cancel()
	if err != nil && i.onError != nil {
		i.onError(ctx, method, fmt.Errorf("%w: Release of %v: %w", ErrLease, lease, err))
	}
}

// leasedStream is a stream whose Context carries its lease.
type leasedStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context with its lease.
func (s *leasedStream) Context() context.Context { return s.ctx }

// inFlightIndex returns the index of the first policy of calls in flight
// in policies, or -1.
func inFlightIndex(policies []ratelimit.NamedPolicy) int {
	for i := range policies {
		if policies[i].InFlight {
			return i
		}
	}
	return -1
}
