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

// fillTimer is implemented by the token buckets and GCRAs: the time from
// empty to full.
type fillTimer interface{ FillTime() time.Duration }

// windower is implemented by the fixed windows: the length of a window.
type windower interface{ Window() time.Duration }

// policyWindow returns the w parameter in whole seconds, rounded up, and
// whether there is one: set by WithPolicyWindow, or else the Window of the
// limiter's Policy p (hasPolicy), or else learned from its FillTime or
// Window method.
func policyWindow(l ratelimit.Limiter, p ratelimit.Policy, hasPolicy bool, s *settings) (int64, bool) {
	d := s.window
	if !s.windowSet {
		if hasPolicy {
			d = p.Window
		} else {
			switch v := l.(type) {
			case fillTimer:
				d = v.FillTime()
			case windower:
				d = v.Window()
			}
		}
	}
	if d <= 0 {
		return 0, false
	}
	return ceilSeconds(d), true
}

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

// multiPolicies returns the policies of l when it decides by two or more
// (a ratelimit.MultiPolicy, such as a Composite or a Guard around one), and
// nil otherwise, with an error wrapping ratelimit.ErrInvalidConfig when one
// of them cannot be sent: a limit <= 0 or a name that is not a
// structured-field string. single is l's one policy when it has exactly
// one, with its name.
func multiPolicies(l ratelimit.Limiter) (multi ratelimit.MultiPolicy, policies []ratelimit.NamedPolicy, single *ratelimit.NamedPolicy, err error) {
	mp, ok := l.(ratelimit.MultiPolicy)
	if !ok || isNil(mp) {
		return nil, nil, nil, nil
	}
	policies = mp.Policies()
	switch len(policies) {
	case 0:
		return nil, nil, nil, nil
	case 1:
		return nil, nil, &policies[0], nil
	}
	for i, p := range policies {
		if err := checkPolicyName(p.Name); err != nil {
			return nil, nil, nil, fmt.Errorf("%w (the limiter's policy %d)", err, i)
		}
		if p.Limit <= 0 {
			return nil, nil, nil, fmt.Errorf("%w: httplimit: the limiter's policy %d (%q) has limit %d; every policy of a limiter with several must have a limit > 0", ratelimit.ErrInvalidConfig, i, p.Name, p.Limit)
		}
	}
	return mp, policies, nil, nil
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
