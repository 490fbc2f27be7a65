package httplimit

import (
	"context"
	"errors"
	"net/http"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold"
)

// WithLeases makes the Middleware hold each request's units for as long
// as its handler runs, as a limit on requests in flight needs (a
// ratelimit.Concurrency or RedisConcurrency, or a Composite with such a
// part). NewMiddleware refuses such a limiter without it: each request
// would take its units with Decide and hold them for the policy's whole
// lease TTL, as no one could give them back.
//
// Each request is decided by the limiter's Acquire instead of Decide. The
// ratelimit.Lease that holds an allowed request's units is released once
// the handler has returned, so a streamed response (a handler that writes
// and flushes in a loop) holds them until its last write; and when the
// handler panics, before the panic (http.ErrAbortHandler included) goes on
// up unchanged. The release runs under the request's context without its
// cancellation (context.WithoutCancel: the client may have gone, and the
// units must come back anyway), bounded by 5 s. A release that fails goes
// to the WithOnError hook, wrapping ErrLease; its units then come back
// when the lease's TTL ends.
//
// While the handler runs, the lease is extended every third of its TTL
// (Lease.TTL, as last granted or extended), so that a handler longer than
// the TTL keeps its units, under the same context and bound. A timer
// (time.AfterFunc) makes each extension: no goroutine runs for a request
// until it fires, and it is stopped when the handler returns. An
// extension that fails goes to the WithOnError hook, wrapping ErrLease and
// the limiter's error, and cancels nothing: the handler goes on. When that
// error wraps ratelimit.ErrLeaseExpired (the lease expired before it could
// be extended, or its key was Reset), the request's units are no longer
// held and the lease is not extended again; any other failure (a Redis
// limiter's backend) is tried again a third of the TTL later.
//
// The handler finds its lease with LeaseOf. A request whose lease holds
// nothing (decided by a limiter that holds nothing in flight, such as the
// rate limiters, or one a ratelimit.Shadow let through against a denial)
// is served exactly as without this option: with a
// rate limiter, WithLeases changes nothing. WithRefund and WithSettle
// adjust a request after its handler and before its lease is released.
//
// The fields of a policy in flight name its quota unit, as the draft
// draft-ietf-httpapi-ratelimit-headers-11 does (section 3.1.2), and have
// no w (the leases' TTL is not a window of the quota; WithPolicyWindow is
// an error with such a policy):
//
//	RateLimit-Policy: "default";q=5;qu="concurrent-requests"
//	RateLimit: "default";r=2
//
// where r is the units free once this request's are taken. An allowed
// request's item has no t: a release may free a slot at any moment, so no
// time holds the client to r. On a denial, t is the Retry-After: the
// seconds until enough leases expire for the request to fit, were none
// released or extended, which a release can make much shorter.
//
// A request whose lease holds units costs nine allocations and two
// runtime timers more than one whose lease holds nothing: the hold, its
// extension timer and callback, the request's copy with a context that
// carries the lease, and the release's bounded context.
func WithLeases() Option {
	return func(s *settings) error {
		s.leases = true
		return nil
	}
}

// ErrLease is wrapped, with the limiter's error, by the errors the
// WithOnError hook gets when extending or releasing the lease of a request
// fails (see WithLeases). The request is served either way; the error
// says whether its units are still held (see ratelimit.ErrLeaseExpired).
var ErrLease = errors.New("httplimit: holding a request's lease failed")

// LeaseOf returns the lease that holds the units of the request whose
// context is ctx (or one derived from it), as last extended, and true; or
// the zero Lease and false when none does: the Middleware was not built
// WithLeases, or the request took nothing in flight, was skipped, or
// failed open. Between nested Middlewares, it is the innermost one's.
//
// The middleware extends and releases the lease itself. A handler may
// Extend it too, before a step that must not outlive it; releasing it
// early frees its units while the handler still runs, and the
// middleware's next extension then reports ratelimit.ErrLeaseExpired to
// the WithOnError hook.
func LeaseOf(ctx context.Context) (ratelimit.Lease, bool) {
	return leaseOwner.LeaseOf(ctx)
}

// leaseOwner makes the middleware's holds, whose errors wrap ErrLease.
var leaseOwner = &leasehold.Owner{Err: ErrLease}

// leaseHold holds one request's lease while its handler runs (see
// leasehold.Hold): it is the context the handler gets, and it reports its
// failures to the middleware's WithOnError hook with the request.
type leaseHold struct {
	leasehold.Hold
	m *Middleware
	r *http.Request // the request as the middleware got it, for the hook
}

// hold starts holding lease, a held one, for r: its extension timer runs
// from now on.
func (m *Middleware) hold(r *http.Request, lease ratelimit.Lease) *leaseHold {
	h := &leaseHold{m: m, r: r}
	h.Start(r.Context(), leaseOwner, lease, m.after, h)
	return h
}

// ReportLease passes err, a failed Extend or Release, to the WithOnError
// hook, if any.
func (h *leaseHold) ReportLease(err error) {
	if h.m.onError != nil {
		h.m.onError(h.r, err)
	}
}

// serveLeased passes an allowed request, whose units lease holds, to next
// (adjusted afterwards as serve does), and releases the lease once next
// has returned or panicked. The handler's request carries the lease for
// LeaseOf.
func (h *limitedHandler) serveLeased(w http.ResponseWriter, r *http.Request, d ratelimit.Decision, key string, n, cost int, lease ratelimit.Lease) {
	m := h.m
	hold := m.hold(r, lease)
	// Deferred, so that a panic releases the lease and then goes on.
	defer hold.End()
	req := m.withDecision(r.WithContext(hold), d)
	if m.adjuster != nil && d.Source == ratelimit.FromBackend {
		h.serveTracked(w, req, key, n, cost, m.now(), m.settleBound(d))
		return
	}
	h.next.ServeHTTP(w, req)
}

// release gives back lease, which r may not hold, at once (see
// leasehold.Owner.Release); a lease that holds nothing is left alone.
func (h *limitedHandler) release(r *http.Request, lease ratelimit.Lease) {
	if err := leaseOwner.Release(r.Context(), lease); err != nil && h.m.onError != nil {
		h.m.onError(r, err)
	}
}
