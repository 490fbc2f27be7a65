package ratelimit

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// A calendar window's count means the count of a window of its zone: a
// Redis key of one names its zone, by a name that tells zones apart
// whatever they print as (time.Local prints as "Local" on every machine,
// and a FixedZone's name is free text).

// zoneSpanFrom and zoneSpanTo bound the instants at which zoneName compares
// a zone's offsets: from 1970 to 2100.
var (
	zoneSpanFrom = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	zoneSpanTo   = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
)

// zoneName returns the name loc goes by in a calendar window's Redis keys,
// or an error for a zone that cannot be named surely:
//   - a zone whose offset is the same at every instant from 1970 to 2100 is
//     named by that offset: "UTC" for 0 (UTC, a nil loc, FixedZone("UTC",
//     0), Etc/UTC), otherwise "UTC+0900", "UTC-0330" (with seconds when
//     there are some: "UTC+001530"), whatever its own name;
//   - any other zone by its IANA name, when loading that name
//     (time.LoadLocation) gives a zone with the same offset at every
//     instant from 1970 to 2100;
//   - time.Local (and any zone named "Local", or named by the path of its
//     zoneinfo file) by the IANA name of the zone the TZ environment
//     variable or /etc/localtime names, when that zone is time.Local's at
//     every such instant.
//
// Any other zone is refused: a name that loads as another zone, a zone
// loaded from data of its own (time.LoadLocationFromTZData) that no name
// loads, or a time.Local whose name cannot be found. A name holds no ':',
// '{' or '}'.
func zoneName(loc *time.Location) (string, error) {
	if loc == nil {
		return "UTC", nil
	}
	if offset, ok := constantOffset(loc); ok {
		return offsetName(offset), nil
	}
	name := loc.String()
	local := loc == time.Local || name == "Local"
	candidates := []string{name, zoneOfPath(name)}
	if local {
		candidates = append(candidates, localZoneNames()...)
	}
	for _, c := range candidates {
		if c == "" || c == "Local" || strings.ContainsAny(c, ":{}") {
			continue
		}
		if named, err := time.LoadLocation(c); err == nil && sameOffsets(loc, named) {
			return c, nil
		}
	}
	if local {
		return "", errors.New("the zone time.Local cannot be named surely in Redis keys (neither TZ nor /etc/localtime names a zone that agrees with it); pass the zone by its name, as time.LoadLocation(\"Area/City\")")
	}
	return "", fmt.Errorf("the zone %q cannot be named surely in Redis keys: its offset changes, and time.LoadLocation(%q) does not load a zone of the same offsets from 1970 to 2100; pass a zone loaded by its IANA name, or time.FixedZone for one offset", name, name)
}

// localZoneNames returns the names time.Local may have been loaded from:
// TZ's (without a leading ':', and after "zoneinfo/" for a path), and
// the zone /etc/localtime links to.
func localZoneNames() []string {
	var names []string
	if tz, ok := os.LookupEnv("TZ"); ok {
		names = append(names, zoneOfPath(strings.TrimPrefix(tz, ":")))
	}
	if target, err := os.Readlink("/etc/localtime"); err == nil {
		names = append(names, zoneOfPath(target))
	}
	return names
}

// zoneOfPath returns the zone name a path to a zoneinfo file names: the
// part after its last "zoneinfo/"; path itself when it has none and is
// not absolute, and "" otherwise.
func zoneOfPath(path string) string {
	if i := strings.LastIndex(path, "zoneinfo/"); i >= 0 {
		return path[i+len("zoneinfo/"):]
	}
	if strings.HasPrefix(path, "/") || strings.HasPrefix(path, ".") {
		return ""
	}
	return path
}

// offsetName returns the name of a zone of one offset, in seconds east of
// UTC: "UTC", or "UTC+hhmm" ("UTC+hhmmss" when it has seconds).
func offsetName(offset int) string {
	if offset == 0 {
		return "UTC"
	}
	sign := '+'
	if offset < 0 {
		sign, offset = '-', -offset
	}
	h, m, s := offset/3600, offset/60%60, offset%60
	if s != 0 {
		return fmt.Sprintf("UTC%c%02d%02d%02d", sign, h, m, s)
	}
	return fmt.Sprintf("UTC%c%02d%02d", sign, h, m)
}

// constantOffset returns loc's offset and true when it is the same at every
// instant from 1970 to 2100.
func constantOffset(loc *time.Location) (int, bool) {
	_, offset := zoneSpanFrom.In(loc).Zone()
	same := true
	walkOffsets(loc, func(_ time.Time, o int) bool {
		same = o == offset
		return same
	})
	return offset, same
}

// sameOffsets reports whether a and b have the same offset at every
// instant from 1970 to 2100.
func sameOffsets(a, b *time.Location) bool {
	same := true
	for _, pair := range [2][2]*time.Location{{a, b}, {b, a}} {
		walkOffsets(pair[0], func(t time.Time, o int) bool {
			_, other := t.In(pair[1]).Zone()
			same = o == other
			return same
		})
		if !same {
			return false
		}
	}
	return true
}

// walkOffsets calls f with the start (from 1970) and offset of each of
// loc's periods of one offset up to 2100, in order, while f returns
// true.
func walkOffsets(loc *time.Location, f func(start time.Time, offset int) bool) {
	for t := zoneSpanFrom; t.Before(zoneSpanTo); {
		lt := t.In(loc)
		_, offset := lt.Zone()
		if !f(t, offset) {
			return
		}
		_, end := lt.ZoneBounds()
		if end.IsZero() || !end.After(t) {
			return
		}
		t = end
	}
}

// maxZoneNames bounds the zones a zoneNames remembers: beyond, a zone is
// read and named again at each call.
const maxZoneNames = 1024

// zoneNames reads and names the zones of a calendar window's policies
// (Policy.Zone), remembering each name it read. It is safe for concurrent
// use.
type zoneNames struct {
	own   *calendarZone
	known sync.Map // a policy's Zone → *calendarZone
	n     atomic.Int32
}

// calendarZone is one zone of a calendar window: its Location, its name
// (see zoneName), the Zone of the policies it is read from ("" for the
// limiter's own), the first weekday of its weeks (the limiter's), the seg
// of each period, which follows the limiter's prefix in the Redis key (in
// process, the table's key) of a key whose policy is that period in that
// zone, and the limiter's windows of each period last seen in it (cur in
// process, rcur on Redis). It is immutable but for those.
type calendarZone struct {
	loc   *time.Location
	name  string
	given string
	first time.Weekday
	segs  [CalendarMonth + 1]string
	cur   [CalendarMonth + 1]atomic.Pointer[calendarSpan]
	rcur  [CalendarMonth + 1]atomic.Pointer[redisCalendarSpan]
}

// calendarSpan is one window of a CalendarWindow's calendar, in its clock's
// readings (ns since its clock base's start), and its policies. It is
// immutable.
type calendarSpan struct {
	start, end int64
	// policies is the one policy of the limiter's own limit in this
	// window: Window its length.
	policies []NamedPolicy
}

// length returns the span's length.
func (sp *calendarSpan) length() time.Duration { return time.Duration(sp.end - sp.start) }

// redisCalendarSpan is one window of a RedisCalendarWindow's calendar on
// its client's clock, with the script's limits of it. It is immutable but
// for its cache.
type redisCalendarSpan struct {
	start, end int64             // ns of Unix time
	own        *redisbatch.Limit // of the limiter's own limit
	// limits holds the script's limits of this window of the keys'
	// limits, for a limiter built WithPolicyFunc; nil without.
	limits   *redisbatch.LimitCache
	policies []NamedPolicy // of the limiter's own limit in this window
}

// newZoneNames returns the zoneNames of a calendar window whose own
// calendar is cal, or the error of a zone of cal that cannot be named
// (see zoneName); with anyOwn (in process, whose keys are not shared)
// cal's zone is accepted all the same, under a name no other zone has.
func newZoneNames(cal Calendar, anyOwn bool) (*zoneNames, error) {
	z := &zoneNames{}
	name, err := zoneName(cal.Location)
	if err != nil {
		if !anyOwn {
			return nil, err
		}
		name = "\x00own" // never a zone's name, which has no NUL
	}
	z.own = newCalendarZone(cal.location(), name, "", cal.FirstWeekday)
	return z, nil
}

// newCalendarZone returns the calendarZone of loc named name, read from a
// policy's Zone given, of weeks starting on first.
func newCalendarZone(loc *time.Location, name, given string, first time.Weekday) *calendarZone {
	c := &calendarZone{loc: loc, name: name, given: given, first: first}
	for p := CalendarMinute; p <= CalendarMonth; p++ {
		c.segs[p] = periodName(p, first) + ":" + name + ":"
	}
	return c
}

// periodName returns a period's name in keys: its String, and for a week
// its first weekday ("week-monday").
func periodName(p CalendarPeriod, first time.Weekday) string {
	if p == CalendarWeek {
		return p.String() + "-" + strings.ToLower(first.String())
	}
	return p.String()
}

// zone returns the calendarZone of a policy's Zone: the limiter's own for
// "" or a zone of the same name (see zoneName), or an error for a zone
// that cannot be read (see loadZone) or named.
func (z *zoneNames) zone(zone string) (*calendarZone, error) {
	if zone == "" {
		return z.own, nil
	}
	if c, ok := z.known.Load(zone); ok {
		return c.(*calendarZone), nil
	}
	loc, err := loadZone(zone)
	if err != nil {
		return nil, err
	}
	name, err := zoneName(loc)
	if err != nil {
		return nil, err
	}
	c := z.own
	if name != z.own.name {
		c = newCalendarZone(loc, name, zone, z.own.first)
	}
	if z.n.Load() < maxZoneNames {
		if _, loaded := z.known.LoadOrStore(zone, c); !loaded {
			z.n.Add(1)
		}
	}
	return c, nil
}

// loadZone returns the zone a policy's Zone names: "UTC", a name of one
// offset ("UTC+0900", "UTC-0330", "UTC+053045"), or an IANA name that
// time.LoadLocation reads; an error for anything else ("Local" included,
// which names no zone but the machine's).
func loadZone(zone string) (*time.Location, error) {
	if zone == "UTC" {
		return time.UTC, nil
	}
	if rest, ok := strings.CutPrefix(zone, "UTC"); ok {
		offset, ok := parseOffset(rest)
		if !ok {
			return nil, fmt.Errorf("zone %q: want an IANA name, \"UTC\", or \"UTC\" and an offset as +hhmm or -hhmm (+hhmmss with seconds) below 24 hours", zone)
		}
		return time.FixedZone(zone, offset), nil
	}
	if zone == "Local" || strings.ContainsAny(zone, ":{}") {
		return nil, fmt.Errorf("zone %q: want an IANA name, \"UTC\", or \"UTC\" and an offset as +hhmm or -hhmm", zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("zone %q: %w", zone, err)
	}
	return loc, nil
}

// parseOffset returns the seconds east of UTC of "+hhmm", "-hhmm",
// "+hhmmss" or "-hhmmss", below 24 hours with minutes and seconds below
// 60, and true; false for anything else.
func parseOffset(s string) (int, bool) {
	if len(s) != 5 && len(s) != 7 || s[0] != '+' && s[0] != '-' {
		return 0, false
	}
	var parts [3]int
	for i := 0; 1+2*i < len(s); i++ {
		a, b := s[1+2*i], s[2+2*i]
		if a < '0' || a > '9' || b < '0' || b > '9' {
			return 0, false
		}
		parts[i] = int(a-'0')*10 + int(b-'0')
	}
	if parts[0] > 23 || parts[1] > 59 || parts[2] > 59 {
		return 0, false
	}
	offset := parts[0]*3600 + parts[1]*60 + parts[2]
	if s[0] == '-' {
		offset = -offset
	}
	return offset, true
}

// calendar returns the calendar of period in the zone.
func (c *calendarZone) calendar(period CalendarPeriod) Calendar {
	return Calendar{Period: period, Location: c.loc, FirstWeekday: c.first}
}

// checkPolicyZone returns the error of a policy's Zone that no calendar
// window could cut windows in: one that cannot be read (see loadZone) or
// named (see zoneName); nil for "", the limiter's own. A PolicyTable
// checks what it stores with it.
func checkPolicyZone(zone string) error {
	if zone == "" {
		return nil
	}
	loc, err := loadZone(zone)
	if err == nil {
		_, err = zoneName(loc)
	}
	return err
}
