package ratelimit

import (
	"context"
	"time"
)

// Policy is a limiter's quota as clients are told it, for instance in HTTP
// rate-limit headers: at most Limit units of work at once, restored in
// Window.
//
// Window is the time a key takes to go from exhausted back to its full limit:
// capacity divided by the refill rate for a token bucket, the period for a
// GCRA, the window for a fixed window. The zero Policy means the limiter does
// not know its policy.
type Policy struct {
	// Limit is the most units that can be taken at once; it is never
	// negative, and > 0 for every limiter of this package.
	Limit int
	// Window is the time from exhausted to full, or a fixed window's
	// length; > 0 for every limiter of this package.
	Window time.Duration
	// Zone is, in a policy a PolicyFunc gives a calendar window
	// (CalendarWindow, RedisCalendarWindow), the time zone the key's
	// windows are cut in: an IANA name ("America/New_York", read with
	// time.LoadLocation, so the program needs a zone database: the
	// system's, or time/tzdata), "UTC", or one offset from UTC as
	// "UTC+0900" or "UTC-0330" ("UTC+hhmmss" with seconds). "" means the
	// limiter's Calendar's zone, and is what a limiter reports for it.
	// Every other limiter refuses a policy that sets it, with an error
	// wrapping ErrInvalidConfig.
	Zone string
}

// NamedPolicy is one of the policies a limiter decides by, with its name.
type NamedPolicy struct {
	// Name names the policy: a Composite's part's Name, or "default" for
	// a limiter of one policy.
	Name string
	Policy
	// PerCall reports that the policy counts calls, not units (a
	// Composite's PerCall part): every call of n > 0 takes 1 of its Limit,
	// whatever n is.
	PerCall bool
	// InFlight reports that the policy limits units in flight, not units
	// per unit of time (a concurrency limiter's, see Concurrency): at
	// most Limit units held at once by leases, each of which gives its
	// units back when released, or Window after it was granted or last
	// extended. Rate-limit headers name its quota unit
	// "concurrent-requests".
	InFlight bool
}

// PolicyFunc returns the policy of one call for key: its Limit and Window,
// read as the limiter reads its constructor's parameters (see
// WithPolicyFunc). ctx is the call's, so that a policy may depend on the
// request as well as the key, such as a plan the caller's authentication put
// in the context. It returns the zero Policy for a key that has no policy of
// its own, which then gets the limiter's (its constructor's), and an error
// to fail the call. It must be safe for concurrent use, and fast: it runs on
// every call.
type PolicyFunc func(ctx context.Context, key string) (Policy, error)
