package leasehold

import "github.com/ratelimit-go/ratelimit"

// InFlightIndex returns the index of the first policy of units in flight
// (NamedPolicy.InFlight) in policies, or -1: a limiter that reports one
// must hold each request's units by a lease for as long as it runs.
func InFlightIndex(policies []ratelimit.NamedPolicy) int {
	for i := range policies {
		if policies[i].InFlight {
			return i
		}
	}
	return -1
}
