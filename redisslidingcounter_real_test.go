package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRealRedisSlidingCounterDecidesAsInProcess puts random states, large
// numbers among them, on a real server's keys (as the script writes them,
// anchored at the server's TIME) and on in-process counters (through their
// Settles), then decides a cost on both at the same time: the server's
// time of the decision is read off its ResetAfter (the reset time of the
// state, known, less now), and the in-process counter decides at that µs. The
// Results are equal, the in-process RetryAfter rounded up to a whole µs.
func TestRealRedisSlidingCounterDecidesAsInProcess(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(24, 7))
	for round := 0; round < sized(200, 2000); round++ {
		L := 1 + r.IntN(20)
		W := time.Duration(1000+r.Int64N(3_600_000)) * time.Millisecond
		if round%2 == 1 {
			L = maxRedisLimit - r.IntN(1000)
			W = time.Duration(1000+r.Int64N(1<<51/1000-1000)) * time.Millisecond
		}
		w := int64(W / time.Microsecond)
		prev, cur := r.Int64N(int64(L)+1), r.Int64N(int64(L)+1)
		if prev+cur == 0 {
			cur = 1
		}
		n := 1 + r.IntN(L)

		remote, err := NewRedisSlidingCounter(client, L, W, WithKeyPrefix("sc:"+strconv.Itoa(round)+":"))
		require.NoError(t, err)
		now, err := client.Time(ctx).Result()
		require.NoError(t, err)
		// At least 500 ms left in the window, for the round trip, and a
		// start after 1970.
		start := now.UnixMicro() - r.Int64N(min(w-500_000, now.UnixMicro()))
		require.NoError(t, client.Set(ctx, storedKey(remote.KeyPrefix(), "k"), fmtCounter(start, start+2*w, prev, cur), 2*W).Err())
		got, err := remote.Allow(ctx, "k", n)
		require.NoError(t, err, fmtCounter(start, start+2*w, prev, cur))
		reset := start + w
		if cur > 0 || got.Allowed {
			reset += w
		}
		decided := reset - int64(got.ResetAfter/time.Microsecond)
		require.GreaterOrEqual(t, decided, now.UnixMicro(), "round %d: %+v", round, got)
		require.Less(t, decided, start+w, "round %d: decided in the window", round)

		clock := ratelimittest.NewClock(time.UnixMicro(start - w))
		local, err := NewSlidingCounter(L, W, WithClock(clock), WithMaxDebt(UnboundedDebt))
		require.NoError(t, err)
		_, err = local.Settle(ctx, "k", 0, int(prev))
		require.NoError(t, err)
		clock.Set(time.UnixMicro(start))
		_, err = local.Settle(ctx, "k", 0, int(cur))
		require.NoError(t, err)
		clock.Set(time.UnixMicro(decided))
		want, err := local.Allow(ctx, "k", n)
		require.NoError(t, err)
		want.RetryAfter = (want.RetryAfter + time.Microsecond - 1).Truncate(time.Microsecond)
		require.Equal(t, want, got, "round %d: L %d, W %v, prev %d, cur %d, e %dµs, n %d", round, L, W, prev, cur, decided-start, n)
	}
}

func TestRealRedisSlidingCounterKeepsEveryDigit(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	l, err := NewRedisSlidingCounter(client, 5, 5*time.Second)
	require.NoError(t, err)
	res, err := l.Allow(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: 10 * time.Second}, res)
	now, err := client.Time(ctx).Result()
	require.NoError(t, err)
	v, err := client.Get(ctx, storedKey(l.KeyPrefix(), "k")).Result()
	require.NoError(t, err)
	fields := strings.Split(v, ":")
	require.Len(t, fields, 4, v)
	start, err := strconv.ParseInt(fields[0], 10, 64)
	require.NoError(t, err, v)
	assert.Len(t, fields[0], 16, "every digit of the server's µs")
	assert.InDelta(t, now.UnixMicro(), start, float64(time.Second/time.Microsecond))
	assert.Equal(t, strconv.FormatInt(start+10_000_000, 10), fields[1])
	assert.Equal(t, []string{"0", "3"}, fields[2:])
	ttl, err := client.PTTL(ctx, storedKey(l.KeyPrefix(), "k")).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, 10*time.Second)
	assert.Greater(t, ttl, 9*time.Second)
}
