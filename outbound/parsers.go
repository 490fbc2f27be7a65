package outbound

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// maxPolicyWindow bounds the window of a policy a parser reads: ten years,
// what a RedisStore keeps.
const maxPolicyWindow = maxStoreDuration

// IETFFields reads the RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-11, which package httplimit and
// package grpclimit write, with the same code (a server built with
// httplimit and a client built with this package speak one language):
//
//   - a service limit item of RateLimit with r=0 and a t is a pause of t
//     seconds: the quota is spent until then;
//   - each policy of RateLimit-Policy that counts requests (no qu, or
//     qu="requests") and has a w is a limit of q per w seconds, and the
//     Lesson's Policy is the one that allows no more than any of them.
//     Policies in other units (tokens, concurrent requests) say nothing
//     of the rate of calls and are skipped.
//
// A field that does not parse as the draft's structured list tells
// nothing (RFC 9651 ignores it whole), as do members without the numbers
// the draft requires.
func IETFFields(a Answer) Lesson {
	return ietfFields(a, "")
}

// IETFFieldsIn returns a Parser that reads the IETF fields as IETFFields
// does, but learns the policies counted in unit (the qu parameter) rather
// than in requests: for a limiter whose units are not calls, such as one
// a Transport charges an LLM call's tokens (Transport.Cost), which must
// learn `qu="tokens"` and never a limit of requests. "" and "requests"
// make IETFFields. An Upstream whose Config.Unit is unit uses it by
// default.
func IETFFieldsIn(unit string) Parser {
	if unit == "requests" {
		unit = ""
	}
	return func(a Answer) Lesson { return ietfFields(a, unit) }
}

// ietfFields is IETFFields learning the policies of unit ("" for
// requests).
func ietfFields(a Answer, unit string) Lesson {
	var l Lesson
	for _, it := range ratefields.ParseLimits(a.Header["Ratelimit"]) {
		if it.R == 0 && it.T > 0 {
			l.Pause = max(l.Pause, ratefields.Seconds(it.T))
		}
	}
	for _, p := range ratefields.ParsePolicies(a.Header["Ratelimit-Policy"]) {
		qu := p.QU
		if qu == "requests" {
			qu = ""
		}
		if p.Q <= 0 || p.W <= 0 || qu != unit {
			continue
		}
		limit := int(min(p.Q, int64(maxLimit)))
		l.Policy = tighter(l.Policy, ratelimit.Policy{Limit: limit, Window: min(ratefields.Seconds(p.W), maxPolicyWindow)})
	}
	return l
}

// maxLimit bounds the limit of a policy a parser reads: the largest
// integer a Redis script holds exactly.
const maxLimit = 1 << 52

// RetryAfter reads the status and the Retry-After field (RFC 9110,
// section 10.2.3): a 429 is Limited, with a pause until the Retry-After
// (delay-seconds or an HTTP-date) when it has one; a 503 is Limited only
// with a Retry-After of a wait longer than 0, and paused until then. A
// 503 without one says nothing of limits, nor does a Retry-After on any
// other status (a redirect's).
func RetryAfter(a Answer) Lesson {
	l := Lesson{Limited: a.Status == http.StatusTooManyRequests}
	if a.Status != http.StatusTooManyRequests && a.Status != http.StatusServiceUnavailable {
		return l
	}
	if v := a.Header["Retry-After"]; len(v) > 0 {
		if d, ok := ratefields.ParseRetryAfter(v[0], dateOf(a)); ok && d > 0 {
			l.Limited, l.Pause = true, d
		}
	}
	return l
}

// vendorPairs are the remaining and reset fields VendorFields reads, in
// canonical form.
var vendorPairs = [...][2]string{
	{"X-Ratelimit-Remaining", "X-Ratelimit-Reset"},
	{"X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
	{"X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	{"Ratelimit-Remaining", "Ratelimit-Reset"},
}

// VendorFields reads the fields that APIs send in place of the IETF ones:
// a remaining count of 0 with a reset is a pause until the reset, for
// each of these pairs:
//
//   - X-RateLimit-Remaining and X-RateLimit-Reset;
//   - X-RateLimit-Remaining-Requests and X-RateLimit-Reset-Requests;
//   - X-RateLimit-Remaining-Tokens and X-RateLimit-Reset-Tokens (a spent
//     token quota stops calls too);
//   - RateLimit-Remaining and RateLimit-Reset, of the drafts before the
//     structured fields.
//
// A reset is read as seconds ("30", "1.5"), as a duration ("6m0s",
// "20ms"), as a Unix time in seconds when it is 1,000,000,000 or more
// ("1767225600"), or as an HTTP-date. The limit fields (X-RateLimit-Limit
// and the like) state no window, so they teach no Policy: VendorHeaders
// makes a parser for other names.
func VendorFields(a Answer) Lesson {
	var l Lesson
	for _, p := range vendorPairs {
		l.Pause = max(l.Pause, spentUntil(a, p[0], p[1]))
	}
	return l
}

// VendorHeaders returns a Parser that reads one pair of fields as
// VendorFields reads its own: a remaining count of 0 in the field named
// remaining, with a reset in the field named reset, is a pause until the
// reset. The names are case-insensitive. An empty name makes a parser
// that reads nothing.
func VendorHeaders(remaining, reset string) Parser {
	remaining, reset = http.CanonicalHeaderKey(remaining), http.CanonicalHeaderKey(reset)
	return func(a Answer) Lesson {
		if remaining == "" || reset == "" {
			return Lesson{}
		}
		return Lesson{Pause: spentUntil(a, remaining, reset)}
	}
}

// spentUntil returns the wait until the reset field of a says when the
// remaining field says 0, or 0.
func spentUntil(a Answer, remaining, reset string) time.Duration {
	r := a.Header[remaining]
	if len(r) == 0 {
		return 0
	}
	if n, err := strconv.ParseInt(strings.TrimSpace(r[0]), 10, 64); err != nil || n != 0 {
		return 0
	}
	v := a.Header[reset]
	if len(v) == 0 {
		return 0
	}
	d, ok := ratefields.ParseReset(v[0], dateOf(a))
	if !ok {
		return 0
	}
	return d
}
