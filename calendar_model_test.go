package ratelimit

import (
	"time"
)

// calendarModel is the reference calendar window: it finds a window by
// reading the wall clock in the zone at instants on a grid, and keeps each
// key's window and count, written for clarity rather than speed. It shares
// no code with the limiters.
type calendarModel struct {
	period CalendarPeriod
	loc    *time.Location
	first  time.Weekday
	limit  int64
	now    time.Time // the clock's reading, which may go backwards
	high   time.Time // the latest reading a decision was made at
	keys   map[string]*modelCalendarKey
}

// modelCalendarKey is a key's count in the window that starts at start.
type modelCalendarKey struct {
	start time.Time
	count int64
}

func newCalendarModel(limit int, cal Calendar, start time.Time) *calendarModel {
	loc := cal.Location
	if loc == nil {
		loc = time.UTC
	}
	return &calendarModel{period: cal.Period, loc: loc, first: cal.FirstWeekday, limit: int64(limit), now: start, high: start, keys: map[string]*modelCalendarKey{}}
}

// label is what the wall clock shows at t, to the period.
func (m *calendarModel) label(t time.Time) string {
	w := t.In(m.loc)
	switch m.period {
	case CalendarMinute:
		return w.Format("2006-01-02 15:04")
	case CalendarHour:
		return w.Format("2006-01-02 15")
	case CalendarDay:
		return w.Format("2006-01-02")
	case CalendarWeek:
		back := (int(w.Weekday()) - int(m.first) + 7) % 7
		y, mo, d := w.Date()
		return time.Date(y, mo, d-back, 12, 0, 0, 0, time.UTC).Format("2006-01-02")
	}
	return w.Format("2006-01")
}

// grid is the step at which every window boundary of the zones the tests
// use falls: a minute for minutes, 15 minutes otherwise (whole-minute
// instants of UTC).
func (m *calendarModel) grid() time.Duration {
	if m.period == CalendarMinute {
		return time.Minute
	}
	return 15 * time.Minute
}

// window returns the start and end of the window that holds t: the
// bounds of the run of grid instants around t that show t's label.
func (m *calendarModel) window(t time.Time) (start, end time.Time) {
	g := m.grid()
	l := m.label(t)
	start = t.Truncate(g)
	for m.label(start.Add(-g)) == l {
		start = start.Add(-g)
	}
	end = t.Truncate(g).Add(g)
	for m.label(end) == l {
		end = end.Add(g)
	}
	return start, end
}

// advance moves the model's clock by d, backwards for a negative d.
func (m *calendarModel) advance(d time.Duration) { m.now = m.now.Add(d) }

// allow decides n for key as the limiter must, at the latest time a
// decision was made at (time stands still while the clock is behind).
func (m *calendarModel) allow(key string, n int) Result {
	if m.now.After(m.high) {
		m.high = m.now
	}
	lag := m.high.Sub(m.now)
	start, end := m.window(m.high)
	k := m.keys[key]
	var count int64
	if k != nil && k.start.Equal(start) {
		count = k.count
	}
	res := Result{Limit: int(m.limit), Allowed: count+int64(n) <= m.limit}
	if res.Allowed && n > 0 {
		count += int64(n)
		m.keys[key] = &modelCalendarKey{start: start, count: count}
	}
	res.Remaining = int(max(m.limit-count, 0))
	if count > 0 {
		res.ResetAfter = end.Sub(m.high) + lag
	}
	if !res.Allowed {
		res.RetryAfter = res.ResetAfter
	}
	return res
}
