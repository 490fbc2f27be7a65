package grpclimit

import (
	"fmt"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// maxQuotaUnit bounds the name WithQuotaUnit takes.
const maxQuotaUnit = ratefields.MaxQuotaUnit

// WithQuotaUnit names the unit the limiter's policies count, sent as the
// qu parameter of their ratelimit-policy items
// (draft-ietf-httpapi-ratelimit-headers-11, section 3.1.2), as package
// httplimit's WithQuotaUnit does, for policies whose units are not calls:
// a cost-weighted policy (WithCost) of "tokens", say:
//
//	ratelimit-policy: "requests";q=60;w=60, "tokens";q=100000;w=60;qu="tokens"
//
// It applies to every policy that counts units: not to a Composite's
// PerCall parts, which count calls (the draft's default unit, requests,
// sent without qu), nor to a policy of calls in flight, whose unit is
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
		return fmt.Errorf("%w: grpclimit: WithQuotaUnit: %q is not 1 to %d lower-case letters, digits and hyphens starting with a letter", ratelimit.ErrInvalidConfig, unit, maxQuotaUnit)
	}
	return nil
}
