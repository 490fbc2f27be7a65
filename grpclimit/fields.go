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

// newPolicySet formats the values of policies, those of a Decision. It
// returns an error wrapping ratelimit.ErrInvalidConfig for a policy that
// cannot be sent: a name that is not a non-empty string of printable
// ASCII, or, in a list of several, a limit <= 0.
func newPolicySet(policies []ratelimit.NamedPolicy) (*policySet, error) {
	items := make([]string, len(policies))
	for i, p := range policies {
		if !checkPolicyName(p.Name) {
			return nil, fmt.Errorf("%w: grpclimit: the limiter's policy %d is named %q; a structured-field string is non-empty printable ASCII", ratelimit.ErrInvalidConfig, i, p.Name)
		}
		if p.Limit <= 0 && len(policies) > 1 {
			return nil, fmt.Errorf("%w: grpclimit: the limiter's policy %d (%q) has limit %d; every policy of a decision with several must have a limit > 0", ratelimit.ErrInvalidConfig, i, p.Name, p.Limit)
		}
		items[i] = policyItem(p.Name, p.Limit, p.Window, p.InFlight)
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
	sets  [policySets]atomic.Pointer[policySet]
	next  atomic.Uint32
}

// policySets is how many lists of policies an Interceptor keeps formatted.
const policySets = 4

// policy returns the values of the policy that bound d, as d lists its
// policies: those of the cache when it holds them. A Decision of no
// policy, or of one whose limit is unknown (<= 0), gets the values of its
// Result's limit, with no w, under the name "default" or the policy's. It
// returns an error wrapping ratelimit.ErrInvalidConfig when d's policies
// cannot be sent (see newPolicySet) or its Bound names none of them.
func (f *fields) policy(d *ratelimit.Decision) (*policyValues, error) {
	switch n := len(d.Policies); {
	case n == 0:
		return dynamicValues(defaultPolicyName, d.Limit), nil
	case d.Bound < 0 || d.Bound >= n:
		return nil, fmt.Errorf("%w: grpclimit: the limiter's Decision is bound by policy %d of %d", ratelimit.ErrInvalidConfig, d.Bound, n)
	case n == 1 && d.Policies[0].Limit <= 0:
		if !checkPolicyName(d.Policies[0].Name) {
			return nil, fmt.Errorf("%w: grpclimit: the limiter's policy is named %q; a structured-field string is non-empty printable ASCII", ratelimit.ErrInvalidConfig, d.Policies[0].Name)
		}
		return dynamicValues(d.Policies[0].Name, d.Limit), nil
	}
	for i := range f.sets {
		if s := f.sets[i].Load(); s != nil && s.lists(d.Policies) {
			return &s.vals[d.Bound], nil
		}
	}
	s, err := newPolicySet(d.Policies)
	if err != nil {
		return nil, err
	}
	f.sets[f.next.Add(1)%policySets].Store(s)
	return &s.vals[d.Bound], nil
}

// defaultPolicyName names the policy of a Decision that lists none.
const defaultPolicyName = "default"

// dynamicValues returns the values of a policy named name whose limit is
// known only from a Result of limit: its limit-only values, formatted for
// each call.
func dynamicValues(name string, limit int) *policyValues {
	q := strconv.Itoa(max(limit, 0))
	quoted := quoteSFString(name)
	item := quoted + ";q=" + q
	return &policyValues{name: name, limit: limit, q: q, item: item, list: item, beforeR: quoted + ";r="}
}

// fieldBufSize is the room on the stack for the values that change with
// each call: enough for a policy name of 40 bytes with numbers of up to 10
// digits. Longer values grow the buffer on the heap.
const fieldBufSize = 96

// fieldBlock holds the value slices of one response's metadata in one
// allocation.
type fieldBlock struct {
	vals [6]string
}

// metadata returns the rate-limit metadata for res decided under policy p,
// with retry-after (res's RetryAfter in whole seconds, rounded up, at least
// 1) when deny is true. The reset (ratelimit-reset, and t of ratelimit) is
// ResetAfter on an allowed call and the retry-after value on a denial, so
// that the two agree; ratelimit-limit and ratelimit-policy are left out
// while the limit is unknown (<= 0). These are the rules of package
// httplimit's header fields.
//
// The values that change with each call are formatted into one buffer and
// made one string that backs them all; the value slices share one backing
// array, each capped at length 1 so that an append copies instead of
// overwriting a neighbour.
func (f *fields) metadata(p *policyValues, res ratelimit.Result, deny bool) metadata.MD {
	remaining := int64(max(res.Remaining, 0))
	reset := ceilSeconds(res.ResetAfter)
	if deny {
		reset = max(ceilSeconds(res.RetryAfter), 1)
	}

	var buf [fieldBufSize]byte
	b := buf[:0]
	var remFrom, remTo, rstFrom, rstTo, rlTo int
	if f.style.ietf() {
		// `"default";r=3;t=2`: the legacy values are substrings of it.
		b = append(b, p.beforeR...)
		remFrom = len(b)
		b = strconv.AppendInt(b, remaining, 10)
		remTo = len(b)
		b = append(b, ";t="...)
		rstFrom = len(b)
		b = strconv.AppendInt(b, reset, 10)
		rstTo, rlTo = len(b), len(b)
	} else {
		b = strconv.AppendInt(b, remaining, 10)
		remTo, rstFrom = len(b), len(b)
		b = strconv.AppendInt(b, reset, 10)
		rstTo = len(b)
	}
	s := string(b)
	blk := new(fieldBlock)
	md := make(metadata.MD, 6)
	i := 0
	known := p.limit > 0
	if f.style.legacy() {
		if known {
			i = set(md, &blk.vals, i, keyLimit, p.q)
		}
		i = set(md, &blk.vals, i, keyRemaining, s[remFrom:remTo])
		i = set(md, &blk.vals, i, keyReset, s[rstFrom:rstTo])
	}
	if f.style.ietf() {
		if known {
			i = set(md, &blk.vals, i, keyPolicy, p.list)
		}
		i = set(md, &blk.vals, i, keyRateLimit, s[:rlTo])
	}
	if deny {
		set(md, &blk.vals, i, keyRetryAfter, s[rstFrom:rstTo])
	}
	return md
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
// "requests", and are sent without qu.
const inFlightUnit = `;qu="concurrent-requests"`

// policyItem returns one policy as a member of ratelimit-policy:
// `"per-hour";q=1000;w=3600`, without w when window <= 0. A policy of
// calls in flight names its quota unit and has no w, whatever its window
// (its leases' TTL), as package httplimit sends it:
// `"default";q=5;qu="concurrent-requests"`.
func policyItem(name string, limit int, window time.Duration, inFlight bool) string {
	item := quoteSFString(name) + ";q=" + strconv.Itoa(limit)
	switch {
	case inFlight:
		item += inFlightUnit
	case window > 0:
		item += ";w=" + strconv.FormatInt(ceilSeconds(window), 10)
	}
	return item
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
