package httplimit

import (
	"fmt"
	"strconv"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// HeaderStyle says which rate-limit header fields responses carry. The zero
// value is BothHeaders.
type HeaderStyle int

const (
	// BothHeaders sends the legacy fields and the IETF ones.
	BothHeaders HeaderStyle = iota
	// LegacyHeaders sends RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset only, the fields of the draft's versions up to -06.
	LegacyHeaders
	// IETFHeaders sends RateLimit-Policy and RateLimit only, as in
	// draft-ietf-httpapi-ratelimit-headers-11 and later.
	IETFHeaders
)

// legacy reports whether s includes the legacy fields.
func (s HeaderStyle) legacy() bool { return s != IETFHeaders }

// ietf reports whether s includes the IETF structured fields.
func (s HeaderStyle) ietf() bool { return s != LegacyHeaders }

// checkPolicyName rejects a name that cannot be a structured-field string:
// empty, or with a byte outside printable ASCII.
func checkPolicyName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: httplimit: empty policy name", ratelimit.ErrInvalidConfig)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%w: httplimit: policy name %q has byte %#x at %d; a structured-field string is printable ASCII only", ratelimit.ErrInvalidConfig, name, c, i)
		}
	}
	return nil
}

// quoteSFString returns name as a structured-field string (RFC 9651 §4.1.6):
// in double quotes, with '"' and '\' escaped by a backslash. name has passed
// checkPolicyName.
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

// inFlightUnit is the qu parameter of a policy that limits requests in
// flight (ratelimit.NamedPolicy's InFlight): the quota unit
// "concurrent-requests" of draft-ietf-httpapi-ratelimit-headers-11
// (section 3.1.2). Rate policies count the draft's default unit,
// "requests", and are sent without qu unless WithQuotaUnit names theirs.
const inFlightUnit = `;qu="concurrent-requests"`

// policyItem returns one policy as a member of RateLimit-Policy:
// `"per-hour";q=1000;w=3600`, without w when window <= 0, and with
// `;qu="unit"` when unit is not empty (WithQuotaUnit). A policy of requests
// in flight names its quota unit and has no w, whatever its window (its
// leases' TTL): the draft's w is the time window of a quota that is spent
// over time, and a limit on requests in flight has none, so
// `"default";q=5;qu="concurrent-requests"`.
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
