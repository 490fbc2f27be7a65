package ratelimit

import (
	"fmt"

	"time"
)

// CalendarPeriod is the span of a calendar window: a minute, an hour, a
// day, a week or a month of the wall clock. Its zero value is not a
// period: a Calendar needs one of the constants.
type CalendarPeriod int

// The periods of a Calendar.
const (
	// CalendarMinute is a minute of the wall clock: from :ss = 00 to the
	// next.
	CalendarMinute CalendarPeriod = iota + 1
	// CalendarHour is an hour of the wall clock.
	CalendarHour
	// CalendarDay is a day of the wall clock, from midnight to midnight.
	CalendarDay
	// CalendarWeek is a week of the wall clock, from midnight at the start
	// of Calendar.FirstWeekday to the next.
	CalendarWeek
	// CalendarMonth is a month of the wall clock, from midnight at the
	// start of its 1st to the next 1st.
	CalendarMonth
)

// String returns the period's name in lower case ("minute", "hour", "day",
// "week", "month"), or "CalendarPeriod(n)" for any other value.
func (p CalendarPeriod) String() string {
	switch p {
	case CalendarMinute:
		return "minute"
	case CalendarHour:
		return "hour"
	case CalendarDay:
		return "day"
	case CalendarWeek:
		return "week"
	case CalendarMonth:
		return "month"
	}
	return fmt.Sprintf("CalendarPeriod(%d)", int(p))
}

// Nominal returns the period's nominal length, which a Policy's Window
// names it by: 1m, 1h, 24h, 168h (7 days) and 720h (30 days) for a month;
// 0 for a value that is not a period. A window may be shorter or longer
// (see Calendar).
func (p CalendarPeriod) Nominal() time.Duration {
	switch p {
	case CalendarMinute:
		return time.Minute
	case CalendarHour:
		return time.Hour
	case CalendarDay:
		return 24 * time.Hour
	case CalendarWeek:
		return 7 * 24 * time.Hour
	case CalendarMonth:
		return 30 * 24 * time.Hour
	}
	return 0
}

// periodOfNominal returns the period whose nominal length is d; 0 for none.
func periodOfNominal(d time.Duration) CalendarPeriod {
	for p := CalendarMinute; p <= CalendarMonth; p++ {
		if p.Nominal() == d {
			return p
		}
	}
	return 0
}

// Calendar says how a calendar window is cut: by Period, on the wall clock
// of Location.
//
// A window is a span of time during which the wall clock in Location shows
// the same minute, hour, day, week (weeks start at 00:00 on FirstWeekday)
// or month, from the instant it first shows it to the instant it shows
// another. So, where a zone changes its offset:
//   - a day across a daylight-saving change lasts 23 or 25 hours;
//   - at a fall-back change the repeated hour is one hour window of two
//     hours (the wall clock shows that hour throughout), while each minute
//     window stays one minute long;
//   - at a spring-forward change the skipped hour has no window, and a
//     window the change cuts into (an hour of a zone that moves by 30
//     minutes) is as long as the wall clock shows it.
//
// Months last 28 to 31 days, and in a zone whose offset is not whole hours
// (+05:30) hour windows start at :30 UTC.
//
// The zero Location is UTC; FirstWeekday applies to CalendarWeek only,
// and its zero value is Sunday.
//
// On Redis a key's count is named by its zone, which must be sure on every
// replica whatever the zone prints as (time.Local prints "Local"
// everywhere, and a FixedZone's name is free text): a zone whose offset is
// the same at every instant from 1970 to 2100 goes by that offset ("UTC",
// "UTC+0900", "UTC-0330", whatever its name: Asia/Tokyo and
// time.FixedZone("JST", 9*3600) share keys); any other by its IANA name,
// when time.LoadLocation of that name gives the same offsets from 1970 to
// 2100; time.Local by the IANA name TZ or /etc/localtime gives it, when
// that zone is time.Local's. A RedisCalendarWindow refuses any other zone
// (ErrInvalidConfig): a time.Local it cannot name, or a zone loaded from
// data of its own under a name that loads another. Replicas should load
// zones from one zone database.
type Calendar struct {
	Period       CalendarPeriod
	Location     *time.Location
	FirstWeekday time.Weekday
}

// location returns the Calendar's Location, UTC when nil.
func (c Calendar) location() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

// check returns an error wrapping ErrInvalidConfig, starting with kind,
// when c is not a calendar a window can be cut by.
func (c Calendar) check(kind string) error {
	if c.Period < CalendarMinute || c.Period > CalendarMonth {
		return fmt.Errorf("%w: %s: calendar period %v; want CalendarMinute, CalendarHour, CalendarDay, CalendarWeek or CalendarMonth", ErrInvalidConfig, kind, c.Period)
	}
	if c.FirstWeekday < time.Sunday || c.FirstWeekday > time.Saturday {
		return fmt.Errorf("%w: %s: first weekday %d is not a time.Weekday", ErrInvalidConfig, kind, int(c.FirstWeekday))
	}
	return nil
}

// wallLabel is the wall-clock reading a window shows throughout: its
// minute, hour, day, week (by its first day) or month.
type wallLabel struct {
	year              int
	month             time.Month
	day, hour, minute int
}

// maxZoneHops bounds how many changes of a zone's offset one window may
// span: a month of a zone that changed every few days.
const maxZoneHops = 8

// window returns the calendar window of c that holds t: the first instant
// at which the wall clock in c's Location shows what it shows at t (see
// Calendar), and the first at which it shows the next. It works in the
// fixed offset of each period of the zone (time.ZoneBounds), so that it is
// never ambiguous at a change, and joins the pieces of the periods on
// either side that show the same. It is pure and safe for concurrent use.
func (c Calendar) window(t time.Time) (start, end time.Time) {
	start, end, label, from, to := c.piece(t.In(c.location()))
	for i := 0; i < maxZoneHops && start.Equal(from); i++ {
		s, _, l, f, _ := c.piece(start.Add(-1).In(c.location()))
		if l != label {
			break
		}
		start, from = s, f
	}
	for i := 0; i < maxZoneHops && end.Equal(to); i++ {
		_, e, l, _, tt := c.piece(end.In(c.location()))
		if l != label {
			break
		}
		end, to = e, tt
	}
	return start, end
}

// piece returns the part of t's window within the period of t's zone that
// holds t, the window's wall-clock label, and that period's bounds (the
// zero Time where it has none).
func (c Calendar) piece(t time.Time) (start, end time.Time, label wallLabel, from, to time.Time) {
	from, to = zoneBounds(t)
	name, offset := t.Zone()
	ft := t.In(time.FixedZone(name, offset))
	start, end = c.truncate(ft)
	label = wallLabel{start.Year(), start.Month(), start.Day(), start.Hour(), start.Minute()}
	if !from.IsZero() && start.Before(from) {
		start = from
	}
	if !to.IsZero() && end.After(to) {
		end = to
	}
	return start, end, label, from, to
}

// zoneBounds returns the bounds of the period of t's zone that holds t, as
// time.ZoneBounds does, but always around t: past the last change a zone
// lists, where its offsets follow a yearly rule, ZoneBounds may end the
// last period of a leap year a day early, at or before t (a period of the
// same offset follows it). Such an end is moved on by a day, which is
// where the year ends; one still not after t, or a start after t, is
// dropped (the zero Time: no bound known).
func zoneBounds(t time.Time) (from, to time.Time) {
	from, to = t.ZoneBounds()
	if !to.IsZero() && !to.After(t) {
		to = to.Add(24 * time.Hour)
		if !to.After(t) {
			to = time.Time{}
		}
	}
	if from.After(t) {
		from = time.Time{}
	}
	return from, to
}

// truncate returns the start and end of the window that holds ft on the
// wall clock of ft's fixed zone.
func (c Calendar) truncate(ft time.Time) (start, end time.Time) {
	y, mo, d := ft.Date()
	loc := ft.Location()
	switch c.Period {
	case CalendarMinute:
		start = time.Date(y, mo, d, ft.Hour(), ft.Minute(), 0, 0, loc)
		return start, start.Add(time.Minute)
	case CalendarHour:
		start = time.Date(y, mo, d, ft.Hour(), 0, 0, 0, loc)
		return start, start.Add(time.Hour)
	case CalendarWeek:
		back := (int(ft.Weekday()) - int(c.FirstWeekday) + 7) % 7
		return time.Date(y, mo, d-back, 0, 0, 0, 0, loc), time.Date(y, mo, d-back+7, 0, 0, 0, 0, loc)
	case CalendarMonth:
		return time.Date(y, mo, 1, 0, 0, 0, 0, loc), time.Date(y, mo+1, 1, 0, 0, 0, 0, loc)
	}
	return time.Date(y, mo, d, 0, 0, 0, 0, loc), time.Date(y, mo, d+1, 0, 0, 0, 0, loc)
}
