package ratelimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlidingCountersAcrossAChangeOfWindowDecideAlike changes the policy a
// PolicyFunc gives every key, its window among it, at random times of one
// schedule: the in-process and Redis counters decide alike (the in-process
// RetryAfter rounded up to a whole µs), each key counting apart in each
// window, and keeping its state in a window it comes back to until that
// state's expiry.
func TestSlidingCountersAcrossAChangeOfWindowDecideAlike(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 9))
	ctx := context.Background()
	for round := 0; round < sized(3, 30); round++ {
		policy := Policy{Limit: 5, Window: time.Second}
		byKey := PolicyFunc(func(context.Context, string) (Policy, error) { return policy, nil })
		clock := ratelimittest.NewClock(epoch)
		local, err := NewSlidingCounter(3, time.Hour, WithClock(clock), WithPolicyFunc(byKey))
		require.NoError(t, err)
		_, client, advance := miniredisClock(t)
		remote, err := NewRedisSlidingCounter(client, 3, time.Hour, WithPolicyFunc(byKey))
		require.NoError(t, err)
		for i, c := range randomSchedule(r, 300, 5, 200*time.Millisecond, false, "a", "b") {
			if r.IntN(10) == 0 {
				policy = Policy{Limit: 1 + r.IntN(8), Window: time.Duration(1+r.IntN(3000)) * time.Millisecond}
			}
			c.advance = c.advance.Truncate(time.Microsecond)
			clock.Advance(c.advance)
			advance(c.advance)
			n := min(c.n, policy.Limit)
			want, err := local.Allow(ctx, c.key, n)
			require.NoError(t, err)
			got, err := remote.Allow(ctx, c.key, n)
			require.NoError(t, err)
			want.RetryAfter = (want.RetryAfter + time.Microsecond - 1).Truncate(time.Microsecond)
			require.Equal(t, want, got, "round %d step %d: %+v under %+v", round, i, c, policy)
		}
	}
}

// TestSlidingCounterCountsApartInEachWindow: a key's counts are of windows
// of one length, so a key whose policy gives it another window counts
// apart in it, and finds its counts of a window it comes back to, until
// they expire; in process and on Redis alike.
func TestSlidingCounterCountsApartInEachWindow(t *testing.T) {
	ctx := context.Background()
	policy := Policy{Limit: 4, Window: 10 * time.Second}
	byKey := PolicyFunc(func(context.Context, string) (Policy, error) { return policy, nil })
	for _, x := range counterAdjusters(t, 3, time.Hour, WithPolicyFunc(byKey)) {
		t.Run(x.name, func(t *testing.T) {
			policy = Policy{Limit: 4, Window: 10 * time.Second}
			_, err := x.a.Allow(ctx, "k", 4)
			require.NoError(t, err)
			x.advance(5 * time.Second)
			policy.Window = 20 * time.Second
			res, err := x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 4, 0), res, "in windows of 20 s the key has counted nothing")
			_, err = x.a.Allow(ctx, "k", 1)
			require.NoError(t, err)
			policy.Window = 10 * time.Second
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 0, 15*time.Second), res, "back in windows of 10 s: its 4, until 2 windows after they opened")
			x.advance(15 * time.Second)
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 4, 0), res, "two windows of 10 s have passed: it holds nothing in them")
			policy.Window = 20 * time.Second
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 3, 25*time.Second), res, "its unit in windows of 20 s, counted 15 s ago, weighs until 40 s after")
			require.NoError(t, x.a.Reset(ctx, "k"))
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 4, 0), res, "a Reset forgets the key in the window of its policy now")
		})
	}
}
