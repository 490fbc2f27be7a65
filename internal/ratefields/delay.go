package ratefields

import (
	"math"
	"math/bits"
	"strings"
	"time"
)

// maxWait is the longest wait the parsers return: a value beyond it is
// taken as it, and the caller caps it.
const maxWait = time.Duration(math.MaxInt64)

// minUnixReset is the smallest reset value that ParseReset takes as a Unix
// time, in seconds, rather than as a delay: 1_000_000_000 (September 2001),
// beyond any delay an upstream means (31 years).
const minUnixReset = 1_000_000_000

// ParseRetryAfter reads a Retry-After value (RFC 9110, section 10.2.3):
// delay-seconds, an integer of digits alone, or an HTTP-date in any of its
// three forms, read against now. now should be the time of the response's
// Date field when it has one, so that the wait does not depend on the
// skew between the two clocks, and the local clock's time otherwise. It
// returns the wait and true, or 0 and false for a value that is neither
// (negative, signed, decimal or junk). A date in the past is a wait of 0.
// A wait beyond the largest time.Duration is that Duration: callers cap
// it. Leading and trailing spaces and tabs are ignored.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	if s, ok := parseSeconds(v); ok {
		return s, true
	}
	return untilDate(v, now)
}

// ParseReset reads the reset value of a vendor field that tells when a
// quota comes back, in any of the forms such fields take: delay seconds,
// an integer ("30") or a decimal ("1.5", read to the nanosecond); a Go
// duration ("6m0s", "20ms", "1h2m3.5s", units ns, us, µs, ms, s, m and h);
// a Unix time in seconds, an integer or a decimal of at least
// 1_000_000_000 (September 2001; no upstream means a delay of 31 years),
// read against now; or an HTTP-date, read against now. now
// is as ParseRetryAfter's. It returns the wait and true, or 0 and false
// for a value that is none of these (a sign, NaN or junk). A time in the
// past is a wait of 0, and a wait beyond the largest time.Duration is
// that Duration: callers cap it. Leading and trailing spaces and tabs are
// ignored.
func ParseReset(v string, now time.Time) (time.Duration, bool) {
	v = strings.Trim(v, " \t")
	whole, nanos, ok := parseDecimal(v)
	switch {
	case ok && whole >= minUnixReset:
		return clampWait(time.Unix(min(whole, 1<<62), nanos).Sub(now)), true
	case ok:
		return saturate(whole, nanos), true
	}
	if d, ok := parseDuration(v); ok {
		return d, true
	}
	return untilDate(v, now)
}

// parseSeconds reads 1*DIGIT as whole seconds, saturated at maxWait.
func parseSeconds(v string) (time.Duration, bool) {
	whole, nanos, ok := parseDecimal(v)
	if !ok || strings.IndexByte(v, '.') >= 0 {
		return 0, false
	}
	return saturate(whole, nanos), true
}

// parseDecimal reads 1*DIGIT [ "." 1*DIGIT ] as whole seconds, saturated
// at math.MaxInt64, and nanoseconds, the digits beyond the ninth after the
// point dropped.
func parseDecimal(v string) (whole, nanos int64, ok bool) {
	i := 0
	for ; i < len(v) && isDigit(v[i]); i++ {
		whole = addDigit(whole, v[i])
	}
	if i == 0 {
		return 0, 0, false
	}
	if i == len(v) {
		return whole, 0, true
	}
	if v[i] != '.' || i+1 == len(v) {
		return 0, 0, false
	}
	scale := int64(time.Second)
	for i++; i < len(v); i++ {
		if !isDigit(v[i]) {
			return 0, 0, false
		}
		if scale /= 10; scale > 0 {
			nanos += int64(v[i]-'0') * scale
		}
	}
	return whole, nanos, true
}

// addDigit returns n*10 plus the digit c, saturated at math.MaxInt64.
func addDigit(n int64, c byte) int64 {
	if n > (math.MaxInt64-9)/10 {
		return math.MaxInt64
	}
	return n*10 + int64(c-'0')
}

// Seconds returns n whole seconds as a Duration, saturated at the largest
// Duration; 0 for n <= 0.
func Seconds(n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return saturate(n, 0)
}

// saturate returns whole seconds and nanos as a Duration, at most maxWait.
func saturate(whole, nanos int64) time.Duration {
	if whole > int64(maxWait/time.Second) {
		return maxWait
	}
	d := time.Duration(whole) * time.Second
	if d > maxWait-time.Duration(nanos) {
		return maxWait
	}
	return d + time.Duration(nanos)
}

// clampWait returns d, or 0 for a time in the past.
func clampWait(d time.Duration) time.Duration {
	return max(d, 0)
}

// httpDateLayouts are the forms of an HTTP-date (RFC 9110, section 5.6.7):
// IMF-fixdate, and the obsolete RFC 850 and asctime forms, which
// recipients must accept.
var httpDateLayouts = [...]string{
	"Mon, 02 Jan 2006 15:04:05 GMT",
	time.RFC850,
	time.ANSIC,
}

// untilDate reads v as an HTTP-date and returns the wait from now until
// it, 0 when it has passed.
func untilDate(v string, now time.Time) (time.Duration, bool) {
	if len(v) < len("Sun Nov  6 08:49:37 1994") || !isAlpha(v[0]) {
		return 0, false // not a date: spares time.Parse's error
	}
	for _, layout := range httpDateLayouts {
		if t, err := time.Parse(layout, v); err == nil {
			return clampWait(t.Sub(now)), true
		}
	}
	return 0, false
}

// durationUnits are the units of a Go duration, in nanoseconds.
var durationUnits = [...]struct {
	name string
	ns   uint64
}{
	{"ns", 1},
	{"us", uint64(time.Microsecond)},
	{"µs", uint64(time.Microsecond)}, // U+00B5
	{"μs", uint64(time.Microsecond)}, // U+03BC
	{"ms", uint64(time.Millisecond)},
	{"s", uint64(time.Second)},
	{"m", uint64(time.Minute)},
	{"h", uint64(time.Hour)},
}

// parseDuration reads v as time.ParseDuration does, without a sign: a
// sequence of decimal numbers, each with a unit ("1h2m3.5s"), or "0". A
// duration beyond maxWait is maxWait.
func parseDuration(v string) (time.Duration, bool) {
	if v == "0" {
		return 0, true
	}
	if v == "" {
		return 0, false
	}
	var total uint64
	for v != "" {
		// The number: [digits] ["." [digits]], with a digit somewhere.
		i := 0
		var whole uint64
		over := false
		for ; i < len(v) && isDigit(v[i]); i++ {
			if whole > (math.MaxUint64-9)/10 {
				over = true
			} else {
				whole = whole*10 + uint64(v[i]-'0')
			}
		}
		digits := i
		var frac, scale uint64 = 0, 1
		if i < len(v) && v[i] == '.' {
			for i++; i < len(v) && isDigit(v[i]); i++ {
				digits++
				if scale < 1e18 {
					frac, scale = frac*10+uint64(v[i]-'0'), scale*10
				}
			}
		}
		if digits == 0 {
			return 0, false
		}
		v = v[i:]
		// The unit.
		unit := uint64(0)
		for _, u := range durationUnits {
			if strings.HasPrefix(v, u.name) && (len(v) == len(u.name) || !isUnitByte(v[len(u.name)])) {
				unit = u.ns
				v = v[len(u.name):]
				break
			}
		}
		if unit == 0 {
			return 0, false
		}
		hi, part := bits.Mul64(whole, unit)
		if over || hi != 0 {
			total = math.MaxUint64
			continue
		}
		// frac/scale < 1, so frac*unit/scale < unit fits.
		fhi, flo := bits.Mul64(frac, unit)
		f, _ := bits.Div64(fhi, flo, scale)
		total = addSat(addSat(total, part), f)
	}
	if total > uint64(maxWait) {
		return maxWait, true
	}
	return time.Duration(total), true
}

// isUnitByte reports whether c can continue a duration's unit, so that
// "1mss" is no "1ms" followed by junk read as another unit.
func isUnitByte(c byte) bool {
	return !isDigit(c) && c != '.'
}

// addSat returns a+b, saturated at math.MaxUint64.
func addSat(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}
