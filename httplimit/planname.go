package httplimit

import (
	"fmt"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// WithPlanName names the policy of each request after its key's plan, in
// RateLimit-Policy, RateLimit, the legacy fields' policy and the 429
// answer's violated-policies, so that a client sees "free" or "pro"
// rather than "default": plan reports the name of the plan key follows,
// and whether it follows one. A ratelimit.PolicyTable's PlanOf is one:
//
//	l, err := ratelimit.NewGCRA(10, time.Second, ratelimit.WithPolicyFunc(table.PolicyFunc()))
//	m, err := httplimit.NewMiddleware(l, httplimit.KeyByBearer(), httplimit.WithPlanName(table.PlanOf))
//
// The Decision the observer (WithObserver) and the handler (DecisionOf)
// see names the plan too.
//
// A key that follows no plan, or whose plan's name is empty or not a
// structured-field string (printable ASCII), keeps the name it has
// without the option (WithPolicyName's, or the limiter's). It names the
// one policy of a limiter that has one: NewMiddleware returns an error
// for WithPlanName with a limiter of several policies (a Composite, whose
// parts name themselves). plan is called once per decided request, with
// the key the KeyFunc returned, and must be safe for concurrent use and
// quick; a named policy costs one allocation per request. A nil plan is
// an error.
func WithPlanName(plan func(key string) (name string, ok bool)) Option {
	return func(s *settings) error {
		if plan == nil {
			return fmt.Errorf("%w: httplimit: WithPlanName: nil func", ratelimit.ErrInvalidConfig)
		}
		s.planName = plan
		return nil
	}
}

// planned returns policies, the one policy of a Decision, named after
// key's plan (a new slice), and true; or policies and false when there
// is no such plan (or no WithPlanName).
func (m *Middleware) planned(policies []ratelimit.NamedPolicy, key string) ([]ratelimit.NamedPolicy, bool) {
	return ratefields.Planned(policies, m.planName, key)
}
