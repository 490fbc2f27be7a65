package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"
)

// FixedWindow is an in-process fixed-window counter per key: at most limit
// units of work per window.
//
// A key's window opens at its first counted request and lasts the window's
// length; Allow(n) is allowed iff the count so far plus n is at most limit.
// Denials do not count, and a denial's RetryAfter is the time until the window
// ends. Around a window's end a key can get up to 2×limit through in a short
// time: limit at the end of one window, limit at the start of the next.
//
// Memory is held only for keys with an open window; a key whose window has
// ended is forgotten, with no background goroutine.
//
// A FixedWindow is safe for concurrent use. The zero value is not usable;
// create one with NewFixedWindow.
type FixedWindow struct {
	base    clockBase
	limit   int64
	window  int64 // ns
	maxNow  int64 // time stands still past this, so window ends cannot overflow
	windows *keyTable[openWindow]
}

// openWindow is a key's window: when it ends (ns) and what it has counted.
type openWindow struct {
	end   int64
	count int64
}

// NewFixedWindow returns an in-process fixed window of limit per window per
// key. It accepts WithClock. It returns an error wrapping ErrInvalidConfig
// for a limit <= 0, a window <= 0 or beyond about 73 years, or an option that
// does not apply.
func NewFixedWindow(limit int, window time.Duration, opts ...Option) (*FixedWindow, error) {
	const kind = "NewFixedWindow"
	cfg, err := applyOptions(kind, inProcess, opts)
	if err != nil {
		return nil, err
	}
	if err := checkWindow(kind, limit, window); err != nil {
		return nil, err
	}
	if int64(window) > maxSpan {
		return nil, fmt.Errorf("%w: %s: window %v overflows the clock", ErrInvalidConfig, kind, window)
	}
	return &FixedWindow{
		base:    newClockBase(cfg.clock),
		limit:   int64(limit),
		window:  int64(window),
		maxNow:  math.MaxInt64 - 2*int64(window),
		windows: newKeyTable[openWindow](int64(window)),
	}, nil
}

// Allow counts n against key's window if that keeps it within the limit. See
// Limiter for the contract; ctx is not used, as the decision never blocks.
func (w *FixedWindow) Allow(_ context.Context, key string, n int) (Result, error) {
	if err := checkCost(n, int(w.limit)); err != nil {
		return Result{Limit: int(w.limit)}, err
	}
	reading := w.base.elapsed()
	sh, now := w.windows.lock(key, reading, w.maxNow)
	win, at := sh.lookup(key)
	if win.end <= now {
		win = openWindow{} // no window open: nothing counted
	}
	// count <= limit always, so this cannot overflow as count + n could.
	allowed := int64(n) <= w.limit-win.count
	if allowed && n > 0 {
		if win.count == 0 {
			win.end = now + w.window
		}
		win.count += int64(n)
		sh.write(key, at, win, win.end)
	}
	sh.mu.Unlock()

	res := Result{Allowed: allowed, Limit: int(w.limit), Remaining: int(max(w.limit-win.count, 0))}
	if win.count > 0 {
		// A clock behind the shard's time must first catch up.
		lag := lagBehind(now, reading)
		res.ResetAfter = time.Duration(win.end - now + lag)
	}
	if !allowed {
		res.RetryAfter = res.ResetAfter
	}
	return res, nil
}

// Window returns the length of a window.
func (w *FixedWindow) Window() time.Duration { return time.Duration(w.window) }

// Policy returns the limit and the window's length.
func (w *FixedWindow) Policy() Policy {
	return Policy{Limit: int(w.limit), Window: time.Duration(w.window)}
}
