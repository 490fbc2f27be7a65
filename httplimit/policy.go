package httplimit

import (
	"fmt"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
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
	if i := ratefields.BadByte(name); i >= 0 {
		return fmt.Errorf("%w: httplimit: policy name %q has byte %#x at %d; a structured-field string is printable ASCII only", ratelimit.ErrInvalidConfig, name, name[i], i)
	}
	return nil
}
