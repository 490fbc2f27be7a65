package ratelimit

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNewTokenBucketRejectsBadConfig(t *testing.T) {
	cases := []struct {
		name  string
		rate  Rate
		burst int
		opts  []Option
		want  string
	}{
		{"zero burst", PerSecond(1), 0, nil, "burst 0 must be > 0"},
		{"negative burst", PerSecond(1), -3, nil, "burst -3 must be > 0"},
		{"zero Rate", Rate{}, 1, nil, "the rate is the zero Rate"},
		{"zero units", PerSecond(0), 1, nil, "rate 0/s: units 0 must be > 0"},
		{"negative units", PerMinute(-2), 1, nil, "rate -2/min: units -2 must be > 0"},
		{"zero period", Per(1, 0), 1, nil, "rate 1/0s: period 0s must be > 0"},
		{"negative period", Every(-time.Second), 1, nil, "rate 1/-1s: period -1s must be > 0"},
		{"faster than 1 ns per token", PerSecond(2e9), 1, nil, "rate 2000000000/s gives less than one clock unit (1ns) per token"},
		{"fill time overflows", PerSecond(1), 1 << 62, nil, "overflows"},
		{"one token overflows", Every(math.MaxInt64), 1, nil, "is so slow that one token overflows the clock"},
		{"nil clock", PerSecond(1), 1, []Option{WithClock(nil)}, "nil clock"},
		{"typed nil clock", PerSecond(1), 1, []Option{WithClock((*ratelimittest.Clock)(nil))}, "nil clock"},
		{"nil option", PerSecond(1), 1, []Option{nil}, "option 0 is nil"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewTokenBucket(tc.rate, tc.burst, tc.opts...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, l)
		})
	}
}

func TestNewGCRARejectsBadConfig(t *testing.T) {
	cases := []struct {
		name   string
		limit  int
		period time.Duration
		want   string
	}{
		{"zero limit", 0, time.Second, "limit 0"},
		{"zero period", 1, 0, "period 0"},
		{"negative period", 1, -time.Second, "period -1s"},
		{"under 1 ns per request", 3, 2, "under one clock unit"},
		{"fill time overflows", 1 << 40, 1 << 62, "overflows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewGCRA(tc.limit, tc.period)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, l)
		})
	}
}

func TestTokenBucketRoundsRateToWholeNanoseconds(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	// 3 tokens/s is 333333333.3 ns per token, rounded to 333333333 ns.
	l, err := NewTokenBucket(PerSecond(3), 1, WithClock(clock))
	require.NoError(t, err)
	assert.Equal(t, 333333333*time.Nanosecond, l.Policy().Window, "the time from empty to full")
	_, err = l.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	res, err := l.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.Equal(t, 333333333*time.Nanosecond, res.RetryAfter)
}

func TestRetryAfterIsExactToTheNanosecond(t *testing.T) {
	// 7 tokens/s is 142857142.86 ns per token, rounded to 142857143 ns.
	clock := ratelimittest.NewClock(epoch)
	l, err := NewTokenBucket(PerSecond(7), 4, WithClock(clock))
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.Allow(ctx, "k", 4)
	require.NoError(t, err)
	clock.Advance(12345)
	for n := 1; n <= 4; n++ {
		denied, err := l.Allow(ctx, "k", n)
		require.NoError(t, err)
		require.False(t, denied.Allowed)
		clock.Advance(denied.RetryAfter - 1)
		still, err := l.Allow(ctx, "k", n)
		require.NoError(t, err)
		assert.False(t, still.Allowed, "n=%d: denied 1 ns before RetryAfter", n)
		assert.Equal(t, time.Duration(1), still.RetryAfter)
		clock.Advance(1)
		allowed, err := l.Allow(ctx, "k", n)
		require.NoError(t, err)
		assert.True(t, allowed.Allowed, "n=%d: allowed at RetryAfter", n)
		// ResetAfter is exact: the bucket is full then, and not 1 ns before.
		clock.Advance(allowed.ResetAfter - 1)
		notFull, err := l.Allow(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, 3, notFull.Remaining)
		clock.Advance(1)
		full, err := l.Allow(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: true, Limit: 4, Remaining: 4}, full)
		_, err = l.Allow(ctx, "k", 4)
		require.NoError(t, err)
	}
}

func TestTokenBucketRequestEvery300msStaysExactOverLongRuns(t *testing.T) {
	// Capacity 5, 2 tokens/s, one request every 0.3 s: after the first
	// eleven, the bucket gains 0.6 tokens a request, so from request 11 on
	// denials and grants alternate as 0.6·k crosses whole numbers — exactly,
	// however long it runs: a million requests under -soak, 200,000
	// without.
	t.Parallel()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewTokenBucket(PerSecond(2), 5, WithClock(clock))
	require.NoError(t, err)
	var allowed int
	requests := sized(200_000, 1_000_000)
	for i := 0; i < requests; i++ {
		res, err := l.Allow(context.Background(), "k", 1)
		require.NoError(t, err)
		if res.Allowed {
			allowed++
		}
		clock.Advance(300 * time.Millisecond)
	}
	// Tokens available over the run: 5 at the start plus 2/s for
	// (requests-1)·0.3 s, of which whole ones were taken.
	want := 5 + (requests-1)*3/5
	assert.Equal(t, want, allowed)
}

func TestConcurrentCallersOnOneKeyGetExactlyCapacity(t *testing.T) {
	clock := ratelimittest.NewClock(epoch) // frozen: no refill during the test
	const capacity = 1000
	l, err := NewTokenBucket(PerSecond(1), capacity, WithClock(clock))
	require.NoError(t, err)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				res, err := l.Allow(context.Background(), "shared", 1)
				if err == nil && res.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int64(capacity), allowed.Load())
}

func TestMemoryIsBoundedByActiveKeys(t *testing.T) {
	t.Parallel()
	perPhase := sized(100_000, 1_000_000) // over 1500 keys a shard, 15000 under -soak
	clock := ratelimittest.NewClock(epoch)
	l, err := NewTokenBucket(PerSecond(10), 10, WithClock(clock)) // full again 1 s after use
	require.NoError(t, err)
	ctx := context.Background()
	keys := make([]string, 2*perPhase)
	for i := range keys {
		keys[i] = "user:" + strconv.Itoa(i)
	}
	for _, k := range keys[:perPhase] {
		_, err := l.Allow(ctx, k, 1)
		require.NoError(t, err)
	}
	assert.Equal(t, perPhase, l.tats.len())

	clock.Advance(2 * time.Second) // every bucket of the first phase is full
	for _, k := range keys[perPhase:] {
		_, err := l.Allow(ctx, k, 1)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, l.tats.len(), perPhase, "keys held after the second phase")

	clock.Advance(2 * time.Second)
	// Touching each shard once (a peek on a handful of keys) lets it drop
	// what has refilled.
	for _, k := range keys[:1000] {
		_, err := l.Allow(ctx, k, 0)
		require.NoError(t, err)
	}
	assert.Equal(t, 0, l.tats.len())
}

func TestPeekCreatesNoKey(t *testing.T) {
	l, err := NewTokenBucket(PerSecond(1), 3, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		_, err := l.Allow(context.Background(), strconv.Itoa(i), 0)
		require.NoError(t, err)
	}
	assert.Equal(t, 0, l.tats.len())
}

func TestSystemClockIsMonotonic(t *testing.T) {
	// Readings with a monotonic part make the limiter's time.Time.Sub
	// immune to wall-clock jumps.
	assert.Contains(t, systemClock{}.Now().String(), "m=+")
	l, err := NewTokenBucket(PerSecond(1), 1)
	require.NoError(t, err)
	assert.True(t, strings.Contains(l.base.start.String(), "m=+"), "start carries a monotonic reading")
	assert.True(t, l.base.system, "the system clock is read through time.Since")
}

// On the system clock, clockBase reads the monotonic clock alone; what it
// measures must be what Now().Sub measures.
func TestClockBaseOnTheSystemClock(t *testing.T) {
	b := newClockBase(systemClock{})
	before := int64(time.Since(b.start))
	got := b.elapsed()
	after := int64(systemClock{}.Now().Sub(b.start))
	assert.LessOrEqual(t, before, got)
	assert.LessOrEqual(t, got, after)

	fake := ratelimittest.NewClock(epoch)
	fb := newClockBase(fake)
	assert.False(t, fb.system)
	fake.Advance(1500 * time.Millisecond)
	assert.Equal(t, int64(1500*time.Millisecond), fb.elapsed())
}
