package promratelimit

import (
	"sync"

	"github.com/ratelimit-go/ratelimit"
)

// NoPolicy is the policy label of a request whose Decision names no
// policy (one that failed before any policy was known).
const NoPolicy = "none"

// Observe counts one request that a middleware decided on: d and err as
// the limiter returned them, route a label the caller chose, such as the
// route's pattern. It adds 1 to ratelimit_requests_total with route, the
// name of the policy that bound d (its Policy.Name: "default" for a
// limiter of one policy, a plan's name for a per-key policy that names
// one, NoPolicy for none) and the outcome ("allowed", "denied",
// "rejected" for an error that is the request's own mistake, answered
// 401, 400 or 413, or "error" for any other; a denial a Shadow let
// through is "denied"). The Hooks keeps
// the first WithMaxRoutes distinct routes apart and counts the others
// under OtherRoute. Observe is for an adapter of a middleware's observer;
// the limiters' own reports go to Decided.
func (h *Hooks) Observe(route string, d ratelimit.Decision, err error) {
	if h.off() {
		return
	}
	policy := d.Policy.Name
	if policy == "" {
		policy = NoPolicy
	}
	h.m.requests.WithLabelValues(h.m.routes.label(route), policy, outcomeOf(d, err)).Inc()
}

// routeSet bounds the route labels: the first max distinct routes are
// kept, the others are OtherRoute.
type routeSet struct {
	max  int
	mu   sync.RWMutex
	seen map[string]struct{}
}

// label returns the label of route.
func (s *routeSet) label(route string) string {
	s.mu.RLock()
	_, ok := s.seen[route]
	s.mu.RUnlock()
	if ok {
		return route
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.seen[route]; ok {
		return route
	}
	if len(s.seen) >= s.max {
		return OtherRoute
	}
	s.seen[route] = struct{}{}
	return route
}
