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
// Redis server of client, so that every copy of the service shares each
// key's limit. opts are added to its options (the tests hook it).
func newJobLimiter(client redis.Scripter, limit int, ttl time.Duration, opts ...ratelimit.RedisOption) (ratelimit.Acquirer, error) {
	return ratelimit.NewRedisConcurrency(client, limit, ttl, append(opts, ratelimit.WithName(policyName))...)
}
