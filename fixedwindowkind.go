package ratelimit

import (
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// fixedWindowKind declares the fixed window: FixedWindow in process,
// RedisFixedWindow on Redis.
type fixedWindowKind struct{}

func (fixedWindowKind) name() string { return "FixedWindow" }

func (fixedWindowKind) letter(bool) redisbatch.Kind { return redisbatch.FixedWindow }

func (fixedWindowKind) state(bool) string { return "fw" }

func (fixedWindowKind) redisWindow(_ int, param int64) time.Duration {
	return time.Duration(param) * time.Millisecond
}

func (fixedWindowKind) redisRule(int64) rule { return rule{} }

func (fixedWindowKind) inFlight() bool { return false }

func (fixedWindowKind) blocks() blocks { return blocksByWindow }

func (fixedWindowKind) share(p Policy, live int) Policy { return sharePolicy(p, live) }

func (fixedWindowKind) twin(def Policy, _ Limiter, opts []Option) (Limiter, error) {
	return NewFixedWindow(def.Limit, def.Window, opts...)
}

func (w *FixedWindow) kindOf() kind     { return fixedWindowKind{} }
func (w *FixedWindow) limiter() Limiter { return w }

func (w *FixedWindow) engineObserver() *observer {
	if w != nil && w.windows != nil {
		return &w.obs
	}
	return nil
}

func (w *FixedWindow) clockBase() *clockBase {
	if w != nil && w.windows != nil {
		return &w.base
	}
	return nil
}

func (w *RedisFixedWindow) kindOf() kind              { return fixedWindowKind{} }
func (w *RedisFixedWindow) limiter() Limiter          { return w }
func (w *RedisFixedWindow) engineObserver() *observer { return w.remote().engineObserver() }
func (w *RedisFixedWindow) remote() *redisLimiter     { return w.rate().remote() }
func (w *RedisFixedWindow) redisPart() redisPart      { return plainPart{w.remote()} }

// part returns w's engine as a Composite's part; nil unless w is built.
func (w *FixedWindow) part() partEngine {
	if w == nil || w.windows == nil {
		return nil
	}
	return windowPart{w}
}

// windowPart is a FixedWindow as a Composite's part (see partEngine).
type windowPart struct{ w *FixedWindow }

func (p windowPart) policyFunc() *policyFunc                { return p.w.policyFunc }
func (p windowPart) own() partRate                          { return partRate{limit: p.w.limit, param: p.w.window} }
func (p windowPart) unit() int64                            { return 0 }
func (p windowPart) observer() *observer                    { return &p.w.obs }
func (p windowPart) clock() *clockBase                      { return &p.w.base }
func (p windowPart) segmented() bool                        { return false }
func (p windowPart) tableKey(key string, _ partRate) string { return key }

// rate returns the part's windowRate for c's call: its policy's, or its own.
func (p windowPart) rate(c *partCall) windowRate {
	if !c.keyed {
		return p.w.windowRate
	}
	return windowRate{limit: c.policy.limit, window: c.policy.param}
}

func (p windowPart) shardLock(c *partCall, key string) *sync.Mutex {
	return lockPart(p.w.windows, c, key)
}

func (p windowPart) peek(c *partCall, key string, cost int) bool {
	win := readPart(p.w.windows, c, key, p.w.maxNow)
	c.win, c.nwin, c.allowed = p.rate(c).take(win, c.now, cost)
	return c.allowed
}

func (p windowPart) commit(c *partCall, key string, cost int, allowed bool) {
	writeWindow(c, key, cost, allowed)
	windowResult(p.rate(c), c, allowed)
}

// writeWindow writes c's window after the call to key when the call takes
// units: a window part's (FixedWindow, CalendarWindow) commit.
func writeWindow(c *partCall, key string, cost int, allowed bool) {
	if !allowed || cost == 0 {
		return
	}
	sh := c.shard.(*tableShard[openWindow])
	if c.shared {
		// Another part's write may have moved the key in the shard they
		// share.
		_, c.where = sh.lookup(key)
	}
	sh.write(key, c.where, c.nwin, c.nwin.end)
}

// windowResult sets c's Result, a window part's of rate r, and returns the
// window it reports.
func windowResult(r windowRate, c *partCall, allowed bool) openWindow {
	lag := lagBehind(c.now, c.reading)
	switch {
	case allowed:
		c.res = r.result(true, c.nwin, c.now, lag)
		return c.nwin
	case c.allowed:
		c.res = r.result(false, c.win, c.now, lag)
	default:
		c.res = r.denial(c.win, c.now, lag)
	}
	return c.win
}

func (p windowPart) settle(c *partCall, key string, d int64, a adjustment) Result {
	sh := c.shard.(*tableShard[openWindow])
	now := p.w.windows.advance(sh, c.reading, p.w.maxNow)
	return p.w.settleAt(p.rate(c), sh, key, d, a, now, lagBehind(now, c.reading))
}

func (p windowPart) reset(c *partCall, key string) {
	sh := c.shard.(*tableShard[openWindow])
	p.w.windows.advance(sh, c.reading, p.w.maxNow)
	_, w := sh.lookup(key)
	p.w.windows.remove(sh, key, w)
}
