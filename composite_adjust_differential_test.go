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
)

// compositeOp is one call of a random stream on a Composite: Allow,
// Refund, Settle or Reset of key, after the clock moves by advance.
type compositeOp struct {
	advance  time.Duration
	kind     string // "allow", "refund", "settle", "reset"
	key      string
	n, taken int
	cost     int
}

func (op compositeOp) String() string {
	return fmt.Sprintf("+%v %s(%q, n=%d, taken=%d, cost=%d)", op.advance, op.kind, op.key, op.n, op.taken, op.cost)
}

// randomCompositeOps returns steps calls over keys, with the clock moving by
// whole milliseconds (the unit of Redis expiry) when advance is true.
func randomCompositeOps(r *rand.Rand, steps int, advance bool, keys ...string) []compositeOp {
	ops := make([]compositeOp, steps)
	for i := range ops {
		op := compositeOp{key: keys[r.IntN(len(keys))]}
		if advance && r.IntN(3) == 0 {
			op.advance = time.Duration(r.IntN(3000)) * time.Millisecond
		}
		switch x := r.IntN(10); {
		case x < 5:
			op.kind, op.n = "allow", r.IntN(4)
		case x < 7:
			op.kind, op.n = "refund", r.IntN(4)
		case x < 9:
			op.kind, op.taken, op.cost = "settle", r.IntN(4), r.IntN(12)
		default:
			op.kind = "reset"
		}
		ops[i] = op
	}
	return ops
}

// apply makes op's call on c.
func (op compositeOp) apply(ctx context.Context, c *Composite) (Result, []Result, error) {
	switch op.kind {
	case "allow":
		return decideParts(ctx, c, op.key, op.n)
	case "refund":
		res, err := c.Refund(ctx, op.key, op.n)
		return res, nil, err
	case "settle":
		res, err := c.Settle(ctx, op.key, op.taken, op.cost)
		return res, nil, err
	default:
		return Result{}, nil, c.Reset(ctx, op.key)
	}
}

// tenantKey derives the tenant part's key: the user's without its last
// letter, so that "a1" and "a2" share tenant "tenant-a".
func tenantKey(key string) string { return "tenant-" + key[:len(key)-1] }

// limiters makes the limiters of the Composites below: a token bucket, a
// GCRA and a fixed window of limit per period, in process or on Redis.
type limiters struct {
	bucket, gcra, window func(limit int, period time.Duration) (Limiter, error)
}

// inProcessLimiters makes in-process limiters on clock.
func inProcessLimiters(clock Clock) limiters {
	return limiters{
		bucket: func(limit int, period time.Duration) (Limiter, error) {
			return NewTokenBucket(limit, float64(limit)/period.Seconds(), WithClock(clock))
		},
		gcra: func(limit int, period time.Duration) (Limiter, error) {
			return NewGCRA(limit, period, WithClock(clock))
		},
		window: func(limit int, period time.Duration) (Limiter, error) {
			return NewFixedWindow(limit, period, WithClock(clock))
		},
	}
}

// redisLimiters makes Redis limiters through client.
func redisLimiters(client redis.Scripter) limiters {
	return limiters{
		bucket: func(limit int, period time.Duration) (Limiter, error) {
			return NewRedisTokenBucket(client, limit, float64(limit)/period.Seconds())
		},
		gcra: func(limit int, period time.Duration) (Limiter, error) {
			return NewRedisGCRA(client, limit, period)
		},
		window: func(limit int, period time.Duration) (Limiter, error) {
			return NewRedisFixedWindow(client, limit, period)
		},
	}
}

// compositeOf returns a Composite of a token bucket of 5 per period, a GCRA
// of 8 per period on the tenant's key, a fixed window of 6 per period, and a
// GCRA of 4 calls per period, made by build.
func compositeOf(t *testing.T, period time.Duration, build limiters) *Composite {
	t.Helper()
	bucket, err := build.bucket(5, period)
	require.NoError(t, err)
	gcra, err := build.gcra(8, period)
	require.NoError(t, err)
	window, err := build.window(6, period)
	require.NoError(t, err)
	calls, err := build.gcra(4, period)
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
		clock := NewFakeClock(epoch)
		local := compositeOf(t, period, inProcessLimiters(clock))
		_, client, advance := miniredisClock(t)
		remote := compositeOf(t, period, redisLimiters(client))
		for i, op := range randomCompositeOps(r, 300, true, "a1", "a2", "b1") {
			clock.Advance(op.advance)
			advance(op.advance)
			want, wantParts, wantErr := op.apply(ctx, local)
			got, gotParts, gotErr := op.apply(ctx, remote)
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
		checkCompositeAdjustmentsAsInProcess(t, redistest.Start(t).Client(t))
	})
	t.Run("cluster", func(t *testing.T) {
		client := redistest.StartCluster(t, 3).Client(t)
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
		local := compositeOf(t, period, inProcessLimiters(NewFakeClock(epoch)))
		remote := compositeOf(t, period, redisLimiters(client))
		users := []string{fmt.Sprint("{a", round, "}x"), fmt.Sprint("{a", round, "}y"), fmt.Sprint("{b", round, "}x")}
		for i, op := range randomCompositeOps(r, 150, false, users...) {
			want, wantParts, wantErr := op.apply(ctx, local)
			got, gotParts, gotErr := op.apply(ctx, remote)
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
