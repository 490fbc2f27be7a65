package ratelimit

import (
	"fmt"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// calendarWindowKind declares the calendar window: CalendarWindow in process,
// RedisCalendarWindow on Redis.
type calendarWindowKind struct{}

func (calendarWindowKind) name() string { return "CalendarWindow" }

func (calendarWindowKind) letter(bool) redisbatch.Kind { return redisbatch.CalendarWindow }

func (calendarWindowKind) state(bool) string { return "cal" }

func (calendarWindowKind) redisWindow(_ int, param int64) time.Duration {
	return CalendarPeriod(param).Nominal()
}

func (calendarWindowKind) redisRule(int64) rule { return rule{calendar: true} }

func (calendarWindowKind) inFlight() bool { return false }

func (calendarWindowKind) blocks() blocks { return noBlocks }

func (calendarWindowKind) share(p Policy, live int) Policy { return shareInFlight(p, live) }

func (calendarWindowKind) twin(def Policy, backend Limiter, opts []Option) (Limiter, error) {
	// Its windows are the wall clock's, the same for every replica: the
	// share is of the limit, and the Window is not scaled as a rate's is.
	cal, ok := backend.(interface{ Calendar() Calendar })
	if !ok {
		return nil, fmt.Errorf("%w: a %T has no calendar", ErrInvalidConfig, backend)
	}
	return NewCalendarWindow(def.Limit, cal.Calendar(), opts...)
}

func (w *CalendarWindow) kindOf() kind     { return calendarWindowKind{} }
func (w *CalendarWindow) limiter() Limiter { return w }

func (w *CalendarWindow) engineObserver() *observer {
	if w != nil && w.windows != nil {
		return &w.obs
	}
	return nil
}

func (w *CalendarWindow) clockBase() *clockBase {
	if w != nil && w.windows != nil {
		return &w.base
	}
	return nil
}

func (w *RedisCalendarWindow) kindOf() kind              { return calendarWindowKind{} }
func (w *RedisCalendarWindow) limiter() Limiter          { return w }
func (w *RedisCalendarWindow) engineObserver() *observer { return w.remote().engineObserver() }
func (w *RedisCalendarWindow) remote() *redisLimiter     { return w.shell().remote() }

// windowNow returns the length of w's window open now of a policy, on w's
// clock (see windowTeller).
func (w *CalendarWindow) windowNow() func(Policy) time.Duration {
	if w == nil || w.windows == nil {
		return nil
	}
	return func(p Policy) time.Duration {
		return w.span(periodOfNominal(p.Window), w.zoneOf(p), max(w.base.elapsed(), 0)).length()
	}
}

// windowNow returns the length of w's window open now of a policy, on its
// client's clock (see windowTeller).
func (w *RedisCalendarWindow) windowNow() func(Policy) time.Duration {
	if !w.built() {
		return nil
	}
	return func(p Policy) time.Duration {
		sp := w.span(periodOfNominal(p.Window), w.zoneOf(p, nil))
		return time.Duration(sp.end - sp.start)
	}
}

// part returns w's engine as a Composite's part; nil unless w is built.
func (w *CalendarWindow) part() partEngine {
	if w == nil || w.windows == nil {
		return nil
	}
	return calendarPart{w}
}

// calendarPart is a CalendarWindow as a Composite's part (see partEngine):
// its policy's param is its period, with its zone; built WithPolicyFunc,
// its keys name their period and zone in its table.
type calendarPart struct{ w *CalendarWindow }

func (p calendarPart) policyFunc() *policyFunc { return p.w.policyFunc }
func (p calendarPart) unit() int64             { return 0 }
func (p calendarPart) observer() *observer     { return &p.w.obs }
func (p calendarPart) clock() *clockBase       { return &p.w.base }
func (p calendarPart) segmented() bool         { return p.w.policyFunc != nil }

func (p calendarPart) own() partRate {
	return partRate{limit: p.w.limit, param: int64(p.w.cal.Period), zone: p.w.zones.own}
}

func (p calendarPart) tableKey(key string, r partRate) string {
	return p.w.tableKey(key, CalendarPeriod(r.param), r.zone)
}

// rate returns the part's policy for c's call: its key's, or its own.
func (p calendarPart) rate(c *partCall) partRate {
	if !c.keyed {
		return p.own()
	}
	return c.policy
}

func (p calendarPart) shardLock(c *partCall, key string) *sync.Mutex {
	return lockPart(p.w.windows, c, key)
}

func (p calendarPart) peek(c *partCall, key string, cost int) bool {
	r := p.rate(c)
	win := readPart(p.w.windows, c, key, calendarMaxNow)
	c.win, c.nwin, c.allowed = p.w.take(r.limit, CalendarPeriod(r.param), r.zone, win, c.now, cost)
	return c.allowed
}

// commit reports its limit alone, which is all its Results read, and, for
// an empty window, the next unit: the next unit taken counts until the
// window open now ends.
func (p calendarPart) commit(c *partCall, key string, cost int, allowed bool) {
	writeWindow(c, key, cost, allowed)
	r := p.rate(c)
	win := windowResult(windowRate{limit: r.limit}, c, allowed)
	if c.wantNext && win.count <= 0 {
		c.nextOut = time.Duration(p.w.span(CalendarPeriod(r.param), r.zone, c.now).end - c.now + lagBehind(c.now, c.reading))
	}
}

func (p calendarPart) settle(c *partCall, key string, d int64, a adjustment) Result {
	sh := c.shard.(*tableShard[openWindow])
	r := p.rate(c)
	now := p.w.windows.advance(sh, c.reading, calendarMaxNow)
	return p.w.settleAt(r.limit, CalendarPeriod(r.param), r.zone, sh, key, d, a, now, lagBehind(now, c.reading))
}

func (p calendarPart) reset(c *partCall, key string) {
	sh := c.shard.(*tableShard[openWindow])
	p.w.windows.advance(sh, c.reading, calendarMaxNow)
	_, w := sh.lookup(key)
	p.w.windows.remove(sh, key, w)
}

func (w *RedisCalendarWindow) redisPart() redisPart { return calendarRedisPart{w} }

// calendarRedisPart is a RedisCalendarWindow as a Composite's part (see
// redisPart): its policy's param is its period, with its zone; its limit is
// of the window open now, so every request carries it; built
// WithPolicyFunc, its keys name their period and zone.
type calendarRedisPart struct{ w *RedisCalendarWindow }

func (p calendarRedisPart) own() partRate {
	return partRate{limit: int64(p.w.r.limit), param: int64(p.w.cal.Period), zone: p.w.zones.own}
}

func (p calendarRedisPart) key(key string, r partRate) string {
	return p.w.redisKey(key, CalendarPeriod(r.param), r.zone)
}

func (p calendarRedisPart) segmented() bool { return p.w.r.segOf != nil || p.w.r.policyFunc != nil }
func (p calendarRedisPart) windowed() bool  { return true }

func (p calendarRedisPart) limit(r partRate) *redisbatch.Limit {
	period := CalendarPeriod(r.param)
	return p.w.limitOf(p.w.span(period, r.zone), int(r.limit), period)
}

func (p calendarRedisPart) resetLimit(r partRate) *redisbatch.Limit {
	return p.w.span(CalendarPeriod(r.param), r.zone).own
}

// age is on the clock the part reads its windows from (WithClock), as its
// own Settle takes it.
func (p calendarRedisPart) age(takenAt time.Time) (int64, bool) { return p.w.age(takenAt), true }
