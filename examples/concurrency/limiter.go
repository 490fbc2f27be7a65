package main

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
)

// policyName names the limit in the RateLimit fields and in logs.
const policyName = "jobs"

// newJobLimiter returns the limiter of jobs: at most limit in flight per
// API key, each held by a lease that lasts ttl unless released, on the
// Redis server of client. opts are added to its options (the tests hook
// it).
//
// Until ratelimit.NewRedisConcurrency is merged, it builds the in-process
// ratelimit.NewConcurrency, which decides identically in one process; the
// switch is this one line:
//
//	return ratelimit.NewRedisConcurrency(client, limit, ttl, append(opts, ratelimit.WithName(policyName))...)
func newJobLimiter(client redis.Scripter, limit int, ttl time.Duration, opts ...ratelimit.Option) (ratelimit.Acquirer, error) {
	_ = client
	return ratelimit.NewConcurrency(limit, ttl, append(opts, ratelimit.WithName(policyName))...)
}
