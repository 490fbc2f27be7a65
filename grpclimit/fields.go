package grpclimit

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"google.golang.org/grpc/metadata"
)

// The response metadata keys: gRPC metadata keys are lower case, and these
// are the HTTP field names of package httplimit in that form.
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
// limiter, listed) and the start of its ratelimit item.
type policyValues struct {
	name    string
	limit   int
	q       string // "10"
	item    string // `"default";q=10;w=5`: this policy's own
	list    string // item, or every policy's, comma-separated
	beforeR string // `"default";r=`
}

// fields formats the response metadata of one Interceptor. It is
// immutable after construction.
//
// policies holds one entry per policy the limiter reports (see
// ratelimit.PoliciesOf). A limiter that reports none has an empty
// policies, and its limit is taken from each Result, with no w.
type fields struct {
	style    HeaderStyle
	policies []policyValues
}

// newFields formats the values of policies, those of the limiter, which
// have passed checkPolicies.
func newFields(style HeaderStyle, policies []ratelimit.NamedPolicy) fields {
	f := fields{style: style}
	if len(policies) == 0 {
		return f
	}
	items := make([]string, len(policies))
	for i, p := range policies {
		items[i] = policyItem(p.Name, p.Limit, p.Window)
	}
	list := strings.Join(items, ", ")
	f.policies = make([]policyValues, len(policies))
	for i, p := range policies {
		f.policies[i] = policyValues{
			name:    p.Name,
			limit:   p.Limit,
			q:       strconv.Itoa(p.Limit),
			item:    items[i],
			list:    list,
			beforeR: quoteSFString(p.Name) + ";r=",
		}
	}
	return f
}

// defaultPolicyName names the policy of a limiter that reports none.
const defaultPolicyName = "default"

// quotedDefault is defaultPolicyName as a structured-field string.
const quotedDefault = `"` + defaultPolicyName + `"`

// dynamicValues returns the values of a limiter that reports no policy,
// for a Result of limit: its limit-only values are formatted for each call.
func dynamicValues(limit int) policyValues {
	q := strconv.Itoa(max(limit, 0))
	item := quotedDefault + ";q=" + q
	return policyValues{name: defaultPolicyName, limit: limit, q: q, item: item, list: item, beforeR: quotedDefault + ";r="}
}

// policy returns the values of policy i (0 for a limiter of one policy),
// or, for a limiter that reports none, those of res's limit. ok is false
// when i names no policy.
func (f *fields) policy(i int, res ratelimit.Result) (policyValues, bool) {
	if len(f.policies) == 0 {
		return dynamicValues(res.Limit), i == 0
	}
	if i < 0 || i >= len(f.policies) {
		return policyValues{}, false
	}
	return f.policies[i], true
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

// policyItem returns one policy as a member of ratelimit-policy:
// `"per-hour";q=1000;w=3600`, without w when window <= 0.
func policyItem(name string, limit int, window time.Duration) string {
	item := quoteSFString(name) + ";q=" + strconv.Itoa(limit)
	if window > 0 {
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

// keyedValues returns the values of the policy of a call on key to a
// limiter that chooses its policy per key, whose Result says limit: p (the
// limiter's own policy) with the key's limit and window; or with limit and
// no window when the key's policy cannot be read or no longer has the
// Result's limit (it changed since the decision), so that q and w never
// come from two policies.
func (i *Interceptor) keyedValues(ctx context.Context, key string, p policyValues, limit int) policyValues {
	kp, err := i.keyed(ctx, key)
	if err != nil || kp.Limit <= 0 || kp.Limit != limit {
		kp = ratelimit.Policy{Limit: max(limit, 0)}
	} else if kp == i.keyedOwn {
		return p
	}
	p.limit, p.q = kp.Limit, strconv.Itoa(kp.Limit)
	p.item = policyItem(p.name, kp.Limit, kp.Window)
	p.list = p.item
	return p
}
