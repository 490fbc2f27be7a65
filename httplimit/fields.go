package httplimit

import (
	"net/http"
	"strconv"

	"github.com/ratelimit-go/ratelimit"
)

// The header field names in Go's canonical form, so that they can be set in
// an http.Header map directly, without canonicalising them on every request.
const (
	fieldLimit      = "Ratelimit-Limit"
	fieldRemaining  = "Ratelimit-Remaining"
	fieldReset      = "Ratelimit-Reset"
	fieldPolicy     = "Ratelimit-Policy"
	fieldRateLimit  = "Ratelimit"
	fieldRetryAfter = "Retry-After"
)

// fieldWriter sets the rate-limit fields of one Middleware. It is immutable
// after construction.
type fieldWriter struct {
	style   HeaderStyle
	beforeQ string // `"default";q=`
	afterQ  string // `;w=5`, or empty without a window
	beforeR string // `"default";r=`
}

// span is where one field value lies in a buffer: b[from:to].
type span struct{ from, to int }

// fieldBufSize is the room on the stack for the field values' bytes: enough
// for the default policy name with numbers of up to 9 digits. Longer values
// grow the buffer on the heap.
const fieldBufSize = 80

// fieldBlock holds the value slices of a response's fields in one
// allocation.
type fieldBlock struct {
	vals [6]string
}

// write sets the rate-limit fields for res on h, and Retry-After (res's
// RetryAfter in whole seconds, rounded up, at least 1) when retry is true.
//
// All values are formatted into one buffer and made one string that backs
// them all, and the fields' value slices share one backing array, each capped
// at length 1 so that an append by a later handler copies instead of
// overwriting a neighbour: two allocations per response, whatever the style.
func (f *fieldWriter) write(h http.Header, res ratelimit.Result, retry bool) {
	limit := int64(max(res.Limit, 0))
	remaining := int64(max(res.Remaining, 0))
	reset := ceilSeconds(res.ResetAfter)

	var buf [fieldBufSize]byte
	b := buf[:0]
	var lim, rem, rst, pol, rl, ra span
	if f.style.ietf() {
		// `"default";q=10;w=5"default";r=3;t=2`: the legacy values are
		// substrings of the IETF ones.
		pol.from = len(b)
		b = append(b, f.beforeQ...)
		lim.from = len(b)
		b = strconv.AppendInt(b, limit, 10)
		lim.to = len(b)
		b = append(b, f.afterQ...)
		pol.to, rl.from = len(b), len(b)
		b = append(b, f.beforeR...)
		rem.from = len(b)
		b = strconv.AppendInt(b, remaining, 10)
		rem.to = len(b)
		b = append(b, ";t="...)
		rst.from = len(b)
		b = strconv.AppendInt(b, reset, 10)
		rst.to, rl.to = len(b), len(b)
	} else {
		lim.from = len(b)
		b = strconv.AppendInt(b, limit, 10)
		lim.to, rem.from = len(b), len(b)
		b = strconv.AppendInt(b, remaining, 10)
		rem.to, rst.from = len(b), len(b)
		b = strconv.AppendInt(b, reset, 10)
		rst.to = len(b)
	}
	if retry {
		ra.from = len(b)
		b = strconv.AppendInt(b, max(ceilSeconds(res.RetryAfter), 1), 10)
		ra.to = len(b)
	}
	s := string(b)
	blk := new(fieldBlock)
	i := 0
	if f.style.legacy() {
		i = set(h, &blk.vals, i, fieldLimit, s[lim.from:lim.to])
		i = set(h, &blk.vals, i, fieldRemaining, s[rem.from:rem.to])
		i = set(h, &blk.vals, i, fieldReset, s[rst.from:rst.to])
	}
	if f.style.ietf() {
		i = set(h, &blk.vals, i, fieldPolicy, s[pol.from:pol.to])
		i = set(h, &blk.vals, i, fieldRateLimit, s[rl.from:rl.to])
	}
	if retry {
		set(h, &blk.vals, i, fieldRetryAfter, s[ra.from:ra.to])
	}
}

// writeLimitOnly sets the fields that do not depend on a key's state, for a
// request whose cost exceeds the limit: RateLimit-Limit and RateLimit-Policy,
// as the style allows.
func (f *fieldWriter) writeLimitOnly(h http.Header, limit int) {
	q := strconv.Itoa(max(limit, 0))
	if f.style.legacy() {
		h[fieldLimit] = []string{q}
	}
	if f.style.ietf() {
		h[fieldPolicy] = []string{f.beforeQ + q + f.afterQ}
	}
}

// set puts v at vals[i], makes it key's only value in h and returns i+1.
func set(h http.Header, vals *[6]string, i int, key, v string) int {
	vals[i] = v
	h[key] = vals[i : i+1 : i+1]
	return i + 1
}

// setRetryAfter sets Retry-After to seconds, at least 1.
func setRetryAfter(h http.Header, seconds int64) {
	h[fieldRetryAfter] = []string{strconv.FormatInt(max(seconds, 1), 10)}
}
