package httplimit

import (
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

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
	fieldShadow     = "Ratelimit-Shadow"
)

// fieldWriter sets the rate-limit fields of one Middleware. Its settings
// are fixed at construction. When the limiter reports a Policy, fixed is
// set and first holds the policy's limit-only values, used on every
// response; otherwise first holds those of the first limit a Result
// reports. It is safe for concurrent use and must not be copied after first
// use.
//
// For a limiter with several policies, parts holds each policy's values
// instead, all formatted at construction, and the single-policy fields are
// unused.
type fieldWriter struct {
	style   HeaderStyle
	beforeQ string // `"default";q=`
	afterQ  string // `;w=5`, or empty without a window
	beforeR string // `"default";r=`
	fixed   bool
	first   atomic.Pointer[limitValues]
	parts   []partValues
}

// partValues are the values of the fields when one policy of several bound
// a decision: its limit, the whole policy list, and the start of its
// RateLimit item.
type partValues struct {
	limitValues        // limit and q are the policy's; policy is the list of all
	beforeR     string // `"per-hour";r=`
}

// setPolicies formats the values of every policy in policies, for a limiter
// with several.
func (f *fieldWriter) setPolicies(policies []ratelimit.NamedPolicy) {
	items := make([]string, len(policies))
	for i, p := range policies {
		items[i] = policyItem(p.Name, p.Limit, p.Window)
	}
	list := strings.Join(items, ", ")
	f.parts = make([]partValues, len(policies))
	for i, p := range policies {
		_, _, beforeR := policyParts(p.Name, 0, false)
		f.parts[i] = partValues{
			limitValues: limitValues{limit: p.Limit, q: strconv.Itoa(p.Limit), policy: list},
			beforeR:     beforeR,
		}
	}
}

// part returns the values of policy i, or nil when there is no such policy.
func (f *fieldWriter) part(i int) *partValues {
	if i < 0 || i >= len(f.parts) {
		return nil
	}
	return &f.parts[i]
}

// fixLimit makes every response carry limit, the limiter's policy, whatever
// its Results say.
func (f *fieldWriter) fixLimit(limit int) {
	f.first.Store(f.format(limit))
	f.fixed = true
}

// format returns the limit-only values for limit.
func (f *fieldWriter) format(limit int) *limitValues {
	q := strconv.Itoa(max(limit, 0))
	v := &limitValues{limit: limit, q: q}
	if f.style.ietf() {
		v.policy = f.beforeQ + q + f.afterQ
	}
	return v
}

// limitValues are the field values that depend on the limit only, which is
// the same on every response of most limiters.
type limitValues struct {
	limit  int
	q      string // RateLimit-Limit: "10"
	policy string // RateLimit-Policy: `"default";q=10;w=5`
}

// limitValues returns the values for limit: those remembered for the first
// limit seen when limit is that one, or else new ones, which are remembered
// when they are the first. So a limiter with one limit has them formatted
// once; a response with another limit has them formatted for it, up to two
// more allocations (the RateLimit-Limit value, under 100 none, and the
// RateLimit-Policy value).
//
// A limiter with a Policy has its values formatted once, at construction,
// and they are returned whatever limit is.
func (f *fieldWriter) limitValues(limit int) limitValues {
	first := f.first.Load()
	if f.fixed || (first != nil && first.limit == limit) {
		return *first
	}
	v := *f.format(limit)
	if first == nil {
		f.first.CompareAndSwap(nil, &limitValues{limit: v.limit, q: v.q, policy: v.policy})
	}
	return v
}

// span is where one field value lies in a buffer: b[from:to].
type span struct{ from, to int }

// fieldBufSize is the room on the stack for the bytes of the values that
// change with each response: enough for a policy name of 40 bytes with
// numbers of up to 10 digits. Longer values grow the buffer on the heap.
const fieldBufSize = 96

// fieldBlock holds the value slices of a response's fields in one
// allocation.
type fieldBlock struct {
	vals [6]string
}

// write sets the rate-limit fields for res on h, and Retry-After (res's
// RetryAfter in whole seconds, rounded up, at least 1) when retry is true,
// that is for a denial. lv are the limit-only values (from limitValues, or
// of the policy that bound the decision) and beforeR the start of the
// RateLimit value (f.beforeR, or that policy's). The reset (RateLimit-Reset, and t of RateLimit) is
// ResetAfter on an allowed request and the Retry-After value on a denial,
// so that the two always agree. RateLimit-Limit and RateLimit-Policy are
// left out while the limit is unknown (<= 0): no answer claims a limit of 0.
//
// The values that depend on the limit only come from limitValues. The others
// are formatted into one buffer and made one string that backs them all, and
// the fields' value slices share one backing array, each capped at length 1
// so that an append by a later handler copies instead of overwriting a
// neighbour: two allocations per response, whatever the style, plus those of
// limitValues for a limit other than the first.
func (f *fieldWriter) write(h http.Header, lv *limitValues, beforeR string, res ratelimit.Result, retry bool) {
	remaining := int64(max(res.Remaining, 0))
	reset := ceilSeconds(res.ResetAfter)
	if retry {
		reset = max(ceilSeconds(res.RetryAfter), 1)
	}

	var buf [fieldBufSize]byte
	b := buf[:0]
	var rem, rst, rl span
	if f.style.ietf() {
		// `"default";r=3;t=2`: the legacy values are substrings of it.
		b = append(b, beforeR...)
		rem.from = len(b)
		b = strconv.AppendInt(b, remaining, 10)
		rem.to = len(b)
		b = append(b, ";t="...)
		rst.from = len(b)
		b = strconv.AppendInt(b, reset, 10)
		rst.to, rl.to = len(b), len(b)
	} else {
		b = strconv.AppendInt(b, remaining, 10)
		rem.to, rst.from = len(b), len(b)
		b = strconv.AppendInt(b, reset, 10)
		rst.to = len(b)
	}
	s := string(b)
	blk := new(fieldBlock)
	i := 0
	known := lv.limit > 0
	if f.style.legacy() {
		if known {
			i = set(h, &blk.vals, i, fieldLimit, lv.q)
		}
		i = set(h, &blk.vals, i, fieldRemaining, s[rem.from:rem.to])
		i = set(h, &blk.vals, i, fieldReset, s[rst.from:rst.to])
	}
	if f.style.ietf() {
		if known {
			i = set(h, &blk.vals, i, fieldPolicy, lv.policy)
		}
		i = set(h, &blk.vals, i, fieldRateLimit, s[rl.from:rl.to])
	}
	if retry {
		set(h, &blk.vals, i, fieldRetryAfter, s[rst.from:rst.to])
	}
}

// writeLimitOnly sets the fields that do not depend on a key's state, for a
// request whose cost exceeds the limit: RateLimit-Limit and RateLimit-Policy
// from lv, as the style allows.
func (f *fieldWriter) writeLimitOnly(h http.Header, lv *limitValues) {
	if lv.limit <= 0 {
		return
	}
	if f.style.legacy() {
		h[fieldLimit] = []string{lv.q}
	}
	if f.style.ietf() {
		h[fieldPolicy] = []string{lv.policy}
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

// writeShadow sets RateLimit-Shadow (see WithShadowHeader) to the RateLimit
// value of the denial res, which a shadowing limiter let through: beforeR,
// the units remaining, and t, its RetryAfter in whole seconds, rounded up,
// at least 1.
func writeShadow(h http.Header, beforeR string, res ratelimit.Result) {
	b := make([]byte, 0, len(beforeR)+24)
	b = append(b, beforeR...)
	b = strconv.AppendInt(b, int64(max(res.Remaining, 0)), 10)
	b = append(b, ";t="...)
	b = strconv.AppendInt(b, max(ceilSeconds(res.RetryAfter), 1), 10)
	h[fieldShadow] = []string{string(b)}
}
