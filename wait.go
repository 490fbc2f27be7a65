package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/pace"
)

// The default jitter: a tenth of each sleep, at most 250 ms (see
// WithJitter).
const (
	defaultJitterFraction = 0.1
	defaultMaxJitter      = 250 * time.Millisecond
)

// minWait is the shortest time Wait sleeps after a denial, so that a limiter
// whose denial names no positive RetryAfter cannot make it spin.
const minWait = time.Millisecond

// errNilLimiter is returned by Wait for a nil Limiter, or an interface holding
// a nil pointer such as (*TokenBucket)(nil).
var errNilLimiter = fmt.Errorf("%w: Wait: nil limiter", ErrInvalidConfig)

// Wait blocks until l allows n for key, sleeping RetryAfter between tries.
// Each sleep is lengthened by a random jitter of up to a tenth of it (at
// most 250 ms), so that waiters denied together do not all come back at
// once. A single worker that waits before each call loses up to a tenth of
// its rate to it (about 5% on a limiter without burst): give it
// WithoutJitter, and it sleeps RetryAfter exactly:
//
//	res, err := ratelimit.Wait(ctx, l, "api", 1, ratelimit.WithoutJitter())
//
// WithJitter sets the jitter's fraction and cap.
// A bad option (see WithJitter), or a zero WaitOption, is an error wrapping
// ErrInvalidConfig, and l is not called.
//
// It returns at once with the error of a call that fails, such as one wrapping
// ErrCostExceedsLimit or ErrInvalidCost, and with an error wrapping
// context.DeadlineExceeded when ctx's deadline comes before the wait would
// end, without sleeping in vain. When ctx is cancelled during a sleep it
// returns an error wrapping ctx.Err(). The Result is that of the last try.
// A nil ctx or a nil l (an interface holding a nil pointer too) is an error,
// and l is not called. Wait uses the system clock for its sleeps; l may use
// any clock.
func Wait(ctx context.Context, l Limiter, key string, n int, opts ...WaitOption) (Result, error) {
	wt, err := systemWaitTime.with(opts)
	if err != nil {
		return Result{}, err
	}
	return waitWith(ctx, l, key, n, wt)
}

// with returns wt as opts set it, or the error of the first bad option.
func (wt waitTime) with(opts []WaitOption) (waitTime, error) {
	for _, o := range opts {
		if o.set == nil {
			return wt, fmt.Errorf("%w: Wait: a zero WaitOption; build one with WithJitter or WithoutJitter", ErrInvalidConfig)
		}
		if err := o.set(&wt); err != nil {
			return wt, err
		}
	}
	return wt, nil
}

// WaitOption configures one call of Wait: WithJitter or WithoutJitter. It is
// a type of its own, so a limiter's Option passed to Wait does not compile.
// Its zero value is not an option: Wait given one returns an error wrapping
// ErrInvalidConfig.
type WaitOption struct {
	set func(*waitTime) error
}

// WithoutJitter makes Wait sleep exactly the RetryAfter of each denial (at
// least a millisecond), so that a single worker waiting on a limiter of rate
// R gets R. Many waiters denied together then come back together.
func WithoutJitter() WaitOption {
	return WaitOption{set: func(wt *waitTime) error {
		wt.fraction, wt.maxJitter = 0, 0
		return nil
	}}
}

// WithJitter makes Wait lengthen each sleep by a random jitter of up to
// fraction of it, and at most maxJitter: Wait's default is WithJitter(0.1,
// 250*time.Millisecond). fraction must be in (0, 1] and maxJitter > 0 (for no
// jitter, use WithoutJitter); otherwise Wait returns an error wrapping
// ErrInvalidConfig that names the bad value, and does not call the limiter.
func WithJitter(fraction float64, maxJitter time.Duration) WaitOption {
	return WaitOption{set: func(wt *waitTime) error {
		switch {
		case !(fraction > 0 && fraction <= 1): // NaN too
			return fmt.Errorf("%w: Wait: WithJitter's fraction %v must be in (0, 1]; for no jitter use WithoutJitter", ErrInvalidConfig, fraction)
		case maxJitter <= 0:
			return fmt.Errorf("%w: Wait: WithJitter's maxJitter %v must be > 0; for no jitter use WithoutJitter", ErrInvalidConfig, maxJitter)
		}
		wt.fraction, wt.maxJitter = fraction, maxJitter
		return nil
	}}
}

// waitTime is the time Wait depends on: its clock, its sleeps and its jitter.
// Wait uses systemWaitTime; tests give waitWith a fake one.
type waitTime struct {
	// now returns the current time, read against ctx's deadline.
	now func() time.Time
	// sleep returns nil after d, or ctx.Err() as soon as ctx is done.
	sleep func(ctx context.Context, d time.Duration) error
	// jitter returns a random duration in [0, bound].
	jitter func(bound time.Duration) time.Duration
	// fraction and maxJitter bound each sleep's jitter: at most fraction
	// of the wait and at most maxJitter; no jitter when maxJitter is 0.
	fraction  float64
	maxJitter time.Duration
}

// systemWaitTime is the waitTime of the system clock and real timers, with
// the default jitter.
var systemWaitTime = waitTime{
	now: time.Now, sleep: pace.Sleep, jitter: pace.Jitter,
	fraction: defaultJitterFraction, maxJitter: defaultMaxJitter,
}

// jitterBound returns the most jitter wt adds to a wait: fraction of it, at
// most maxJitter; 0 without jitter.
func (wt waitTime) jitterBound(wait time.Duration) time.Duration {
	if wt.maxJitter <= 0 {
		return 0
	}
	// Compared as floats before converting, so that a wait near the
	// largest Duration cannot overflow.
	if f := float64(wait) * wt.fraction; f < float64(wt.maxJitter) {
		return time.Duration(f)
	}
	return wt.maxJitter
}

// waitWith is Wait with its time taken from wt.
func waitWith(ctx context.Context, l Limiter, key string, n int, wt waitTime) (Result, error) {
	if ctx == nil {
		return Result{}, fmt.Errorf("ratelimit: Wait: %w", errNilContext)
	}
	if isNil(l) {
		return Result{}, errNilLimiter
	}
	for {
		res, err := l.Allow(ctx, key, n)
		if err != nil || res.Allowed {
			return res, err
		}
		wait := max(res.RetryAfter, minWait)
		// Saturated, so that a wait near the largest Duration cannot wrap
		// around into a busy loop.
		sleep := wait
		if bound := wt.jitterBound(wait); bound > 0 {
			sleep += min(wt.jitter(bound), math.MaxInt64-wait)
		}
		if deadline, ok := ctx.Deadline(); ok {
			left := deadline.Sub(wt.now())
			if left < wait {
				return res, callerErr(fmt.Errorf("ratelimit: Wait: %s until allowed is past the deadline: %w", wait, context.DeadlineExceeded))
			}
			sleep = min(sleep, left)
		}
		if err := wt.sleep(ctx, sleep); err != nil {
			return res, callerErr(fmt.Errorf("ratelimit: Wait: %w", err))
		}
	}
}
