package ratelimit

import (
	"testing"
	"time"
	_ "time/tzdata" // the zones the tests name, whatever the machine has

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// zone loads a named time zone from the embedded database.
func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// utc is a UTC time, for the expected window bounds.
func utc(y int, mo time.Month, d, h, mi int) time.Time {
	return time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
}

// windowCase is a calendar, an instant, and the window that holds it, in
// UTC.
type windowCase struct {
	name       string
	cal        Calendar
	at         time.Time
	start, end time.Time
	wantLength time.Duration
}

func checkWindows(t *testing.T, cases []windowCase) {
	t.Helper()
	for _, tc := range cases {
		start, end := tc.cal.window(tc.at)
		assert.Equal(t, tc.start, start.UTC(), tc.name+": start")
		assert.Equal(t, tc.end, end.UTC(), tc.name+": end")
		assert.Equal(t, tc.wantLength, end.Sub(start), tc.name+": length")
	}
}

func TestCalendarWindowsAcrossNorthernDaylightSaving(t *testing.T) {
	ny := zone(t, "America/New_York")
	hour := Calendar{Period: CalendarHour, Location: ny}
	day := Calendar{Period: CalendarDay, Location: ny}
	minute := Calendar{Period: CalendarMinute, Location: ny}
	checkWindows(t, []windowCase{
		// 2026-03-08 02:00 EST becomes 03:00 EDT: hour 2 has no window.
		{"spring: hour 1", hour, utc(2026, 3, 8, 6, 30), utc(2026, 3, 8, 6, 0), utc(2026, 3, 8, 7, 0), time.Hour},
		{"spring: hour 3 follows hour 1", hour, utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 7, 0), utc(2026, 3, 8, 8, 0), time.Hour},
		{"spring: a day of 23 hours", day, utc(2026, 3, 8, 12, 0), utc(2026, 3, 8, 5, 0), utc(2026, 3, 9, 4, 0), 23 * time.Hour},
		{"spring: the day before", day, utc(2026, 3, 8, 4, 59), utc(2026, 3, 7, 5, 0), utc(2026, 3, 8, 5, 0), 24 * time.Hour},
		// 2026-11-01 02:00 EDT becomes 01:00 EST: hour 1 is shown twice.
		{"fall: hour 1 in EDT", hour, utc(2026, 11, 1, 5, 30), utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 7, 0), 2 * time.Hour},
		{"fall: hour 1 in EST", hour, utc(2026, 11, 1, 6, 59), utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 7, 0), 2 * time.Hour},
		{"fall: hour 2", hour, utc(2026, 11, 1, 7, 0), utc(2026, 11, 1, 7, 0), utc(2026, 11, 1, 8, 0), time.Hour},
		{"fall: hour 0", hour, utc(2026, 11, 1, 4, 59), utc(2026, 11, 1, 4, 0), utc(2026, 11, 1, 5, 0), time.Hour},
		{"fall: minutes stay minutes", minute, utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 6, 0), utc(2026, 11, 1, 6, 1), time.Minute},
		{"fall: the last EDT minute", minute, utc(2026, 11, 1, 5, 59), utc(2026, 11, 1, 5, 59), utc(2026, 11, 1, 6, 0), time.Minute},
		{"fall: a day of 25 hours", day, utc(2026, 11, 1, 4, 0), utc(2026, 11, 1, 4, 0), utc(2026, 11, 2, 5, 0), 25 * time.Hour},
		{"fall: a week across it", Calendar{Period: CalendarWeek, Location: ny}, utc(2026, 11, 3, 0, 0), utc(2026, 11, 1, 4, 0), utc(2026, 11, 8, 5, 0), 7*24*time.Hour + time.Hour},
		{"spring: a month across it", Calendar{Period: CalendarMonth, Location: ny}, utc(2026, 3, 20, 0, 0), utc(2026, 3, 1, 5, 0), utc(2026, 4, 1, 4, 0), 31*24*time.Hour - time.Hour},
	})
}

func TestCalendarWindowsAcrossSouthernDaylightSaving(t *testing.T) {
	syd := zone(t, "Australia/Sydney")
	hour := Calendar{Period: CalendarHour, Location: syd}
	day := Calendar{Period: CalendarDay, Location: syd}
	checkWindows(t, []windowCase{
		// 2026-04-05 03:00 AEDT (+11) becomes 02:00 AEST (+10).
		{"fall: hour 2 twice", hour, utc(2026, 4, 4, 16, 30), utc(2026, 4, 4, 15, 0), utc(2026, 4, 4, 17, 0), 2 * time.Hour},
		{"fall: a day of 25 hours", day, utc(2026, 4, 5, 0, 0), utc(2026, 4, 4, 13, 0), utc(2026, 4, 5, 14, 0), 25 * time.Hour},
		// 2026-10-04 02:00 AEST becomes 03:00 AEDT.
		{"spring: hour 1", hour, utc(2026, 10, 3, 15, 59), utc(2026, 10, 3, 15, 0), utc(2026, 10, 3, 16, 0), time.Hour},
		{"spring: hour 3", hour, utc(2026, 10, 3, 16, 0), utc(2026, 10, 3, 16, 0), utc(2026, 10, 3, 17, 0), time.Hour},
		{"spring: a day of 23 hours", day, utc(2026, 10, 4, 0, 0), utc(2026, 10, 3, 14, 0), utc(2026, 10, 4, 13, 0), 23 * time.Hour},
		{"spring: a month across it", Calendar{Period: CalendarMonth, Location: syd}, utc(2026, 10, 10, 0, 0), utc(2026, 9, 30, 14, 0), utc(2026, 10, 31, 13, 0), 31*24*time.Hour - time.Hour},
	})
}

func TestCalendarMonthsEndOnTheirLastDay(t *testing.T) {
	month := Calendar{Period: CalendarMonth}
	checkWindows(t, []windowCase{
		{"February 2028 (leap)", month, utc(2028, 2, 29, 23, 59), utc(2028, 2, 1, 0, 0), utc(2028, 3, 1, 0, 0), 29 * 24 * time.Hour},
		{"March 2028", month, utc(2028, 3, 1, 0, 0), utc(2028, 3, 1, 0, 0), utc(2028, 4, 1, 0, 0), 31 * 24 * time.Hour},
		{"February 2027", month, utc(2027, 2, 28, 23, 59), utc(2027, 2, 1, 0, 0), utc(2027, 3, 1, 0, 0), 28 * 24 * time.Hour},
		{"April", month, utc(2027, 4, 30, 12, 0), utc(2027, 4, 1, 0, 0), utc(2027, 5, 1, 0, 0), 30 * 24 * time.Hour},
		{"December", month, utc(2026, 12, 31, 23, 59), utc(2026, 12, 1, 0, 0), utc(2027, 1, 1, 0, 0), 31 * 24 * time.Hour},
		{"January after it", month, utc(2027, 1, 1, 0, 0), utc(2027, 1, 1, 0, 0), utc(2027, 2, 1, 0, 0), 31 * 24 * time.Hour},
	})
}

func TestCalendarWeeksStartOnTheirFirstWeekday(t *testing.T) {
	// 2026-11-29 is a Sunday.
	checkWindows(t, []windowCase{
		{"Monday weeks: Sunday ends one", Calendar{Period: CalendarWeek, FirstWeekday: time.Monday}, utc(2026, 11, 29, 23, 59), utc(2026, 11, 23, 0, 0), utc(2026, 11, 30, 0, 0), 7 * 24 * time.Hour},
		{"Monday weeks: Monday starts one", Calendar{Period: CalendarWeek, FirstWeekday: time.Monday}, utc(2026, 11, 30, 0, 0), utc(2026, 11, 30, 0, 0), utc(2026, 12, 7, 0, 0), 7 * 24 * time.Hour},
		{"Sunday weeks (the zero value): Sunday starts one", Calendar{Period: CalendarWeek}, utc(2026, 11, 29, 0, 0), utc(2026, 11, 29, 0, 0), utc(2026, 12, 6, 0, 0), 7 * 24 * time.Hour},
		{"Sunday weeks: Saturday ends one", Calendar{Period: CalendarWeek}, utc(2026, 11, 28, 23, 59), utc(2026, 11, 22, 0, 0), utc(2026, 11, 29, 0, 0), 7 * 24 * time.Hour},
		{"weeks across a year", Calendar{Period: CalendarWeek, FirstWeekday: time.Monday}, utc(2027, 1, 1, 0, 0), utc(2026, 12, 28, 0, 0), utc(2027, 1, 4, 0, 0), 7 * 24 * time.Hour},
	})
}

func TestCalendarHoursOfAHalfHourZoneStartAtHalfPast(t *testing.T) {
	kolkata := zone(t, "Asia/Kolkata") // +05:30
	checkWindows(t, []windowCase{
		{"hour", Calendar{Period: CalendarHour, Location: kolkata}, utc(2026, 11, 30, 10, 45), utc(2026, 11, 30, 10, 30), utc(2026, 11, 30, 11, 30), time.Hour},
		{"hour, before half past", Calendar{Period: CalendarHour, Location: kolkata}, utc(2026, 11, 30, 10, 29), utc(2026, 11, 30, 9, 30), utc(2026, 11, 30, 10, 30), time.Hour},
		{"day", Calendar{Period: CalendarDay, Location: kolkata}, utc(2026, 11, 30, 12, 0), utc(2026, 11, 29, 18, 30), utc(2026, 11, 30, 18, 30), 24 * time.Hour},
	})
}

func TestCalendarWindowOfAHalfHourDaylightShift(t *testing.T) {
	// Lord Howe Island moves by 30 minutes: on 2026-04-05 02:00 (+11)
	// becomes 01:30 (+10:30), so hour 1 is shown for 90 minutes; on
	// 2026-10-04 02:00 (+10:30) becomes 02:30 (+11), so hour 2 lasts 30.
	lh := zone(t, "Australia/Lord_Howe")
	hour := Calendar{Period: CalendarHour, Location: lh}
	checkWindows(t, []windowCase{
		{"fall: hour 1 of 90 minutes", hour, utc(2026, 4, 4, 15, 10), utc(2026, 4, 4, 14, 0), utc(2026, 4, 4, 15, 30), 90 * time.Minute},
		{"spring: hour 2 of 30 minutes", hour, utc(2026, 10, 3, 15, 40), utc(2026, 10, 3, 15, 30), utc(2026, 10, 3, 16, 0), 30 * time.Minute},
	})
}

func TestCalendarWindowHoldsEveryInstantOfIt(t *testing.T) {
	// Every instant of a window maps to that window, across changes.
	for _, name := range []string{"America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata"} {
		loc := zone(t, name)
		for p := CalendarMinute; p <= CalendarDay; p++ {
			c := Calendar{Period: p, Location: loc}
			at := utc(2026, 3, 1, 0, 0)
			for at.Before(utc(2026, 12, 1, 0, 0)) {
				start, end := c.window(at)
				require.True(t, !at.Before(start) && at.Before(end), "%s %v at %v: [%v, %v)", name, p, at, start, end)
				s2, e2 := c.window(end.Add(-1))
				require.Equal(t, start, s2, "%s %v: the window's last instant", name, p)
				require.Equal(t, end, e2, "%s %v: the window's last instant", name, p)
				ns, _ := c.window(end)
				require.Equal(t, end, ns, "%s %v: the next window starts at the end", name, p)
				at = end.Add(time.Duration(p) * 37 * time.Hour) // a sample, not every window
			}
		}
	}
}

func TestCalendarRefusesWhatIsNotACalendar(t *testing.T) {
	for _, c := range []Calendar{{}, {Period: CalendarMonth + 1}, {Period: CalendarWeek, FirstWeekday: 7}, {Period: CalendarWeek, FirstWeekday: -1}} {
		_, err := NewCalendarWindow(10, c)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", c)
	}
	_, err := NewCalendarWindow(0, Calendar{Period: CalendarDay})
	require.ErrorIs(t, err, ErrInvalidConfig)
}
