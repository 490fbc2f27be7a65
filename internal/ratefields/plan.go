package ratefields

import "github.com/ratelimit-go/ratelimit"

// Planned returns policies, the one policy of a Decision, named after the
// plan key follows as plan reports it, in a new slice, and true; or
// policies and false when plan is nil, there is not exactly one policy, or
// key follows no plan whose name can be sent (empty, or not a
// structured-field string: see BadByte).
func Planned(policies []ratelimit.NamedPolicy, plan func(key string) (string, bool), key string) ([]ratelimit.NamedPolicy, bool) {
	if plan == nil || len(policies) != 1 {
		return policies, false
	}
	name, ok := plan(key)
	if !ok || name == "" || BadByte(name) >= 0 {
		return policies, false
	}
	p := policies[0]
	p.Name = name
	return []ratelimit.NamedPolicy{p}, true
}
