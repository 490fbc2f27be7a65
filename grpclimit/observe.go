package grpclimit

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/errlog"
)

// Observer is told of each call an Interceptor decides, with its context
// (where a tenant or a peer may be read) and its full method name, so that
// metrics can carry them. It is called once per call that is not skipped
// (WithSkip), on the call's goroutine, after the decision and before the
// answer is returned or the handler runs:
//
//   - allowed: d.Allowed, err nil (d.WouldDeny too for a call a
//     ratelimit.Shadow let through against a denial);
//   - denied (codes.ResourceExhausted): d with Allowed false, err nil;
//   - cost above the limit: d, err wrapping ratelimit.ErrCostExceedsLimit;
//   - a limiter error, let through or answered codes.Unavailable: d as the
//     limiter returned it (often zero), the error;
//   - a key the limiter refuses as too long: a zero d, err wrapping
//     ratelimit.ErrInvalidKey;
//   - a KeyFunc or CostFunc error: a zero d, the KeyFunc's or CostFunc's
//     error (ErrMissingCredential, ErrMalformedCredential, ...).
//
// It must be safe for concurrent use, and quick: the call waits for it.
type Observer func(ctx context.Context, fullMethod string, d ratelimit.Decision, err error)

// WithObserver sets an Observer told of every call the Interceptor decides
// (see Observer). Without it nothing is called and nothing allocated. A
// nil o is an error.
func WithObserver(o Observer) Option {
	return func(s *settings) error {
		if o == nil {
			return fmt.Errorf("%w: grpclimit: WithObserver: nil Observer", ratelimit.ErrInvalidConfig)
		}
		s.observer = o
		return nil
	}
}

// WithLogger sets the logger of the limiter errors that no WithOnError
// hook takes, in place of slog.Default() (read when a line is written).
// A nil l is an error.
//
// Without WithOnError, every error that hook would get (a limiter error,
// before the call is let through or answered codes.Unavailable; a lease's
// failed extension or release) is logged at slog.LevelWarn as "grpclimit:
// rate limiter error", with the attributes error and method (the full
// method name), never the call's key or credential. One line is written
// per 10 seconds at most for each Interceptor: the errors in between are
// counted, and the next line gives their number as suppressed.
// WithOnError replaces this log.
func WithLogger(l *slog.Logger) Option {
	return func(s *settings) error {
		if l == nil {
			return fmt.Errorf("%w: grpclimit: WithLogger: nil logger", ratelimit.ErrInvalidConfig)
		}
		s.logger = l
		return nil
	}
}

// observe tells the Observer, if any, of a call's decision.
func (i *Interceptor) observe(ctx context.Context, method string, d *ratelimit.Decision, err error) {
	if i.observer != nil {
		i.observer(ctx, method, *d, err)
	}
}

// logError is the WithOnError hook of an Interceptor without one.
func (i *Interceptor) logError(ctx context.Context, method string, err error) {
	i.log.Log(ctx, err, slog.String("method", method))
}

// newLog returns the default log of an Interceptor's errors.
func newLog(l *slog.Logger) *errlog.Logger {
	return errlog.New(l, "grpclimit: rate limiter error", time.Now)
}
