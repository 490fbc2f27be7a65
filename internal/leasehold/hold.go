package leasehold

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Reporter gets the errors of a Hold: each a failed Extend or Release,
// wrapping the Owner's Err and the limiter's error. It is called without
// the Hold's lock held, from the Hold's timer or from End.
type Reporter interface {
	ReportLease(err error)
}

// Hold holds one lease while the work it was acquired for runs. It is
// the context that work gets: its Context's (the work's), whose Value
// also finds the Hold under its Owner. Start sets its extension
// timer going; End stops it and releases the lease.
//
// An owner embeds a Hold, by value, in its own type of held work, which
// carries what its Reporter needs; the zero Hold is ready for Start, and
// a Hold must not be copied once started. Its methods are safe for
// concurrent use.
type Hold struct {
	context.Context
	owner  *Owner
	report Reporter // nil: failures are not reported

	mu    sync.Mutex
	lease ratelimit.Lease
	timer Timer // nil when the lease is not extended
	ended bool  // End has run: no more extensions
}

// Start starts holding lease, a held one, for the work whose context is
// ctx, on behalf of o: from now on it is extended every third of its TTL
// (Lease.TTL, as last granted or extended; never for a TTL under 3 ns),
// on a timer that after starts (AfterFunc, or a test's fake). Failures go
// to report, unless it is nil. Start is called once, before the Hold is
// used as a context.
func (h *Hold) Start(ctx context.Context, o *Owner, lease ratelimit.Lease, after func(time.Duration, func()) Timer, report Reporter) {
	h.Context, h.owner, h.report, h.lease = ctx, o, report, lease
	if every := extendEvery(lease); every > 0 {
		// Locked, so that a timer that fires at once waits for h.timer.
		h.mu.Lock()
		h.timer = after(every, h.extend)
		h.mu.Unlock()
	}
}

// extendEvery returns how often lease is extended: a third of its TTL, or
// 0 for never.
func extendEvery(lease ratelimit.Lease) time.Duration {
	return lease.TTL() / 3
}

// Value returns the Hold for the key of its Owner (the *Owner), and
// otherwise the work's context's value for key.
func (h *Hold) Value(key any) any {
	if key == any(h.owner) {
		return h
	}
	return h.Context.Value(key)
}

// Lease returns the held lease, as last extended by the Hold.
func (h *Hold) Lease() ratelimit.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lease
}

// extend renews the lease, on its timer, unless End has run, and sets the
// timer for the next extension. A failure is reported; after one that
// wraps ratelimit.ErrLeaseExpired (the lease is no longer held), the timer
// is not set again, and after any other it is, to try again.
func (h *Hold) extend() {
	h.mu.Lock()
	if h.ended {
		h.mu.Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.Context), Timeout)
	old := h.lease
	lease, err := old.Extend(ctx)
	cancel()
	if err == nil {
		h.lease = lease
	}
	if err == nil || !errors.Is(err, ratelimit.ErrLeaseExpired) {
		if every := extendEvery(h.lease); every > 0 {
			h.timer.Reset(every)
		}
	}
	h.mu.Unlock()
	if err != nil && h.report != nil {
		h.report.ReportLease(fmt.Errorf("%w: Extend of %v: %w", h.owner.Err, old, err))
	}
}

// End stops extending the lease, then releases it as Owner.Release does,
// and reports a failure. An extension under way finishes first; one whose
// timer fires later does nothing. End is called once, when the work has
// ended (returned or panicked).
func (h *Hold) End() {
	h.mu.Lock()
	h.ended = true
	if h.timer != nil {
		h.timer.Stop()
	}
	lease := h.lease
	h.mu.Unlock()
	if err := h.owner.Release(h.Context, lease); err != nil && h.report != nil {
		h.report.ReportLease(err)
	}
}
