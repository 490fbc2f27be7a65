package ratelimit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// mustZone loads an IANA zone, or fails the test.
func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// zoneData returns the bytes of an IANA zone's file, or skips the test
// where the system has no zone database.
func zoneData(t *testing.T, name string) []byte {
	t.Helper()
	for _, dir := range []string{os.Getenv("ZONEINFO"), "/usr/share/zoneinfo"} {
		if dir == "" {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			return b
		}
	}
	t.Skipf("no zoneinfo file of %s on this system", name)
	return nil
}

// TestZoneNamesTellZonesApart: a zone is named in keys by what it is, not
// by what it prints as: one offset by that offset whatever its name, any
// other zone by an IANA name that loads as it, and anything else refused.
func TestZoneNamesTellZonesApart(t *testing.T) {
	berlinAsCustom, err := time.LoadLocationFromTZData("Custom/Berlin", zoneData(t, "Europe/Berlin"))
	require.NoError(t, err)
	berlinNamedRightly, err := time.LoadLocationFromTZData("Europe/Berlin", zoneData(t, "Europe/Berlin"))
	require.NoError(t, err)
	newYorkAsBerlin, err := time.LoadLocationFromTZData("Europe/Berlin", zoneData(t, "America/New_York"))
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		loc  *time.Location
		want string // "" for a zone refused
	}{
		{"nil", nil, "UTC"},
		{"time.UTC", time.UTC, "UTC"},
		{"FixedZone UTC 0", time.FixedZone("UTC", 0), "UTC"},
		{"Etc/UTC", mustZone(t, "Etc/UTC"), "UTC"},
		{"FixedZone UTC +9", time.FixedZone("UTC", 9*3600), "UTC+0900"},
		{"FixedZone JST +9", time.FixedZone("JST", 9*3600), "UTC+0900"},
		{"Asia/Tokyo, of one offset since 1970", mustZone(t, "Asia/Tokyo"), "UTC+0900"},
		{"FixedZone +05:30", time.FixedZone("IST", 5*3600+30*60), "UTC+0530"},
		{"FixedZone -03:30", time.FixedZone("NST", -(3*3600 + 30*60)), "UTC-0330"},
		{"FixedZone with seconds", time.FixedZone("LMT", 3600+15*60+30), "UTC+011530"},
		{"Europe/Berlin", mustZone(t, "Europe/Berlin"), "Europe/Berlin"},
		{"America/New_York", mustZone(t, "America/New_York"), "America/New_York"},
		{"FixedZone named Europe/Berlin", time.FixedZone("Europe/Berlin", 3600), "UTC+0100"},
		{"Berlin's data under its own name", berlinNamedRightly, "Europe/Berlin"},
		{"Berlin's data under a name that loads nothing", berlinAsCustom, ""},
		{"New York's data named Europe/Berlin", newYorkAsBerlin, ""},
	} {
		got, err := zoneName(tc.loc)
		if tc.want == "" {
			assert.Error(t, err, tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
}

// TestRedisCalendarWindowRefusesAZoneItCannotName: a zone whose name in
// keys would not be sure is refused at construction with an error that
// names it; in process, where keys are not shared, it is accepted.
func TestRedisCalendarWindowRefusesAZoneItCannotName(t *testing.T) {
	custom, err := time.LoadLocationFromTZData("Custom/Berlin", zoneData(t, "Europe/Berlin"))
	require.NoError(t, err)
	_, client, _ := miniredisClock(t)
	_, err = NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay, Location: custom})
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), `"Custom/Berlin"`)
	_, err = NewCalendarWindow(5, Calendar{Period: CalendarDay, Location: custom})
	require.NoError(t, err)
}

// TestZonesThatPrintAlikeNeverShareAQuota: replicas whose calendars are
// UTC's and a zone 9 hours ahead that prints as "UTC" count apart: one
// that used its quota leaves the other's whole.
func TestZonesThatPrintAlikeNeverShareAQuota(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	clock := WithClock(ratelimittest.NewClock(epoch))
	utc, err := NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay, Location: time.UTC}, clock)
	require.NoError(t, err)
	tokyo, err := NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay, Location: time.FixedZone("UTC", 9*3600)}, clock)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:cal:5:day:UTC:", utc.KeyPrefix())
	assert.Equal(t, "ratelimit:cal:5:day:UTC+0900:", tokyo.KeyPrefix())
	for range 5 {
		res, err := utc.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	allowed := 0
	for range 20 {
		res, err := tokyo.Allow(ctx, "k", 1)
		require.NoError(t, err)
		if res.Allowed {
			allowed++
		}
	}
	assert.Equal(t, 5, allowed, "the zone 9 hours ahead has its own 5")
}

// localZoneChild is the environment variable under which the test binary,
// run again by TestTimeLocalIsNamedByItsZoneOrRefused, prints the key
// prefix of a RedisCalendarWindow of time.Local, or its error.
const localZoneChild = "RATELIMIT_TEST_LOCAL_ZONE_CHILD"

// TestTimeLocalIsNamedByItsZoneOrRefused runs the test binary again under
// several TZ: time.Local prints "Local" on every machine, and is named in
// keys by the zone TZ names (so that replicas in UTC and in Tokyo never
// share a key), or refused, with an error that says what to pass, when no
// name is sure.
func TestTimeLocalIsNamedByItsZoneOrRefused(t *testing.T) {
	if os.Getenv(localZoneChild) != "" {
		_, client, _ := miniredisClock(t)
		w, err := NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay, Location: time.Local})
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Println("prefix:", w.KeyPrefix())
		return
	}
	t.Parallel()
	dir := t.TempDir()
	copied := filepath.Join(dir, "somewhere")
	require.NoError(t, os.WriteFile(copied, zoneData(t, "Europe/Berlin"), 0o600))
	want := map[string]string{
		"UTC":              "prefix: ratelimit:cal:5:day:UTC:",
		"Asia/Tokyo":       "prefix: ratelimit:cal:5:day:UTC+0900:",
		"Europe/Berlin":    "prefix: ratelimit:cal:5:day:Europe/Berlin:",
		":America/Chicago": "prefix: ratelimit:cal:5:day:America/Chicago:",
		":" + copied:       `time.LoadLocation("Area/City")`,
	}
	if _, err := os.Stat("/usr/share/zoneinfo/America/Chicago"); err == nil {
		want[":/usr/share/zoneinfo/America/Chicago"] = "prefix: ratelimit:cal:5:day:America/Chicago:"
	}
	for tz, want := range want {
		t.Run(tz, func(t *testing.T) {
			t.Parallel() // a child process each: they wait on each other's start-up no more
			cmd := exec.Command(os.Args[0], "-test.run=^TestTimeLocalIsNamedByItsZoneOrRefused$", "-test.count=1")
			cmd.Env = append(os.Environ(), localZoneChild+"=1", "TZ="+tz)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), want, "TZ=%s", tz)
			if strings.HasPrefix(want, "prefix") {
				assert.NotContains(t, string(out), "Local", "TZ=%s", tz)
			}
		})
	}
}

// zonedPlans gives key "tokyo" 2 a day in Asia/Tokyo, "newyork" 2 a day in
// America/New_York, and "mover" 2 a day in the zone moverZone names (the
// limiter's own for ""); every other key the limiter's own policy.
type zonedPlans struct{ moverZone string }

func (z *zonedPlans) policy(_ context.Context, key string) (Policy, error) {
	day := CalendarDay.Nominal()
	switch key {
	case "tokyo":
		return Policy{Limit: 2, Window: day, Zone: "Asia/Tokyo"}, nil
	case "newyork":
		return Policy{Limit: 2, Window: day, Zone: "America/New_York"}, nil
	case "mover":
		return Policy{Limit: 2, Window: day, Zone: z.moverZone}, nil
	case "bad":
		return Policy{Limit: 2, Window: day, Zone: "Mars/Olympus_Mons"}, nil
	case "local":
		return Policy{Limit: 2, Window: day, Zone: "Local"}, nil
	case "offset":
		return Policy{Limit: 2, Window: day, Zone: "UTC+0530"}, nil
	}
	return Policy{}, nil
}

// checkZonePerKey checks a calendar window of 2 a day in UTC whose keys'
// policies are plans', at epoch (midnight UTC, Monday 30 November 2026):
// each key's windows are cut in its policy's zone, and a key counts apart
// in each zone its policy gives it.
func checkZonePerKey(t *testing.T, l interface {
	Decider
	Adjuster
}, plans *zonedPlans) {
	ctx := context.Background()
	for key, reset := range map[string]time.Duration{
		"tokyo":   15 * time.Hour,                // 09:00 in Tokyo
		"newyork": 5 * time.Hour,                 // 19:00 the day before in New York
		"offset":  18*time.Hour + 30*time.Minute, // 05:30 at UTC+0530
		"utc":     24 * time.Hour,
	} {
		d, err := l.Decide(ctx, key, 1)
		require.NoError(t, err, key)
		assert.True(t, d.Allowed, key)
		assert.Equal(t, reset, d.ResetAfter.Round(time.Second), "%s: its day ends at midnight in its zone", key)
		assert.Equal(t, 24*time.Hour, d.Policy.Window, key)
	}
	d, err := l.Decide(ctx, "tokyo", 0)
	require.NoError(t, err)
	assert.Equal(t, "Asia/Tokyo", d.Policy.Zone, "the Decision's policy names the key's zone")
	d, err = l.Decide(ctx, "utc", 0)
	require.NoError(t, err)
	assert.Equal(t, "", d.Policy.Zone, "the limiter's own zone")

	plans.moverZone = "Asia/Tokyo"
	for range 2 {
		_, err := l.Decide(ctx, "mover", 1)
		require.NoError(t, err)
	}
	d, err = l.Decide(ctx, "mover", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "its 2 in Tokyo are used")
	plans.moverZone = "America/New_York"
	d, err = l.Decide(ctx, "mover", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "in New York, another day: it counts apart")
	plans.moverZone = "Asia/Tokyo"
	d, err = l.Decide(ctx, "mover", 0)
	require.NoError(t, err)
	assert.Equal(t, 0, d.Remaining, "back in Tokyo, its count there")
	require.NoError(t, l.Reset(ctx, "mover"))
	d, err = l.Decide(ctx, "mover", 0)
	require.NoError(t, err)
	assert.Equal(t, 2, d.Remaining, "a Reset forgets the count of the zone it is in now")

	for _, key := range []string{"bad", "local"} {
		_, err := l.Decide(ctx, key, 1)
		require.ErrorIs(t, err, ErrInvalidConfig, key)
		assert.Contains(t, err.Error(), KeyDigest(key), "the error names the key, by its digest")
	}
}

func TestCalendarWindowCutsEachKeysWindowsInItsPolicysZone(t *testing.T) {
	t.Run("CalendarWindow", func(t *testing.T) {
		plans := &zonedPlans{}
		l, err := NewCalendarWindow(5, Calendar{Period: CalendarDay}, WithClock(ratelimittest.NewClock(epoch)), WithPolicyFunc(plans.policy))
		require.NoError(t, err)
		checkZonePerKey(t, l, plans)
	})
	t.Run("RedisCalendarWindow", func(t *testing.T) {
		plans := &zonedPlans{}
		_, client, _ := miniredisClock(t)
		l, err := NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay}, WithClock(ratelimittest.NewClock(epoch)), WithPolicyFunc(plans.policy))
		require.NoError(t, err)
		checkZonePerKey(t, l, plans)
		keys := client.Keys(context.Background(), "*").Val()
		assert.Contains(t, keys, "ratelimit:cal:keyed:5:day:day:UTC+0900:{tokyo}", "Tokyo has one offset since 1970")
		assert.Contains(t, keys, "ratelimit:cal:keyed:5:day:day:America/New_York:{newyork}")
		assert.Contains(t, keys, "ratelimit:cal:keyed:5:day:day:UTC:{utc}")
	})
}

// TestRealRedisCalendarWindowCutsEachKeysWindowsInItsPolicysZone: on a real
// server, each key's day ends at midnight in its policy's zone.
func TestRealRedisCalendarWindowCutsEachKeysWindowsInItsPolicysZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	plans := &zonedPlans{}
	l, err := NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay}, WithPolicyFunc(plans.policy))
	require.NoError(t, err)
	for key, zone := range map[string]string{"tokyo": "Asia/Tokyo", "newyork": "America/New_York", "utc": "UTC"} {
		now := time.Now().In(mustZone(t, zone))
		y, m, d := now.Date()
		midnight := time.Date(y, m, d+1, 0, 0, 0, 0, now.Location())
		dec, err := l.Decide(ctx, key, 1)
		require.NoError(t, err)
		assert.True(t, dec.Allowed, key)
		assert.InDelta(t, float64(time.Until(midnight)), float64(dec.ResetAfter), float64(2*time.Second), "%s: its day ends at midnight in %s", key, zone)
	}
}

// TestOnlyACalendarWindowTakesAZone: a Zone in a policy of any other
// limiter fails the call with ErrInvalidConfig, naming the key.
func TestOnlyACalendarWindowTakesAZone(t *testing.T) {
	ctx := context.Background()
	zoned := keyedTo(Policy{Limit: 5, Window: time.Minute, Zone: "Europe/Berlin"})
	local, err := NewFixedWindow(5, time.Minute, zoned)
	require.NoError(t, err)
	_, client, _ := miniredisClock(t)
	remote, err := NewRedisGCRA(client, 5, time.Minute, zoned)
	require.NoError(t, err)
	for _, l := range []Limiter{local, remote} {
		_, err := l.Allow(ctx, "k", 1)
		require.ErrorIs(t, err, ErrInvalidConfig, "%T", l)
		assert.Contains(t, err.Error(), "calendar windows only")
	}
}

// TestFleetFallbackOfACalendarWindowKeepsEachKeysZone: the in-process
// fallback a Fleet mirrors a RedisCalendarWindow with cuts each key's
// windows in the zone of its policy, as the backend does.
func TestFleetFallbackOfACalendarWindowKeepsEachKeysZone(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	plans := &zonedPlans{}
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewRedisCalendarWindow(client, 5, Calendar{Period: CalendarDay}, WithClock(clock), WithPolicyFunc(plans.policy))
	require.NoError(t, err)
	fleet, err := NewFleet(client, FleetConfig{Name: "fleet", ID: "a"})
	require.NoError(t, err)
	fallback, err := fleet.Fallback(backend, WithClock(clock))
	require.NoError(t, err)
	d, err := fallback.(Decider).Decide(ctx, "tokyo", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 15*time.Hour, d.ResetAfter, "its day ends at midnight in Tokyo")
	assert.Equal(t, "Asia/Tokyo", d.Policy.Zone)
}

func TestAPolicysZoneIsReadOrRefused(t *testing.T) {
	for _, zone := range []string{"", "UTC", "UTC+0900", "UTC-0330", "UTC+053045", "UTC+0000", "Europe/Berlin", "America/Argentina/Buenos_Aires", "Asia/Tokyo"} {
		assert.NoError(t, checkPolicyZone(zone), zone)
	}
	for _, zone := range []string{"Local", "utc", "UTC+9", "UTC+09:00", "UTC+2400", "UTC+0960", "UTC+", "Mars/Olympus_Mons", "{Europe/Berlin}", "Europe/Berlin:x", "../etc/passwd"} {
		assert.Error(t, checkPolicyZone(zone), zone)
	}
	loc, err := loadZone("UTC-0330")
	require.NoError(t, err)
	name, err := zoneName(loc)
	require.NoError(t, err)
	assert.Equal(t, "UTC-0330", name, "an offset's name reads back as itself")
}
