package ratelimit

import (
	"context"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counterAdjuster is a sliding counter under test, with the functions that
// move the time it sees, read it, and turn a time it saw into one for
// TakenAt (on Redis, the age of a TakenAt is reckoned from the time the
// process reads, not the server's).
type counterAdjuster struct {
	name    string
	a       Adjuster
	advance func(time.Duration)
	now     func() time.Time
	takenAt func(time.Time) AdjustOption
}

// counterAdjusters returns a SlidingCounter and a RedisSlidingCounter on
// miniredis of limit per window, built with opts, both at epoch.
func counterAdjusters(t *testing.T, limit int, window time.Duration, opts ...Option) []counterAdjuster {
	clock := ratelimittest.NewClock(epoch)
	local, err := NewSlidingCounter(limit, window, append(opts[:len(opts):len(opts)], WithClock(clock))...)
	require.NoError(t, err)
	_, client, advance := miniredisClock(t)
	remote, err := NewRedisSlidingCounter(client, limit, window, redisOpts(opts)...)
	require.NoError(t, err)
	now := epoch
	return []counterAdjuster{
		{"SlidingCounter", local, clock.Advance, clock.Now, TakenAt},
		{"RedisSlidingCounter", remote, func(d time.Duration) { now = now.Add(d); advance(d) }, func() time.Time { return now },
			func(at time.Time) AdjustOption { return TakenAt(time.Now().Add(at.Sub(now))) }},
	}
}

func TestSlidingCounterRefundGoesBackOnlyToTheWindowThatTookIt(t *testing.T) {
	ctx := context.Background()
	for _, x := range counterAdjusters(t, 10, 10*time.Second) {
		t.Run(x.name, func(t *testing.T) {
			takenPrev := x.now()
			_, err := x.a.Allow(ctx, "k", 4)
			require.NoError(t, err)
			x.advance(10 * time.Second) // the window moves on: prev 4
			takenCur := x.now()
			_, err = x.a.Allow(ctx, "k", 2)
			require.NoError(t, err)
			x.advance(5 * time.Second) // prev weighs ⌈4 × 5/10⌉ = 2

			res, err := x.a.Refund(ctx, "k", 1, x.takenAt(takenCur.Add(time.Millisecond)))
			require.NoError(t, err)
			assert.Equal(t, ok(10, 10-1-2, 15*time.Second), res, "to the window open now")
			res, err = x.a.Refund(ctx, "k", 2, x.takenAt(takenPrev.Add(time.Millisecond)))
			require.NoError(t, err)
			assert.Equal(t, ok(10, 10-1-1, 15*time.Second), res, "to the previous window: prev 2 weighs 1")
			res, err = x.a.Refund(ctx, "k", 5, x.takenAt(takenPrev.Add(-time.Second)))
			require.NoError(t, err)
			assert.Equal(t, ok(10, 8, 15*time.Second), res, "to no window: it was taken before both")
			res, err = x.a.Refund(ctx, "k", 5)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 9, 5*time.Second), res, "without TakenAt, to the window open now, never below 0")
			res, err = x.a.Refund(ctx, "k", 2, x.takenAt(takenPrev.Add(time.Millisecond)))
			require.NoError(t, err)
			assert.Equal(t, ok(10, 10, 0), res, "the key holds nothing")
			res, err = x.a.Allow(ctx, "k", 10)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 20*time.Second), res, "a new window opens at the next counted request")
		})
	}
}

func TestSlidingCounterSettleCountsAtOnceWithinTheDebtBound(t *testing.T) {
	ctx := context.Background()
	for _, x := range counterAdjusters(t, 10, 10*time.Second, WithMaxDebt(1)) {
		t.Run(x.name, func(t *testing.T) {
			res, err := x.a.Settle(ctx, "k", 0, 4)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 6, 20*time.Second), res, "a Settle opens a window")
			res, err = x.a.Settle(ctx, "k", 4, 100)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 20*time.Second), res, "in debt, at most 2 limits counted")
			res, err = x.a.Allow(ctx, "k", 1)
			require.NoError(t, err)
			assert.False(t, res.Allowed)
			x.advance(10 * time.Second)
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 10*time.Second), res, "20 units weigh 20 in the next window")
			res, err = x.a.Settle(ctx, "k", 10, 0)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 10*time.Second), res, "a refund without TakenAt goes to the window open now, which holds none")
			require.NoError(t, x.a.Reset(ctx, "k"))
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(10, 10, 0), res, "Reset forgets the key")
		})
	}
}

func TestSlidingCountersDecideLargeNumbersAlike(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 6))
	ctx := context.Background()
	for round := 0; round < sized(40, 200); round++ {
		L := maxRedisLimit - r.IntN(1000)
		if round%2 == 1 {
			L = 1 + r.IntN(maxRedisLimit)
		}
		W := time.Duration(1+r.Int64N(1<<51/1000)) * time.Millisecond
		if round%4 == 0 {
			W = (1 << 51 / 1000) * time.Millisecond
		}
		prev, cur := r.Int64N(int64(L)+1), r.Int64N(int64(L)+1)
		e := time.Duration(r.Int64N(int64(W/time.Microsecond))) * time.Microsecond
		n := 1 + r.IntN(L)
		var got [2]Result
		for i, x := range counterAdjusters(t, L, W, WithMaxDebt(UnboundedDebt)) {
			// prev in the window before, cur in the window open now.
			_, err := x.a.Settle(ctx, "k", 0, int(prev))
			require.NoError(t, err)
			x.advance(W)
			_, err = x.a.Settle(ctx, "k", 0, int(cur))
			require.NoError(t, err)
			x.advance(e)
			got[i], err = x.a.Allow(ctx, "k", n)
			require.NoError(t, err)
		}
		msg := []any{"round %d: L %d, W %v, prev %d, cur %d, e %v, n %d", round, L, W, prev, cur, e, n}
		// The estimate, exactly.
		num := new(big.Int).Mul(big.NewInt(prev), big.NewInt(int64(W-e)))
		num.Add(num, big.NewInt(int64(W)-1))
		estimate := cur + num.Quo(num, big.NewInt(int64(W))).Int64()
		if prev == 0 && cur == 0 {
			estimate = 0
		}
		local, remote := got[0], got[1]
		assert.Equal(t, estimate+int64(n) <= int64(L), local.Allowed, msg...)
		if local.Allowed {
			assert.Equal(t, max(int64(L)-estimate-int64(n), 0), int64(local.Remaining), msg...)
		} else {
			assert.Equal(t, max(int64(L)-estimate, 0), int64(local.Remaining), msg...)
		}
		local.RetryAfter = (local.RetryAfter + time.Microsecond - 1).Truncate(time.Microsecond)
		assert.Equal(t, local, remote, msg...)
	}
}
