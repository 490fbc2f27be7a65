package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// planOfKey gives each key one of three plans by its last digit, so that
// a coalesced batch mixes policies.
func planOfKey(_ context.Context, key string) (Policy, error) {
	switch key[len(key)-1] % 3 {
	case 0:
		return Policy{Limit: 3, Window: time.Hour}, nil
	case 1:
		return Policy{Limit: 5, Window: 2 * time.Hour}, nil
	}
	return Policy{}, nil // the limiter's own: 4 an hour
}

func TestRealRedisPolicyFuncBatchesMixingPoliciesStayExact(t *testing.T) {
	t.Parallel()
	server := redistest.Shared(t)
	testPolicyFuncBatchesStayExact(t, server.Client(t, func(o *redis.Options) { o.PoolSize = 64 }))
}

func TestRealRedisClusterPolicyFuncBatchesMixingPoliciesStayExact(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	testPolicyFuncBatchesStayExact(t, cluster.Client(t, func(o *redis.ClusterOptions) { o.PoolSize = 64 }))
}

// testPolicyFuncBatchesStayExact sends, from 64 goroutines, more calls than any
// plan allows on 300 keys of three plans, through each Redis
// limiter: every key gets exactly its plan's limit.
func testPolicyFuncBatchesStayExact(t *testing.T, client redis.Scripter) {
	builds := map[string]func() (Limiter, error){
		"RedisTokenBucket": func() (Limiter, error) {
			return NewRedisTokenBucket(client, PerHour(4), 4, WithPolicyFunc(planOfKey))
		},
		"RedisGCRA": func() (Limiter, error) {
			return NewRedisGCRA(client, 4, time.Hour, WithPolicyFunc(planOfKey))
		},
		"RedisFixedWindow": func() (Limiter, error) {
			return NewRedisFixedWindow(client, 4, time.Hour, WithPolicyFunc(planOfKey))
		},
	}
	for name, build := range builds {
		t.Run(name, func(t *testing.T) {
			l, err := build()
			require.NoError(t, err)
			const keys, calls = 300, 8
			var allowed [keys]atomic.Int64
			var next atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= keys*calls {
							return
						}
						k := int(i % keys)
						res, err := l.Allow(context.Background(), name+":key"+strconv.Itoa(k), 1)
						if !assert.NoError(t, err) {
							return
						}
						if res.Allowed {
							allowed[k].Add(1)
						}
					}
				})
			}
			wg.Wait()
			for k := range keys {
				p, err := planOfKey(context.Background(), "key"+strconv.Itoa(k))
				require.NoError(t, err)
				want := 4
				if p.Limit > 0 {
					want = p.Limit
				}
				assert.Equal(t, int64(want), allowed[k].Load(), "key%d", k)
			}
		})
	}
}
