package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
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
	allowed := win.count+int64(n) <= w.limit
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

// checkWindow rejects a limit or window <= 0.
func checkWindow(kind string, limit int, window time.Duration) error {
	if limit <= 0 {
		return fmt.Errorf("%w: %s: limit %d must be > 0", ErrInvalidConfig, kind, limit)
	}
	if window <= 0 {
		return fmt.Errorf("%w: %s: window %v must be > 0", ErrInvalidConfig, kind, window)
	}
	return nil
}

//go:embed scripts/fixedwindow.lua
var fixedWindowLua string

// fixedWindowScript is immutable: go-redis only reads its source and hash.
var fixedWindowScript = redis.NewScript(fixedWindowLua)

// DefaultFixedWindowPrefix is the prefix RedisFixedWindow puts before every
// key unless WithKeyPrefix says otherwise.
const DefaultFixedWindowPrefix = "ratelimit:fw:"

// RedisFixedWindow is a fixed-window counter per key kept in Redis: at most
// limit units of work per window, shared by every process using the same
// Redis.
//
// It decides as FixedWindow does. Each decision is one EVALSHA of an embedded
// Lua script; each key is one counter at prefix+key whose PX TTL is the time
// left in its window, so the window's time is the server's own.
//
// Calls with n < 0 or n > limit are answered without a round trip; n == 0
// reads without creating the key. Redis errors, timeouts and malformed replies
// are returned wrapped, with Allowed false.
//
// A RedisFixedWindow is safe for concurrent use as far as its client is. The
// zero value is not usable; create one with NewRedisFixedWindow.
type RedisFixedWindow struct {
	r      redisLimiter
	window time.Duration
}

// NewRedisFixedWindow returns a fixed window of limit per window per key kept
// in Redis through client: a *redis.Client, *redis.ClusterClient,
// *redis.Ring or failover client.
//
// Redis keeps expiry in milliseconds, so window must be a whole number of
// them. It accepts WithKeyPrefix (default DefaultFixedWindowPrefix). It
// returns an error wrapping ErrInvalidConfig for a nil client, a limit <= 0, a
// window <= 0, not whole milliseconds or beyond 2^52 µs, or an option that
// does not apply.
func NewRedisFixedWindow(client redis.Scripter, limit int, window time.Duration, opts ...Option) (*RedisFixedWindow, error) {
	const kind = "NewRedisFixedWindow"
	r, err := newRedisLimiter(kind, "Redis fixed window", client, fixedWindowScript, DefaultFixedWindowPrefix, "limit", limit, opts)
	if err != nil {
		return nil, err
	}
	if err := checkWindow(kind, limit, window); err != nil {
		return nil, err
	}
	if window%time.Millisecond != 0 {
		return nil, fmt.Errorf("%w: %s: window %v is not a whole number of milliseconds, the unit of Redis expiry", ErrInvalidConfig, kind, window)
	}
	if err := checkRedisSpan(kind, window.Milliseconds(), 1000); err != nil {
		return nil, err
	}
	r.setParam(window.Milliseconds())
	return &RedisFixedWindow{r: r, window: window}, nil
}

// Allow counts n against key's window in Redis if that keeps it within the
// limit. See Limiter for the contract. ctx bounds the round trip.
func (w *RedisFixedWindow) Allow(ctx context.Context, key string, n int) (Result, error) {
	return w.r.allow(ctx, key, n)
}

// Window returns the length of a window.
func (w *RedisFixedWindow) Window() time.Duration { return w.window }

// Policy returns the limit and the window's length.
func (w *RedisFixedWindow) Policy() Policy { return Policy{Limit: w.r.limit, Window: w.window} }
