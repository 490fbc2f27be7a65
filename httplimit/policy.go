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
	// RateLimit-Reset only.
	LegacyHeaders
	// IETFHeaders sends RateLimit-Policy and RateLimit only, as in
	// draft-ietf-httpapi-ratelimit-headers-11.
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

// policyParts returns the constant parts of the IETF fields for a policy
// named name with window w seconds (hasW false leaves w out): what comes
// before q, after q, and before r in RateLimit.
func policyParts(name string, w int64, hasW bool) (beforeQ, afterQ, beforeR string) {
	quoted := quoteSFString(name)
	if hasW {
		afterQ = ";w=" + strconv.FormatInt(w, 10)
	}
	return quoted + ";q=", afterQ, quoted + ";r="
}

// policyItem returns one policy as a member of RateLimit-Policy:
// `"per-hour";q=1000;w=3600`, without w when window <= 0.
func policyItem(name string, limit int, window time.Duration) string {
	beforeQ, afterQ, _ := policyParts(name, ceilSeconds(window), window > 0)
	return beforeQ + strconv.Itoa(limit) + afterQ
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
