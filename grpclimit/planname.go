package grpclimit

import (
	"fmt"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// WithPlanName names the policy of each call after its key's plan, in
// ratelimit-policy, ratelimit and a denial's QuotaFailure, so that a
// client sees "free" or "pro" rather than "default": plan reports the name
// of the plan key follows, and whether it follows one (a
// ratelimit.PolicyTable's PlanOf is one). A key that follows no plan, or
// whose plan's name is empty or not printable ASCII, keeps the limiter's
// name. It names the one policy of a limiter that has one:
// NewInterceptor returns an error for WithPlanName with a limiter of
// several policies (a Composite, whose parts name themselves). plan is
// called once per decided call, with the key the KeyFunc returned, and
// must be safe for concurrent use and quick; a named policy costs one
// allocation per call. A nil plan is an error.
func WithPlanName(plan func(key string) (name string, ok bool)) Option {
	return func(s *settings) error {
		if plan == nil {
			return fmt.Errorf("%w: grpclimit: WithPlanName: nil func", ratelimit.ErrInvalidConfig)
		}
		s.planName = plan
		return nil
	}
}

// name names d's one policy after key's plan, when WithPlanName gives
// one.
func (i *Interceptor) name(d *ratelimit.Decision, key string) {
	if policies, ok := ratefields.Planned(d.Policies, i.planName, key); ok {
		d.Policies, d.Policy = policies, policies[0]
	}
}
