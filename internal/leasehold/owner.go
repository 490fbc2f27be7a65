package leasehold

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Timeout bounds each Extend and Release of a lease made by a Hold or by
// Owner.Release: 5 s.
const Timeout = 5 * time.Second

// Owner is the package that holds leases (httplimit, grpclimit): one
// *Owner per package, shared by all its Holds, and read only once made.
// The *Owner is also the context key under which its Holds are found, so
// that one owner's LeaseOf finds none of another owner's Holds.
type Owner struct {
	// Err is wrapped, with the operation, the lease and the limiter's
	// error, by every error a Hold reports and Release returns: the
	// owner's ErrLease.
	Err error
}

// LeaseOf returns the lease of the innermost of o's Holds that ctx is or
// derives from, as last extended, and true; or the zero Lease and false
// when there is none (ctx nil included).
func (o *Owner) LeaseOf(ctx context.Context) (ratelimit.Lease, bool) {
	if ctx == nil {
		return ratelimit.Lease{}, false
	}
	h, ok := ctx.Value(o).(*Hold)
	if !ok {
		return ratelimit.Lease{}, false
	}
	return h.Lease(), true
}

// Release gives lease back at once, under ctx without its cancellation
// (context.WithoutCancel: the client may have gone, and the units must
// come back anyway) and bounded by Timeout. It returns nil, or the
// limiter's error wrapped with o.Err; a lease that holds nothing is left
// alone. It is safe for concurrent use.
func (o *Owner) Release(ctx context.Context, lease ratelimit.Lease) error {
	if !lease.Held() {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), Timeout)
	err := lease.Release(rctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: Release of %v: %w", o.Err, lease, err)
	}
	return nil
}
