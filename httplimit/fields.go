package httplimit

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
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

// fieldWriter sets the rate-limit fields of one Middleware in its header
// style. It is immutable.
type fieldWriter struct {
	style HeaderStyle
}

// fieldBlock holds the value slices of a response's fields in one
// allocation.
type fieldBlock struct {
	vals [6]string
}

// write sets the rate-limit fields for d, the request's Decision, whose
// policies ft formatted (d.PolicyIndex names one of them), and Retry-After when
// retry is true, that is for a denial: d's RetryAfter in whole seconds,
// rounded up, at least 1. pk is the partition key's parameter
// (";pk=:...:"), or "" (see WithPartitionKey).
//
// RateLimit lists the service limit of each policy, the draft's items
// (draft-ietf-httpapi-ratelimit-headers-11, section 4): the bound policy's
// first, with d's Remaining (r), and then, on an allowed request of a
// Decision that holds each policy's Result (a Composite's Parts), every
// other policy's, in order, with its own Remaining. Each item's t is that
// policy's effective window (section 4.1.2), d.NextUnit in whole seconds
// rounded up, and is left out when d does not tell it; on a denial, the
// one item is the bound policy's, whose t is the Retry-After value, as
// section 6 asks (Retry-After not before the end of the effective
// window). The legacy fields keep the meaning of the drafts that defined
// them: RateLimit-Limit and RateLimit-Remaining are the bound policy's,
// and RateLimit-Reset is the seconds until the key is back to its full
// limit (every policy's, d's ResetAfter), rounded up, or the Retry-After
// value on a denial. RateLimit-Limit and RateLimit-Policy are left out
// while the limit is unknown (<= 0): no answer claims a limit of 0.
//
// The values are formatted into one buffer and made one string that backs
// them all, and the fields' value slices share one backing array, each
// capped at length 1 so that an append by a later handler copies instead
// of overwriting a neighbour: two allocations per response of one policy,
// whatever the style.
//
// When an enclosing Middleware has set its fields already (stacked
// middlewares), the fields are merged into one coherent set, whatever the
// two styles: the fields of either style that the enclosing one set are
// set too. RateLimit lists this decision's items first, then the earlier
// items of other policies; RateLimit-Policy lists this limiter's
// policies, then the earlier ones of other names; and the legacy fields,
// which are this decision's, describe the first RateLimit item.
func (f *fieldWriter) write(h http.Header, ft *format, d *ratelimit.Decision, retry bool, pk string) {
	bound := d.PolicyIndex
	p := &ft.parts[bound]
	// An enclosing Middleware's fields, if any: it sets RateLimit or
	// RateLimit-Remaining, so RateLimit-Policy is looked up only then.
	var earlierPolicy, earlierRL []string
	legacy, ietf := f.style.legacy(), f.style.ietf()
	if len(h) > 0 {
		if earlierRL = h[fieldRateLimit]; earlierRL != nil {
			earlierPolicy, ietf = h[fieldPolicy], true
		}
		if _, ok := h[fieldRemaining]; ok {
			legacy = true
		}
	}

	var buf [ratefields.BufSize]byte
	b, rem, rst := ratefields.AppendValues(buf[:0], ft.parts, bound, d, retry, ietf, pk)
	s := string(b)
	blk := new(fieldBlock)
	i := 0
	known := p.Limit > 0
	if legacy {
		if known {
			i = set(h, &blk.vals, i, fieldLimit, p.Q)
		} else {
			delete(h, fieldLimit) // an enclosing Middleware's
		}
		i = set(h, &blk.vals, i, fieldRemaining, s[:rem])
		i = set(h, &blk.vals, i, fieldReset, s[rem:rst])
	}
	if ietf {
		if known {
			i = set(h, &blk.vals, i, fieldPolicy, mergeList(p.List, earlierPolicy))
		} else if earlierPolicy != nil {
			// Another Middleware's policies stay listed.
			i = set(h, &blk.vals, i, fieldPolicy, mergeList("", earlierPolicy))
		}
		i = set(h, &blk.vals, i, fieldRateLimit, mergeList(s[rst:], earlierRL))
	}
	if retry {
		set(h, &blk.vals, i, fieldRetryAfter, s[rem:rst])
	}
}

// writeLimitOnly sets the fields that do not depend on a key's state, for a
// request whose cost exceeds the limit: RateLimit-Limit and RateLimit-Policy
// from lv, as the style allows.
//
// Under an enclosing Middleware that set its fields already (RateLimit or
// RateLimit-Remaining), the legacy fields are left to describe its
// decision, and this limiter's policies are added to RateLimit-Policy.
func (f *fieldWriter) writeLimitOnly(h http.Header, p *ratefields.Policy) {
	if p.Limit <= 0 {
		return
	}
	_, stacked := h[fieldRateLimit]
	if _, legacy := h[fieldRemaining]; legacy {
		stacked = true
	}
	if f.style.legacy() && !stacked {
		h[fieldLimit] = []string{p.Q}
	}
	if f.style.ietf() {
		h[fieldPolicy] = []string{mergeList(p.List, h[fieldPolicy])}
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
// the units remaining, t, its RetryAfter in whole seconds, rounded up, at
// least 1, and pk; first in the list, before the items an enclosing
// Middleware set.
func writeShadow(h http.Header, beforeR string, res ratelimit.Result, pk string) {
	b := make([]byte, 0, len(beforeR)+24+len(pk))
	b = ratefields.AppendItem(b, beforeR, int64(max(res.Remaining, 0)), max(ratefields.CeilSeconds(res.RetryAfter), 1), pk)
	h[fieldShadow] = []string{mergeList(string(b), h[fieldShadow])}
}

// mergeList returns the structured-field list mine followed by the items
// of the lists earlier whose names mine does not have, in their order: the
// value of a field that an enclosing Middleware set first. It returns mine
// itself when earlier is empty.
func mergeList(mine string, earlier []string) string {
	if len(earlier) == 0 {
		return mine
	}
	var names []string
	for _, item := range splitList(mine) {
		names = append(names, itemName(item))
	}
	b := []byte(mine)
	for _, v := range earlier {
		for _, item := range splitList(v) {
			name := itemName(item)
			if slices.Contains(names, name) {
				continue
			}
			names = append(names, name)
			if len(b) > 0 {
				b = append(b, ", "...)
			}
			b = append(b, item...)
		}
	}
	return string(b)
}

// splitList returns the members of a structured-field list, trimmed: the
// text between commas outside strings.
func splitList(v string) []string {
	var items []string
	start, quoted := 0, false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == ',':
			items = appendMember(items, v[start:i])
			start = i + 1
		}
	}
	return appendMember(items, v[start:])
}

// appendMember appends item, trimmed, to items unless it is empty.
func appendMember(items []string, item string) []string {
	if item = strings.TrimSpace(item); item != "" {
		items = append(items, item)
	}
	return items
}

// itemName returns the name of a list member: its leading string (or
// token), up to its first parameter.
func itemName(item string) string {
	if strings.HasPrefix(item, `"`) {
		for i := 1; i < len(item); i++ {
			switch item[i] {
			case '\\':
				i++
			case '"':
				return item[:i+1]
			}
		}
		return item
	}
	if i := strings.IndexByte(item, ';'); i >= 0 {
		return item[:i]
	}
	return item
}
