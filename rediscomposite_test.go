package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// perSecondAndPerMinute returns a Redis Composite of a token bucket of 10
// refilling 10 a second ("per-second") and a fixed window of 3 a minute
// ("per-minute") on client.
func perSecondAndPerMinute(t *testing.T, client redis.Scripter, opts ...Option) *Composite {
	t.Helper()
	bucket, err := NewRedisTokenBucket(client, PerSecond(10), 10, redisOpts(opts)...)
	require.NoError(t, err)
	window, err := NewRedisFixedWindow(client, 3, time.Minute, redisOpts(opts)...)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "per-second", Limiter: bucket}, Part{Name: "per-minute", Limiter: window})
	require.NoError(t, err)
	return c
}

func TestRedisCompositeTakesFromEveryPartOrNone(t *testing.T) {
	_, client, _ := miniredisClock(t)
	c := perSecondAndPerMinute(t, client)
	ctx := context.Background()
	for i := range 3 {
		res, err := c.Allow(ctx, "alice", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed, "call %d", i)
	}
	d, err := c.Decide(ctx, "alice", 1)
	require.NoError(t, err)
	assert.Equal(t, 1, d.PolicyIndex, "the window denies")
	assert.Equal(t, "per-minute", d.Policy.Name)
	assert.Equal(t, Result{Limit: 3, Remaining: 0, RetryAfter: time.Minute, ResetAfter: time.Minute}, d.Result)
	_, parts, err := decideParts(ctx, c, "alice", 0)
	require.NoError(t, err)
	assert.Equal(t, 7, parts[0].Remaining, "the bucket lost nothing to the denial")
}

func TestRedisSettleIntoDebtThenRefundThenReset(t *testing.T) {
	_, client, advance := miniredisClock(t)
	ctx := context.Background()
	b, err := NewRedisTokenBucket(client, PerSecond(1), 10, WithMaxDebt(UnboundedDebt)) // 1 token a second
	require.NoError(t, err)
	res, err := b.Allow(ctx, "k", 5)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	res, err = b.Settle(ctx, "k", 5, 25)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 25 * time.Second}, res, "15 in debt")
	res, err = b.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Result{Limit: 10, RetryAfter: 16 * time.Second, ResetAfter: 25 * time.Second}, res)
	res, err = b.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "a peek in debt")
	advance(16 * time.Second)
	res, err = b.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 10 * time.Second}, res)
	res, err = b.Refund(ctx, "k", 4)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 10, Remaining: 4, ResetAfter: 6 * time.Second}, res)
	require.NoError(t, b.Reset(ctx, "k"))
	res, err = b.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 10, Remaining: 10}, res)
}

func TestRedisSettleWithATokenAppliesOnce(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	c := perSecondAndPerMinute(t, client)
	// 3 taken: the bucket at 7, the window at 0. Refunded 1 once, they are
	// at 8 and 1; had the retry applied too, they would be at 9 and 2.
	_, err := c.Allow(ctx, "bob", 3)
	require.NoError(t, err)
	first, err := c.Refund(ctx, "bob", 1, WithToken("req-1"))
	require.NoError(t, err)
	again, err := c.Refund(ctx, "bob", 1, WithToken("req-1"))
	require.NoError(t, err)
	assert.Equal(t, first, again)
	_, parts, err := decideParts(ctx, c, "bob", 0)
	require.NoError(t, err)
	assert.Equal(t, 8, parts[0].Remaining)
	assert.Equal(t, 1, parts[1].Remaining)
	assert.True(t, m.Exists("ratelimit:settled:28:ratelimit:tb:10:100000:{bob}:req-1"), m.Keys())
}

func TestRedisFixedWindowRefundsOnlyIntoTheWindowThatTookThem(t *testing.T) {
	_, client, advance := miniredisClock(t)
	ctx := context.Background()
	w, err := NewRedisFixedWindow(client, 3, time.Minute)
	require.NoError(t, err)
	takenAt := time.Now()
	_, err = w.Allow(ctx, "k", 2)
	require.NoError(t, err)
	advance(time.Minute) // that window ends
	_, err = w.Allow(ctx, "k", 1)
	require.NoError(t, err)
	res, err := w.Refund(ctx, "k", 2, TakenAt(takenAt.Add(-time.Hour)))
	require.NoError(t, err)
	assert.Equal(t, 2, res.Remaining, "nothing given back to a later window")
	res, err = w.Refund(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 3, Remaining: 3}, res, "refunded to 0, the window ends")
}

func TestRedisCompositePerCallPartCountsCallsNotUnits(t *testing.T) {
	_, client, _ := miniredisClock(t)
	ctx := context.Background()
	requests, err := NewRedisFixedWindow(client, 2, time.Minute)
	require.NoError(t, err)
	tokens, err := NewRedisTokenBucket(client, PerMinute(1000), 1000)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "requests", Limiter: requests, PerCall: true}, Part{Name: "tokens", Limiter: tokens})
	require.NoError(t, err)

	_, parts, err := decideParts(ctx, c, "key", 300)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 700}, []int{parts[0].Remaining, parts[1].Remaining}, "one call, 300 tokens")
	_, err = c.Settle(ctx, "key", 300, 120)
	require.NoError(t, err)
	_, parts, err = decideParts(ctx, c, "key", 0)
	require.NoError(t, err)
	assert.Equal(t, []int{1, 880}, []int{parts[0].Remaining, parts[1].Remaining}, "a settle leaves the call counted")
	_, err = c.Refund(ctx, "key", 120)
	require.NoError(t, err)
	_, parts, err = decideParts(ctx, c, "key", 0)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 1000}, []int{parts[0].Remaining, parts[1].Remaining}, "a refund gives the call back too")
	res, err := c.Allow(ctx, "key", 1000)
	require.NoError(t, err, "n is checked against the unit parts' limits only")
	assert.True(t, res.Allowed)
}

// limiterFunc is a Limiter of a type that cannot be compared.
type limiterFunc func(ctx context.Context, key string, n int) (Result, error)

func (f limiterFunc) Allow(ctx context.Context, key string, n int) (Result, error) {
	return f(ctx, key, n)
}

func TestNewCompositeRefusesForeignLimitersWithoutPanicking(t *testing.T) {
	f := limiterFunc(func(context.Context, string, int) (Result, error) { return Result{}, nil })
	_, err := NewComposite(Part{Name: "a", Limiter: f}, Part{Name: "b", Limiter: f})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

func TestFixedWindowsRefuseARefundTakenLongAgoAlike(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	onRedis, err := NewRedisFixedWindow(client, 10, time.Minute)
	require.NoError(t, err)
	inProcess, err := NewFixedWindow(10, time.Minute, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	for _, w := range []Adjuster{onRedis, inProcess} {
		_, err := w.Allow(ctx, "k", 5)
		require.NoError(t, err)
		res, err := w.Refund(ctx, "k", 5, TakenAt(time.Time{}))
		require.NoError(t, err)
		assert.Equal(t, 5, res.Remaining, "%T: units taken before the window opened are not given back to it", w)
	}
}
