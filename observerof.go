package ratelimit

// What the package reads of a limiter of its own, through its engine (see
// engineOf): its observer, and the policy and rule it was built with.

// observerOf returns the observer of l when it is one of the limiters of
// this package (the rate limiters, Concurrency and RedisConcurrency),
// built; nil otherwise.
func observerOf(l Limiter) *observer {
	if e, ok := engineOf(l); ok {
		return e.engineObserver()
	}
	return nil
}

// policyOf returns the constructor's policy of l, one of the limiters of
// this package (see observerOf); the zero Policy for any other.
func policyOf(l Limiter) Policy {
	if o := observerOf(l); o != nil {
		return o.policy
	}
	return Policy{}
}

// ruleOf returns how the state of l, one of the limiters of this package
// (see observerOf), moves under its constructor's policy: inFlight for a
// Concurrency or a RedisConcurrency.
func ruleOf(l Limiter) rule {
	if o := observerOf(l); o != nil {
		return o.rules[0]
	}
	return rule{}
}
