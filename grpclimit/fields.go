package grpclimit

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"google.golang.org/grpc/metadata"
)

// The response metadata keys: gRPC metadata keys are lower case, and these
// are the HTTP field names of package httplimit in that form.
//
// This file repeats, on purpose, what httplimit does for headers: the
// HeaderStyle values, the policy-name check, the structured-field quoting,
// the policy items and the rounding of seconds. httplimit keeps those
// unexported and writes an http.Header; sharing them would mean exporting
// formatting helpers from httplimit (an API its users would then depend
// on) or a third package both import, for about 60 lines. Each package's
// tests check its own fields.
const (
	keyLimit      = "ratelimit-limit"
	keyRemaining  = "ratelimit-remaining"
	keyReset      = "ratelimit-reset"
	keyPolicy     = "ratelimit-policy"
	keyRateLimit  = "ratelimit"
	keyRetryAfter = "retry-after"
)

// HeaderStyle says which rate-limit fields the response metadata carries.
// The zero value is BothHeaders.
type HeaderStyle int

const (
	// BothHeaders sends the legacy fields and the IETF ones.
	BothHeaders HeaderStyle = iota
	// LegacyHeaders sends ratelimit-limit, ratelimit-remaining and
	// ratelimit-reset only.
	LegacyHeaders
	// IETFHeaders sends ratelimit-policy and ratelimit only, as in
	// draft-ietf-httpapi-ratelimit-headers-11.
	IETFHeaders
)

// legacy reports whether s includes the legacy fields.
func (s HeaderStyle) legacy() bool { return s != IETFHeaders }

// ietf reports whether s includes the IETF structured fields.
func (s HeaderStyle) ietf() bool { return s != LegacyHeaders }

// policyValues are the constant values of one policy: its name, limit, the
// ratelimit-limit value, the ratelimit-policy value (every policy of the
// decision, listed) and the start of its ratelimit item.
type policyValues struct {
	name    string
	limit   int
	q       string // "10"
	item    string // `"default";q=10;w=5`: this policy's own
	list    string // item, or every policy's, comma-separated
	beforeR string // `"default";r=`
	// inFlight says the policy limits calls in flight.
	inFlight bool
}

// policySet is the formatted values of one list of policies, as a
// Decision lists them. It is immutable.
type policySet struct {
	policies []ratelimit.NamedPolicy // a copy of the Decision's
	vals     []policyValues
}

// newPolicySet formats the values of policies, those of a Decision, the
// policies that count units of unit (WithQuotaUnit's, or ""). It returns
// an error wrapping ratelimit.ErrInvalidConfig for a policy that cannot be
// sent: a name that is not a non-empty string of printable ASCII, or, in a
// list of several, a limit <= 0.
func newPolicySet(policies []ratelimit.NamedPolicy, unit string) (*policySet, error) {
	items := make([]string, len(policies))
	for i, p := range policies {
		if !checkPolicyName(p.Name) {
			return nil, fmt.Errorf("%w: grpclimit: the limiter's policy %d is named %q; a structured-field string is non-empty printable ASCII", ratelimit.ErrInvalidConfig, i, p.Name)
		}
		if p.Limit <= 0 && len(policies) > 1 {
			return nil, fmt.Errorf("%w: grpclimit: the limiter's policy %d (%q) has limit %d; every policy of a decision with several must have a limit > 0", ratelimit.ErrInvalidConfig, i, p.Name, p.Limit)
		}
		items[i] = policyItem(p.Name, p.Limit, p.Window, p.InFlight, unitOf(p, unit))
	}
	list := strings.Join(items, ", ")
	s := &policySet{policies: slices.Clone(policies), vals: make([]policyValues, len(policies))}
	for i, p := range policies {
		s.vals[i] = policyValues{
			name:     p.Name,
			limit:    p.Limit,
			q:        strconv.Itoa(p.Limit),
			item:     items[i],
			list:     list,
			beforeR:  quoteSFString(p.Name) + ";r=",
			inFlight: p.InFlight,
		}
	}
	return s, nil
}

// lists reports whether s holds the values of policies.
func (s *policySet) lists(policies []ratelimit.NamedPolicy) bool {
	return slices.Equal(s.policies, policies)
}

// fields formats the response metadata of one Interceptor from each
// call's Decision.
//
// sets caches the values of the last policySets lists of policies
// formatted, so that a limiter whose calls list the same policies (its
// own, a Composite's parts, the plans in force) formats them once; a
// Decision that lists others formats them and takes the place of the
// oldest. The cache changes only what is allocated, never what is sent.
type fields struct {
	style HeaderStyle
	unit  string // WithQuotaUnit's, or ""
	sets  [policySets]atomic.Pointer[policySet]
	next  atomic.Uint32
}

// policySets is how many lists of policies an Interceptor keeps formatted.
const policySets = 4

// policy returns the values of d's policies, as d lists them, and the
// index among them of the policy that bound d: those of the cache when it
// holds them. A Decision of no policy, or of one whose limit is unknown
// (<= 0), gets the values of its Result's limit, with no w, under the name
// "default" or the policy's. It returns an error wrapping
// ratelimit.ErrInvalidConfig when d's policies cannot be sent (see
// newPolicySet) or its PolicyIndex names none of them.
func (f *fields) policy(d *ratelimit.Decision) ([]policyValues, int, error) {
	switch n := len(d.Policies); {
	case n == 0:
		return []policyValues{dynamicValues(defaultPolicyName, d.Limit)}, 0, nil
	case d.PolicyIndex < 0 || d.PolicyIndex >= n:
		return nil, 0, fmt.Errorf("%w: grpclimit: the limiter's Decision is bound by policy %d of %d", ratelimit.ErrInvalidConfig, d.PolicyIndex, n)
	case n == 1 && d.Policies[0].Limit <= 0:
		if !checkPolicyName(d.Policies[0].Name) {
			return nil, 0, fmt.Errorf("%w: grpclimit: the limiter's policy is named %q; a structured-field string is non-empty printable ASCII", ratelimit.ErrInvalidConfig, d.Policies[0].Name)
		}
		return []policyValues{dynamicValues(d.Policies[0].Name, d.Limit)}, 0, nil
	}
	for i := range f.sets {
		if s := f.sets[i].Load(); s != nil && s.lists(d.Policies) {
			return s.vals, d.PolicyIndex, nil
		}
	}
	s, err := newPolicySet(d.Policies, f.unit)
	if err != nil {
		return nil, 0, err
	}
	f.sets[f.next.Add(1)%policySets].Store(s)
	return s.vals, d.PolicyIndex, nil
}

// defaultPolicyName names the policy of a Decision that lists none.
const defaultPolicyName = "default"

// dynamicValues returns the values of a policy named name whose limit is
// known only from a Result of limit: its limit-only values, formatted for
// each call.
func dynamicValues(name string, limit int) policyValues {
	q := strconv.Itoa(max(limit, 0))
	quoted := quoteSFString(name)
	item := quoted + ";q=" + q
	return policyValues{name: name, limit: limit, q: q, item: item, list: item, beforeR: quoted + ";r="}
}

// fieldBufSize is the room on the stack for the values that change with
// each call: enough for one policy of a name of 40 bytes with numbers of
// up to 10 digits. Longer values, and several policies, grow the buffer on
// the heap.
const fieldBufSize = 96

// fieldBlock holds the value slices of one response's metadata in one
// allocation.
type fieldBlock struct {
	vals [6]string
}

// metadata returns the rate-limit metadata for d, the call's Decision,
// whose policies' values are vals (vals[bound] the bound policy's), with
// retry-after (d's RetryAfter in whole seconds, rounded up, at least 1)
// when deny is true. pk is the partition key's parameter (";pk=:...:"), or
// "". These are the rules of package httplimit's header fields:
// ratelimit lists each policy's service limit on an allowed call, the
// bound one first, each with its own r and t, its effective window
// (ratelimit.Decision's NextUnit in whole seconds, rounded up, left out
// when the Decision does not tell it), and the bound one alone on a
// denial, whose t is the retry-after value
// (draft-ietf-httpapi-ratelimit-headers-11, sections 4.1.2 and 6);
// ratelimit-limit and ratelimit-remaining are the bound policy's, and
// ratelimit-reset the seconds until the key is full again (d's
// ResetAfter), or retry-after on a denial; ratelimit-limit and
// ratelimit-policy are left out while the limit is unknown (<= 0).
//
// The values that change with each call are formatted into one buffer and
// made one string that backs them all; the value slices share one backing
// array, each capped at length 1 so that an append copies instead of
// overwriting a neighbour.
func (f *fields) metadata(vals []policyValues, bound int, d *ratelimit.Decision, deny bool, pk string) metadata.MD {
	p := &vals[bound]
	remaining := int64(max(d.Remaining, 0))
	reset := ceilSeconds(d.ResetAfter)
	if deny {
		reset = max(ceilSeconds(d.RetryAfter), 1)
	}

	var buf [fieldBufSize]byte
	b := buf[:0]
	b = strconv.AppendInt(b, remaining, 10)
	remTo, rstFrom := len(b), len(b)
	b = strconv.AppendInt(b, reset, 10)
	rstTo, rlFrom := len(b), len(b)
	if f.style.ietf() {
		// `"per-second";r=3;t=1, "per-hour";r=998;t=4`
		if deny {
			b = appendItem(b, p.beforeR, remaining, reset, pk)
		} else {
			b = appendItem(b, p.beforeR, remaining, effectiveWindow(d, bound), pk)
			if d.Parts != nil && len(d.Parts) == len(vals) {
				for i := range vals {
					if i != bound {
						b = append(b, ", "...)
						b = appendItem(b, vals[i].beforeR, int64(max(d.Parts[i].Remaining, 0)), effectiveWindow(d, i), pk)
					}
				}
			}
		}
	}
	rlTo := len(b)
	s := string(b)
	blk := new(fieldBlock)
	md := make(metadata.MD, 6)
	i := 0
	known := p.limit > 0
	if f.style.legacy() {
		if known {
			i = set(md, &blk.vals, i, keyLimit, p.q)
		}
		i = set(md, &blk.vals, i, keyRemaining, s[:remTo])
		i = set(md, &blk.vals, i, keyReset, s[rstFrom:rstTo])
	}
	if f.style.ietf() {
		if known {
			i = set(md, &blk.vals, i, keyPolicy, p.list)
		}
		i = set(md, &blk.vals, i, keyRateLimit, s[rlFrom:rlTo])
	}
	if deny {
		set(md, &blk.vals, i, keyRetryAfter, s[rstFrom:rstTo])
	}
	return md
}

// effectiveWindow returns policy i's effective window in d, d.NextUnit in
// whole seconds rounded up, or -1 when d does not tell it.
func effectiveWindow(d *ratelimit.Decision, i int) int64 {
	next, ok := d.NextUnit(i)
	if !ok {
		return -1
	}
	return max(ceilSeconds(next), 1)
}

// appendItem appends to b one service limit item of ratelimit: beforeR
// (`"default";r=`), r, ";t=" and t unless t < 0, and pk.
func appendItem(b []byte, beforeR string, r, t int64, pk string) []byte {
	b = append(b, beforeR...)
	b = strconv.AppendInt(b, r, 10)
	if t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	return append(b, pk...)
}

// limitOnly returns the metadata that does not depend on a key's state,
// for a call whose cost exceeds the limit: ratelimit-limit and
// ratelimit-policy, as the style allows; nil when the limit is unknown.
func (f *fields) limitOnly(p *policyValues) metadata.MD {
	if p.limit <= 0 {
		return nil
	}
	md := make(metadata.MD, 2)
	if f.style.legacy() {
		md[keyLimit] = []string{p.q}
	}
	if f.style.ietf() {
		md[keyPolicy] = []string{p.list}
	}
	return md
}

// retryAfterOnly returns the metadata of a fail-closed answer: retry-after
// of seconds, at least 1.
func retryAfterOnly(seconds int64) metadata.MD {
	return metadata.MD{keyRetryAfter: []string{strconv.FormatInt(max(seconds, 1), 10)}}
}

// set puts v at vals[i], makes it key's only value in md and returns i+1.
func set(md metadata.MD, vals *[6]string, i int, key, v string) int {
	vals[i] = v
	md[key] = vals[i : i+1 : i+1]
	return i + 1
}

// checkPolicyName rejects a name that cannot be a structured-field string:
// empty, or with a byte outside printable ASCII.
func checkPolicyName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

// quoteSFString returns name as a structured-field string (RFC 9651
// §4.1.6): in double quotes, with '"' and '\' escaped by a backslash. name
// has passed checkPolicyName.
func quoteSFString(name string) string {
	b := make([]byte, 0, len(name)+2)
	b = append(b, '"')
	for i := 0; i < len(name); i++ {
		if c := name[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, name[i])
	}
	return string(append(b, '"'))
}

// inFlightUnit is the qu parameter of a policy that limits calls in
// flight (ratelimit.NamedPolicy's InFlight): the quota unit
// "concurrent-requests" of draft-ietf-httpapi-ratelimit-headers-11
// (section 3.1.2). Rate policies count the draft's default unit,
// "requests", and are sent without qu unless WithQuotaUnit names theirs.
const inFlightUnit = `;qu="concurrent-requests"`

// policyItem returns one policy as a member of ratelimit-policy:
// `"per-hour";q=1000;w=3600`, without w when window <= 0, and with
// `;qu="unit"` when unit is not empty. A policy of calls in flight names
// its quota unit and has no w, whatever its window (its leases' TTL), as
// package httplimit sends it: `"default";q=5;qu="concurrent-requests"`.
func policyItem(name string, limit int, window time.Duration, inFlight bool, unit string) string {
	item := quoteSFString(name) + ";q=" + strconv.Itoa(limit)
	switch {
	case inFlight:
		return item + inFlightUnit
	case window > 0:
		item += ";w=" + strconv.FormatInt(ceilSeconds(window), 10)
	}
	if unit != "" {
		item += `;qu="` + unit + `"`
	}
	return item
}

// unitOf returns the quota unit of p for its qu parameter: unit for a
// policy that counts units, "" for one that counts calls (PerCall) or
// units in flight.
func unitOf(p ratelimit.NamedPolicy, unit string) string {
	if p.PerCall || p.InFlight {
		return ""
	}
	return unit
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}
