package ratefields_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// now is the time the delays are read against: Sun, 06 Nov 1994 08:49:37
// GMT, RFC 9110's example date, and 784111777 in Unix time.
var now = time.Date(1994, time.November, 6, 8, 49, 37, 0, time.UTC)

const maxDuration = time.Duration(math.MaxInt64)

func TestRetryAfterIsDelaySecondsOrAnHTTPDateReadAgainstNow(t *testing.T) {
	tests := []struct {
		what, v string
		want    time.Duration
		ok      bool
	}{
		{"delay seconds", "120", 2 * time.Minute, true},
		{"zero", "0", 0, true},
		{"leading zeros", "007", 7 * time.Second, true},
		{"spaces and tabs around", " \t30\t ", 30 * time.Second, true},
		{"a big number of seconds stays seconds", "1000000000", 1e9 * time.Second, true},
		{"a huge number saturates", "99999999999999999999999999", maxDuration, true},
		{"the largest Duration's seconds", "9223372036", 9223372036 * time.Second, true},
		{"just beyond it saturates", "9223372037", maxDuration, true},
		{"an IMF-fixdate", "Sun, 06 Nov 1994 08:51:37 GMT", 2 * time.Minute, true},
		{"an RFC 850 date", "Sunday, 06-Nov-94 08:49:47 GMT", 10 * time.Second, true},
		{"an asctime date", "Sun Nov  6 08:50:37 1994", time.Minute, true},
		{"a date now", "Sun, 06 Nov 1994 08:49:37 GMT", 0, true},
		{"a date in the past waits 0", "Sat, 05 Nov 1994 08:49:37 GMT", 0, true},
		{"a date far ahead", "Fri, 31 Dec 9999 23:59:59 GMT", maxDuration, true},
		{"negative", "-1", 0, false},
		{"a plus sign", "+1", 0, false},
		{"decimal seconds are not delay-seconds", "1.5", 0, false},
		{"a Go duration is not delay-seconds", "30s", 0, false},
		{"empty", "", 0, false},
		{"blank", "  ", 0, false},
		{"NaN", "NaN", 0, false},
		{"junk", "soon", 0, false},
		{"digits then junk", "12abc", 0, false},
		{"a date in a wrong form", "1994-11-06T08:49:37Z", 0, false},
		{"a date with a bad month", "Sun, 06 Foo 1994 08:49:37 GMT", 0, false},
	}
	for _, tt := range tests {
		got, ok := ratefields.ParseRetryAfter(tt.v, now)
		assert.Equal(t, tt.ok, ok, tt.what)
		assert.Equal(t, tt.want, got, tt.what)
	}
}

func TestResetIsSecondsADurationAUnixTimeOrAnHTTPDate(t *testing.T) {
	tests := []struct {
		what, v string
		want    time.Duration
		ok      bool
	}{
		{"integer seconds", "30", 30 * time.Second, true},
		{"decimal seconds", "1.5", 1500 * time.Millisecond, true},
		{"decimal seconds to the nanosecond", "0.000000001", time.Nanosecond, true},
		{"digits beyond the nanosecond dropped", "0.0000000019", time.Nanosecond, true},
		{"zero", "0", 0, true},
		{"spaces around", " 6m0s ", 6 * time.Minute, true},
		{"a Go duration", "6m0s", 6 * time.Minute, true},
		{"milliseconds", "20ms", 20 * time.Millisecond, true},
		{"several units with a fraction", "1h2m3.5s", time.Hour + 2*time.Minute + 3500*time.Millisecond, true},
		{"microseconds", "7us", 7 * time.Microsecond, true},
		{"micro sign", "7µs", 7 * time.Microsecond, true},
		{"Greek mu", "7μs", 7 * time.Microsecond, true},
		{"nanoseconds", "7ns", 7, true},
		{"a fraction of an hour", "0.5h", 30 * time.Minute, true},
		{"a bare fraction", ".5s", 500 * time.Millisecond, true},
		{"a huge duration saturates", "99999999999999999999h", maxDuration, true},
		{"a sum beyond the largest Duration saturates", "2562047h2562047h", maxDuration, true},
		{"the smallest Unix time, in the past", "1000000000", 1000000000*time.Second - now.Sub(time.Unix(0, 0)), true},
		{"a Unix time far ahead saturates", "99999999999999999999999", maxDuration, true},
		{"an HTTP-date", "Sun, 06 Nov 1994 08:50:37 GMT", time.Minute, true},
		{"a huge number of seconds below a Unix time", "999999999", 999999999 * time.Second, true},
		{"negative seconds", "-1", 0, false},
		{"a negative duration", "-6m0s", 0, false},
		{"a plus sign", "+5s", 0, false},
		{"a duration without a unit", "5m3", 0, false},
		{"an unknown unit", "5d", 0, false},
		{"a unit run on", "5mss", 0, false},
		{"a point alone", ".s", 0, false},
		{"a trailing point", "1.", 0, false},
		{"NaN", "NaN", 0, false},
		{"infinity", "Inf", 0, false},
		{"an exponent", "1e3", 0, false},
		{"empty", "", 0, false},
		{"junk", "tomorrow", 0, false},
	}
	for _, tt := range tests {
		got, ok := ratefields.ParseReset(tt.v, now)
		assert.Equal(t, tt.ok, ok, tt.what)
		assert.Equal(t, tt.want, got, tt.what)
	}
}

func TestResetReadsGoDurationsAsTimeParseDurationDoes(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, time.Microsecond, 1500 * time.Millisecond, 6 * time.Minute, 26*time.Hour + 3*time.Minute + 4*time.Second + 5, 2562047*time.Hour + 47*time.Minute} {
		got, ok := ratefields.ParseReset(d.String(), now)
		assert.True(t, ok, d.String())
		assert.Equal(t, d, got, d.String())
	}
}

func TestUnixResetsAreReadAgainstNow(t *testing.T) {
	unixNow := time.Unix(1_700_000_000, 0)
	tests := []struct {
		what, v string
		want    time.Duration
	}{
		{"a Unix time", "1700000060", time.Minute},
		{"a Unix time with a fraction", "1700000060.25", time.Minute + 250*time.Millisecond},
		{"a Unix time now", "1700000000", 0},
		{"a Unix time in the past waits 0", "1699999000", 0},
		{"a Unix time far ahead saturates", "9223372036854775807", maxDuration},
	}
	for _, tt := range tests {
		got, ok := ratefields.ParseReset(tt.v, unixNow)
		assert.True(t, ok, tt.what)
		assert.Equal(t, tt.want, got, tt.what)
	}
}

func TestUnixResetsBeginAtOneBillionSeconds(t *testing.T) {
	below, ok := ratefields.ParseReset("999999999", now)
	assert.True(t, ok)
	assert.Equal(t, 999999999*time.Second, below, "a delay")
	at, ok := ratefields.ParseReset("1000000000", time.Unix(999999990, 0))
	assert.True(t, ok)
	assert.Equal(t, 10*time.Second, at, "a Unix time")
}

func FuzzParseReset(f *testing.F) {
	for _, v := range []string{"30", "1.5", "6m0s", "1h2m3.5s", "20ms", "1700000000", "1700000000.5", "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994", "-1", "NaN", "99999999999999999999h", ".5µs"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if d, ok := ratefields.ParseReset(v, now); d < 0 || !ok && d != 0 {
			t.Fatalf("ParseReset(%q) = %v, %v", v, d, ok)
		}
		if d, ok := ratefields.ParseRetryAfter(v, now); d < 0 || !ok && d != 0 {
			t.Fatalf("ParseRetryAfter(%q) = %v, %v", v, d, ok)
		}
	})
}

func TestSecondsSaturatesAtTheLargestDuration(t *testing.T) {
	assert.Equal(t, time.Duration(0), ratefields.Seconds(0))
	assert.Equal(t, time.Duration(0), ratefields.Seconds(-5))
	assert.Equal(t, 3*time.Second, ratefields.Seconds(3))
	assert.Equal(t, time.Duration(math.MaxInt64), ratefields.Seconds(math.MaxInt64))
	assert.Equal(t, time.Duration(math.MaxInt64), ratefields.Seconds(int64(math.MaxInt64/time.Second)+1))
}
