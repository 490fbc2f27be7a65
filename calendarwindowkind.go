package ratelimit

import (
	"fmt"
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
