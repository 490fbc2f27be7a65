package ratelimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestCalendarWindowAtTheEndOfALeapYearPastTheZonesTable(t *testing.T) {
	t.Parallel()
	// Past the last offset change a zone lists, its changes follow a
	// yearly rule, and time.ZoneBounds ends a leap year's last period a day
	// early: every window open then must still be the one the wall clock
	// shows, as the model reads it.
	for _, name := range []string{"Europe/Berlin", "America/New_York", "Australia/Sydney", "Australia/Lord_Howe"} {
		loc := zone(t, name)
		for _, year := range []int{2028, 2040, 2044} {
			for p := CalendarHour; p <= CalendarMonth; p++ {
				c := Calendar{Period: p, Location: loc}
				m := newCalendarModel(1, c, time.Time{})
				for _, at := range []time.Time{
					utc(year, 12, 13, 15, 30), utc(year, 12, 30, 23, 45), utc(year, 12, 31, 0, 0),
					utc(year, 12, 31, 0, 15), utc(year, 12, 31, 12, 30), utc(year, 12, 31, 23, 45),
				} {
					start, end := c.window(at)
					wantStart, wantEnd := m.window(at)
					assert.Equal(t, wantStart, start.UTC(), "%s %v at %v: start", name, p, at)
					assert.Equal(t, wantEnd, end.UTC(), "%s %v at %v: end", name, p, at)
				}
			}
		}
	}
}
