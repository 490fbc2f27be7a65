package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// compositeStream is the random stream of the Composites below: small
// costs, and settles up to several limits of debt, beyond the parts'
// bounds, the clock moving by whole milliseconds (the unit of Redis
// expiry) when advance is true.
func compositeStream(advance bool) opStream {
	s := opStream{mix: opMix{allow: 4, refund: 4, taken: 4, cost: 24}}
	if advance {
		s.step = func(r *rand.Rand) time.Duration {
			if r.IntN(3) == 0 {
				return time.Duration(r.IntN(3000)) * time.Millisecond
			}
			return 0
		}
	}
	return s
}

// applyParts makes op's call on c, with its parts' Results for an Allow.
func applyParts(ctx context.Context, op op, c *Composite) (Result, []Result, error) {
	if op.kind == "allow" {
		return decideParts(ctx, c, op.key, op.n)
	}
	res, err := op.apply(ctx, c)
	return res, nil, err
}

// tenantKey derives the tenant part's key: the user's without its last
// letter, so that "a1" and "a2" share tenant "tenant-a".
func tenantKey(key string) string { return "tenant-" + key[:len(key)-1] }

// limiters makes the limiters of the Composites below: a token bucket, a
// GCRA and a fixed window of limit per period, in process or on Redis, with
// opts.
type limiters struct {
	bucket, gcra, window func(limit int, period time.Duration, opts ...Option) (Limiter, error)
}

// inProcessLimiters makes in-process limiters on clock.
func inProcessLimiters(clock Clock) limiters {
	return limiters{
		bucket: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewTokenBucket(Per(limit, period), limit, append(opts, WithClock(clock))...)
		},
		gcra: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewGCRA(limit, period, append(opts, WithClock(clock))...)
		},
		window: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewFixedWindow(limit, period, append(opts, WithClock(clock))...)
		},
	}
}

// redisLimiters makes Redis limiters through client.
func redisLimiters(client redis.Scripter) limiters {
	return limiters{
		bucket: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewRedisTokenBucket(client, Per(limit, period), limit, redisOpts(opts)...)
		},
		gcra: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewRedisGCRA(client, limit, period, redisOpts(opts)...)
		},
		window: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewRedisFixedWindow(client, limit, period, redisOpts(opts)...)
		},
	}
}

// compositeOf returns a Composite of a token bucket of 5 per period (debt
// bounded by default), a GCRA of 8 per period on the tenant's key (two
// limits of debt), a fixed window of 6 per period (no debt), and a GCRA of 4
// calls per period (unbounded), made by build.
func compositeOf(t *testing.T, period time.Duration, build limiters) *Composite {
	t.Helper()
	bucket, err := build.bucket(5, period)
	require.NoError(t, err)
	gcra, err := build.gcra(8, period, WithMaxDebt(2))
	require.NoError(t, err)
	window, err := build.window(6, period, WithMaxDebt(0))
	require.NoError(t, err)
	calls, err := build.gcra(4, period, WithMaxDebt(UnboundedDebt))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "user", Limiter: bucket},
		Part{Name: "tenant", Limiter: gcra, Key: tenantKey},
		Part{Name: "window", Limiter: window},
		Part{Name: "calls", Limiter: calls, PerCall: true})
	require.NoError(t, err)
	return c
}

// TestCompositeAdjustmentsDecideAlikeInProcessAndOnMiniredis runs random
// streams of Allow, Refund, Settle and Reset on a four-part Composite in
// process and on miniredis, with time moving, and requires every Result to
// be the same.
func TestCompositeAdjustmentsDecideAlikeInProcessAndOnMiniredis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(12, 13))
	for round := range sized(2, 8) {
		period := time.Duration(1+r.IntN(10)) * time.Second
		clock := ratelimittest.NewClock(epoch)
		local := compositeOf(t, period, inProcessLimiters(clock))
		_, client, advance := miniredisClock(t)
		remote := compositeOf(t, period, redisLimiters(client))
		for i, op := range compositeStream(true).ops(r, sized(150, 300), "a1", "a2", "b1") {
			clock.Advance(op.advance)
			advance(op.advance)
			want, wantParts, wantErr := applyParts(ctx, op, local)
			got, gotParts, gotErr := applyParts(ctx, op, remote)
			msg := fmt.Sprintf("round %d (period %v) step %d: %v", round, period, i, op)
			require.Equal(t, wantErr == nil, gotErr == nil, "%s: %v / %v", msg, wantErr, gotErr)
			require.Equal(t, want, got, msg)
			require.Equal(t, wantParts, gotParts, msg)
		}
	}
}

// TestRealRedisCompositeAdjustmentsDecideAsInProcess runs the same on a real
// server and on a 3-master cluster, whose time the test cannot move: with
// limits per ten days, no unit refills during the test, so every part's
// Allowed and Remaining must be the same. The users' keys have hash tags,
// which the tenant's key keeps, so that on the cluster every call's keys
// share a slot, and the rounds' keys spread over every master.
func TestRealRedisCompositeAdjustmentsDecideAsInProcess(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		checkCompositeAdjustmentsAsInProcess(t, redistest.Shared(t).Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		client := redistest.SharedCluster(t).Client(t)
		checkCompositeAdjustmentsAsInProcess(t, client)
		for _, n := range masterSizes(t, client) {
			assert.Positive(t, n, "every master holds keys")
		}
	})
}

func checkCompositeAdjustmentsAsInProcess(t *testing.T, client redis.Scripter) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(14, 15))
	const period = 10 * 24 * time.Hour
	for round := range 6 {
		local := compositeOf(t, period, inProcessLimiters(ratelimittest.NewClock(epoch)))
		remote := compositeOf(t, period, redisLimiters(client))
		users := []string{fmt.Sprint("{a", round, "}x"), fmt.Sprint("{a", round, "}y"), fmt.Sprint("{b", round, "}x")}
		for i, op := range compositeStream(false).ops(r, 150, users...) {
			want, wantParts, wantErr := applyParts(ctx, op, local)
			got, gotParts, gotErr := applyParts(ctx, op, remote)
			msg := fmt.Sprintf("round %d step %d: %v", round, i, op)
			require.Equal(t, wantErr == nil, gotErr == nil, "%s: %v / %v", msg, wantErr, gotErr)
			assert.Equal(t, want.Allowed, got.Allowed, msg)
			if op.kind != "allow" {
				// The part with the smallest share left: its Limit may
				// differ where two parts tie, as their waits differ by the
				// µs passed.
				assert.Equal(t, want.Remaining, got.Remaining, msg)
			}
			require.Equal(t, len(wantParts), len(gotParts), msg)
			for j := range wantParts {
				assert.Equal(t, wantParts[j].Allowed, gotParts[j].Allowed, "%s: part %d", msg, j)
				assert.Equal(t, wantParts[j].Remaining, gotParts[j].Remaining, "%s: part %d", msg, j)
			}
		}
	}
}
