package httplimit

import (
	"fmt"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// maxQuotaUnit bounds the name WithQuotaUnit takes.
const maxQuotaUnit = ratefields.MaxQuotaUnit

// WithQuotaUnit names the unit the limiter's policies count, sent as the
// qu parameter of their RateLimit-Policy items
// (draft-ietf-httpapi-ratelimit-headers-11, section 3.1.2), for policies
// whose units are not requests: a cost-weighted policy (WithCost) of
// "content-bytes", or of "tokens" for a model's tokens:
//
//	RateLimit-Policy: "requests";q=60;w=60, "tokens";q=100000;w=60;qu="tokens"
//
// It applies to every policy that counts units: not to a Composite's
// PerCall parts, which count requests (the draft's default unit, sent
// without qu), nor to a policy of requests in flight, whose unit is
// "concurrent-requests". The draft registers "requests", "content-bytes"
// and "concurrent-requests"; a client may ignore a unit it does not know,
// such as "tokens". unit must be 1 to 64 lower-case ASCII letters, digits
// and hyphens, starting with a letter, as the registered units are; any
// other is an error. Without it, no qu is sent but for policies in flight.
func WithQuotaUnit(unit string) Option {
	return func(s *settings) error {
		if err := checkQuotaUnit(unit); err != nil {
			return err
		}
		s.quotaUnit = unit
		return nil
	}
}

// checkQuotaUnit returns an error for a unit WithQuotaUnit does not take.
func checkQuotaUnit(unit string) error {
	if !ratefields.ValidQuotaUnit(unit) {
		return fmt.Errorf("%w: httplimit: WithQuotaUnit: %q is not 1 to %d lower-case letters, digits and hyphens starting with a letter", ratelimit.ErrInvalidConfig, unit, maxQuotaUnit)
	}
	return nil
}
