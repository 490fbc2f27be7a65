package ratelimit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is how fast a limiter lets work through: n units every d. Build one
// with PerSecond, PerMinute, PerHour, Every or Per, or read one from a
// configuration file with ParseRate, so that a call site reads as what it
// means and cannot be swapped with a burst:
// NewTokenBucket(PerSecond(10), 20) refills 10 tokens a second into a bucket
// of 20.
//
// A Rate is a small comparable value, safe to copy and share. Two Rates of
// the same speed written differently, such as PerSecond(1) and
// Per(2, 2*time.Second), are not ==. A limiter turns a Rate into whole clock
// units per unit of work, d/n rounded to the nearest unit (halves up), in
// integer arithmetic.
//
// The zero Rate is invalid, and so is any Rate with n <= 0 or d <= 0: a
// constructor given one returns an error wrapping ErrInvalidConfig that
// names the problem. Building such a Rate is not an error in itself.
type Rate struct {
	n int
	d time.Duration
}

// PerSecond returns the Rate of n units a second, such as PerSecond(10) for
// 10 requests a second. It is "n/s" as a string.
func PerSecond(n int) Rate { return Rate{n: n, d: time.Second} }

// PerMinute returns the Rate of n units a minute, such as PerMinute(60) for
// 60 requests a minute, one a second on average. It is "n/min" as a string.
func PerMinute(n int) Rate { return Rate{n: n, d: time.Minute} }

// PerHour returns the Rate of n units an hour. It is "n/h" as a string.
func PerHour(n int) Rate { return Rate{n: n, d: time.Hour} }

// Every returns the Rate of one unit every d, for rates slower than one a
// second: Every(2*time.Second) is half a unit a second. It is "1/<d>" as a
// string, such as "1/2s", unless d is a second, a minute or an hour.
func Every(d time.Duration) Rate { return Rate{n: 1, d: d} }

// Per returns the Rate of n units every d, such as Per(5, 2*time.Second) for
// two and a half units a second. It is "n/<d>" as a string unless d is a
// second, a minute or an hour.
func Per(n int, d time.Duration) Rate { return Rate{n: n, d: d} }

// String returns r as units/period: "10/s", "60/min" and "5/h" for a period
// of a second, a minute and an hour, and otherwise the units, a slash and
// the period as time.Duration prints it, such as "1/2s" or "3/1m30s". The
// zero Rate is "0/0s".
func (r Rate) String() string {
	var period string
	switch r.d {
	case time.Second:
		period = "s"
	case time.Minute:
		period = "min"
	case time.Hour:
		period = "h"
	default:
		period = r.d.String()
	}
	return strconv.Itoa(r.n) + "/" + period
}

// ParseRate returns the Rate s writes as units/period, the form String
// prints, for rates kept in configuration files: "10/s", "60/min", "5/h",
// or the units over any positive period time.ParseDuration reads, such as
// "1/2s", "3/1m30s" or "100/1h". The units are a positive decimal integer
// with no sign and no leading zero; nothing else may surround them or the
// period, spaces included. ParseRate(r.String()) is r for every valid Rate.
//
// An s of another form, units or a period <= 0, and units beyond an int are
// errors wrapping ErrInvalidConfig that quote s and name the problem.
func ParseRate(s string) (Rate, error) {
	units, period, ok := strings.Cut(s, "/")
	if !ok {
		return Rate{}, parseRateError(s, `want units/period, such as "10/s", "60/min" or "1/2s"`)
	}
	if units == "" || units[0] < '1' || units[0] > '9' || strings.Trim(units, "0123456789") != "" {
		return Rate{}, parseRateError(s, fmt.Sprintf("units %q must be a positive whole number, such as 10", units))
	}
	n, err := strconv.Atoi(units)
	if err != nil {
		return Rate{}, parseRateError(s, fmt.Sprintf("units %s are beyond an int", units))
	}
	switch period {
	case "s":
		return PerSecond(n), nil
	case "min":
		return PerMinute(n), nil
	case "h":
		return PerHour(n), nil
	}
	// ParseDuration also reads signs and bare words; a period starts with
	// a digit or a dot and names its unit.
	d, err := time.ParseDuration(period)
	if period == "" || !strings.ContainsAny(period[:1], ".0123456789") || err != nil {
		return Rate{}, parseRateError(s, fmt.Sprintf(`period %q must be "s", "min", "h" or a duration such as "2s" or "1m30s"`, period))
	}
	if d <= 0 {
		return Rate{}, parseRateError(s, fmt.Sprintf("period %q must be > 0", period))
	}
	return Per(n, d), nil
}

// parseRateError is ParseRate's error for s: ErrInvalidConfig, s quoted and
// what is wrong with it.
func parseRateError(s, problem string) error {
	return fmt.Errorf("%w: ParseRate(%q): %s", ErrInvalidConfig, s, problem)
}

// interval returns the time per unit of r in whole clock units of unit,
// rounded to nearest (halves up), for kind's constructor. It rejects the
// zero Rate, units or a period <= 0, and a rate faster than one unit per
// clock unit or so slow that one unit overflows the clock.
func (r Rate) interval(kind string, unit time.Duration) (int64, error) {
	switch {
	case r == Rate{}:
		return 0, fmt.Errorf("%w: %s: the rate is the zero Rate; build one with PerSecond, PerMinute, PerHour, Every or Per", ErrInvalidConfig, kind)
	case r.n <= 0:
		return 0, fmt.Errorf("%w: %s: rate %v: units %d must be > 0", ErrInvalidConfig, kind, r, r.n)
	case r.d <= 0:
		return 0, fmt.Errorf("%w: %s: rate %v: period %v must be > 0", ErrInvalidConfig, kind, r, r.d)
	case int64(r.d)/int64(unit) < int64(r.n):
		return 0, fmt.Errorf("%w: %s: rate %v gives less than one clock unit (%v) per token", ErrInvalidConfig, kind, r, unit)
	}
	interval := perUnit(r.d, int64(r.n), unit)
	if interval > maxSpan {
		return 0, fmt.Errorf("%w: %s: rate %v is so slow that one token overflows the clock", ErrInvalidConfig, kind, r)
	}
	return interval, nil
}
