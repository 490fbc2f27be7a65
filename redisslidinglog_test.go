package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// logStream is the random stream of the sliding logs' differential tests:
// Allows, Refunds, Settles (without TakenAt, which a fake clock cannot
// give a Redis limiter) and Resets, time moving in whole µs, over limit
// units per window.
func logStream(limit int, window time.Duration) opStream {
	step := func(r *rand.Rand) time.Duration {
		if r.IntN(5) == 0 {
			return 0
		}
		return time.Duration(r.Int64N(int64(window)/int64(limit)*2 + 1)).Truncate(time.Microsecond)
	}
	return opStream{mix: opMix{allow: limit + 1, refund: limit + 1, taken: limit + 1, cost: 2*limit + 2}, step: step}
}

func TestRedisSlidingLogDecidesAsInProcessOnMiniredis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(24, 3))
	for round := 0; round < sized(2, 24); round++ {
		limit := 1 + r.IntN(12)
		window := time.Duration(1+r.Int64N(3000)) * time.Millisecond
		debt := []int{0, 1, 3, UnboundedDebt}[r.IntN(4)]
		clock := ratelimittest.NewClock(epoch)
		local, err := NewSlidingLog(limit, window, WithClock(clock), WithMaxDebt(debt))
		require.NoError(t, err)
		_, client, advance := miniredisClock(t)
		remote, err := NewRedisSlidingLog(client, limit, window, WithMaxDebt(debt))
		require.NoError(t, err)
		for i, op := range logStream(limit, window).ops(r, 300, "a", "b", "c") {
			clock.Advance(op.advance)
			advance(op.advance)
			want, wantErr := op.apply(ctx, local)
			got, gotErr := op.apply(ctx, remote)
			msg := fmt.Sprintf("round %d step %d: %d per %v, debt %d: %v", round, i, limit, window, debt, op)
			require.Equal(t, wantErr == nil, gotErr == nil, "%s: %v / %v", msg, wantErr, gotErr)
			if !assert.Equal(t, want, got, msg) {
				return
			}
		}
	}
}

func TestRedisSlidingLogDecidesAsInProcessOnARealServer(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		checkLogAsInProcess(t, redistest.Shared(t).Client(t), "k")
	})
	t.Run("cluster", func(t *testing.T) {
		client := redistest.SharedCluster(t).Client(t)
		checkLogAsInProcess(t, client, "{a}1", "{b}2", "{c}3", "{d}4", "{e}5", "{f}6")
		for _, n := range masterSizes(t, client) {
			assert.Positive(t, n, "every master holds keys")
		}
	})
}

// checkLogAsInProcess runs random streams on a SlidingLog and a
// RedisSlidingLog through client, over keys: the window is days long, so
// the real time the run takes moves no unit out, and decisions and
// Remaining agree exactly, the waits within the real time the round has
// taken (the server's clock moves, the in-process one does not).
func checkLogAsInProcess(t *testing.T, client redis.Scripter, keys ...string) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(24, 4))
	const window = 10 * 24 * time.Hour
	for round, limit := range []int{1, 5, 40, 300} {
		local, err := NewSlidingLog(limit, window, WithClock(ratelimittest.NewClock(epoch)))
		require.NoError(t, err)
		remote, err := NewRedisSlidingLog(client, limit, window, WithKeyPrefix(fmt.Sprint("sl", round, ":")))
		require.NoError(t, err)
		stream := logStream(limit, window)
		stream.step = nil
		roundStart := time.Now()
		for i, op := range stream.ops(r, 400, keys...) {
			want, wantErr := op.apply(ctx, local)
			got, gotErr := op.apply(ctx, remote)
			msg := fmt.Sprintf("round %d step %d: %v", round, i, op)
			require.Equal(t, wantErr == nil, gotErr == nil, "%s: %v / %v", msg, wantErr, gotErr)
			assert.Equal(t, want.Allowed, got.Allowed, msg)
			assert.Equal(t, want.Remaining, got.Remaining, msg)
			// The server's clock has moved by the round's real time since
			// its first entry (plus a millisecond of rounding).
			moved := float64(time.Since(roundStart) + time.Millisecond)
			assert.InDelta(t, float64(want.RetryAfter), float64(got.RetryAfter), moved, msg)
			assert.InDelta(t, float64(want.ResetAfter), float64(got.ResetAfter), moved, msg)
			if op.kind == "allow" && got.Allowed && op.n > 0 {
				ttl, err := client.(redis.Cmdable).PTTL(ctx, storedKey(remote.KeyPrefix(), op.key)).Result()
				require.NoError(t, err)
				assert.InDelta(t, float64(window), float64(ttl), float64(time.Since(roundStart)+time.Millisecond), "%s: the key lives until its newest entry leaves", msg)
			}
		}
	}
}

func TestRedisSlidingLogKeyExpiresWhenItsNewestEntryLeaves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, client, advance := miniredisClock(t)
	l, err := NewRedisSlidingLog(client, 3, 10*time.Second)
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 1)
	require.NoError(t, err)
	advance(4*time.Second + 500*time.Microsecond)
	_, err = l.Allow(ctx, "k", 1)
	require.NoError(t, err)
	key := storedKey(l.KeyPrefix(), "k")
	// 10 s after the newest entry, rounded up to whole ms.
	assert.Equal(t, 10*time.Second, m.TTL(key))
	advance(10*time.Second - time.Millisecond)
	assert.True(t, m.Exists(key))
	advance(time.Millisecond)
	assert.False(t, m.Exists(key))
	res, err := l.Allow(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, ok(3, 0, 10*time.Second), res)
}

func TestRedisSlidingLogDropsEntriesThatLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, client, advance := miniredisClock(t)
	l, err := NewRedisSlidingLog(client, 3, 10*time.Second)
	require.NoError(t, err)
	for i := 0; i < 30; i++ {
		res, err := l.Allow(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, res.Allowed, "call %d", i)
		advance(4 * time.Second)
	}
	// At most the 3 entries of the window and the 5 fields of the header.
	fields, err := m.HKeys(storedKey(l.KeyPrefix(), "k"))
	require.NoError(t, err)
	assert.LessOrEqual(t, len(fields), 8)
}

func TestRedisSlidingLogRefusesStateThatIsNotItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	now := fmt.Sprint(epoch.UnixMicro())
	later := fmt.Sprint(epoch.UnixMicro() + 1)
	for _, c := range []struct {
		name  string
		write func(m *miniredis.Miniredis, key string)
	}{
		{"a STRING", func(m *miniredis.Miniredis, key string) {
			_ = m.Set(key, "3")
		}},
		{"a HASH of other fields", func(m *miniredis.Miniredis, key string) {
			m.HSet(key, "tat", now)
		}},
		{"a head after the tail", func(m *miniredis.Miniredis, key string) {
			m.HSet(key, "n", "2", "h", "2", "t", "1", "a", now, "z", now, "1", now, "2", now)
		}},
		{"more entries than units", func(m *miniredis.Miniredis, key string) {
			m.HSet(key, "n", "1", "h", "1", "t", "2", "a", now, "z", later, "1", now, "2", later)
		}},
		{"entries that do not sum to n", func(m *miniredis.Miniredis, key string) {
			m.HSet(key, "n", "3", "h", "1", "t", "2", "a", now, "z", later, "1", now, "2", later)
		}},
		{"a missing entry", func(m *miniredis.Miniredis, key string) {
			m.HSet(key, "n", "3", "h", "1", "t", "2", "a", now, "z", later, "1", now+":2")
		}},
		{"a stray field", func(m *miniredis.Miniredis, key string) {
			m.HSet(key, "n", "3", "h", "1", "t", "2", "a", now, "z", later, "1", now+":2", "2", later, "x", "1")
		}},
		{"times out of order", func(m *miniredis.Miniredis, key string) {
			m.HSet(key, "n", "3", "h", "1", "t", "3", "a", now, "z", later, "1", now, "2", later, "3", now)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, client, _ := miniredisClock(t)
			l, err := NewRedisSlidingLog(client, 3, time.Minute)
			require.NoError(t, err)
			key := storedKey(l.KeyPrefix(), "k")
			c.write(m, key)
			before := m.Dump()
			// A denial of 3 reads every entry, and finds what a call that
			// reads the header alone may not; a Refund reads the entries
			// it gives back to, and so finds all but a wrong sum.
			_, err = l.Allow(ctx, "k", 3)
			require.ErrorIs(t, err, ErrCorruptState)
			assert.Contains(t, err.Error(), KeyDigest("k"))
			if c.name != "entries that do not sum to n" {
				_, err = l.Refund(ctx, "k", 1)
				require.ErrorIs(t, err, ErrCorruptState)
			}
			assert.Equal(t, before, m.Dump(), "the key is left as it was")
		})
	}
}

func TestRedisSlidingLogRefundsOnlyUnitsStillInTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, client, advance := miniredisClock(t)
	l, err := NewRedisSlidingLog(client, 5, 10*time.Second)
	require.NoError(t, err)
	_, err = l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	advance(4 * time.Second)
	_, err = l.Allow(ctx, "k", 3)
	require.NoError(t, err)
	advance(6 * time.Second) // the 2 of 0 s have left
	res, err := l.Refund(ctx, "k", 5)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 5, 0), res)
	// TakenAt an hour ago: older than every entry.
	_, err = l.Allow(ctx, "k", 4)
	require.NoError(t, err)
	res, err = l.Refund(ctx, "k", 4, TakenAt(time.Now().Add(-time.Hour)))
	require.NoError(t, err)
	assert.Equal(t, ok(5, 1, 10*time.Second), res)
	require.NoError(t, l.Reset(ctx, "k"))
	res, err = l.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(5, 5, 0), res)
}

func TestRedisSlidingLogRefusesLimitsAboveTheBound(t *testing.T) {
	t.Parallel()
	_, client, _ := miniredisClock(t)
	_, err := NewRedisSlidingLog(client, MaxSlidingLogLimit+1, time.Minute)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "MaxSlidingLogLimit")
	_, err = NewRedisSlidingLog(client, 10, time.Minute+time.Microsecond)
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewRedisSlidingLog(nil, 10, time.Minute)
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewRedisSlidingLog(client, 10, time.Minute, WithClock(ratelimittest.NewClock(epoch)))
	require.ErrorIs(t, err, ErrInvalidConfig)
	l, err := NewRedisSlidingLog(client, 10, time.Minute, WithPolicyFunc(everyKey(MaxSlidingLogLimit+1, time.Minute)))
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k", 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Equal(t, slidingLogPrefix+"keyed:10:60000:", l.KeyPrefix(), "built WithPolicyFunc: its constructor's policy")
	l, err = NewRedisSlidingLog(client, 100, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:sl:100:60000:", l.KeyPrefix())
	assert.Equal(t, Policy{Limit: 100, Window: time.Minute}, l.Policy())
}

func TestRedisSlidingLogRefundsWithTakenAtAsInProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(24, 6))
	const limit, window = 20, time.Minute
	for round := 0; round < sized(15, 60); round++ {
		clock := ratelimittest.NewClock(epoch)
		local, err := NewSlidingLog(limit, window, WithClock(clock))
		require.NoError(t, err)
		_, client, advance := miniredisClock(t)
		remote, err := NewRedisSlidingLog(client, limit, window)
		require.NoError(t, err)
		step := func(d time.Duration) {
			clock.Advance(d)
			advance(d)
		}
		both := func(msg string, call func(l Adjuster) (Result, error)) {
			want, err := call(local)
			require.NoError(t, err, msg)
			got, err := call(remote)
			require.NoError(t, err, msg)
			require.Equal(t, want, got, msg)
		}
		var now time.Duration
		for i := 0; i < 1+r.IntN(10); i++ {
			n := 1 + r.IntN(3)
			both(fmt.Sprintf("round %d: allow %d at %v", round, n, now), func(l Adjuster) (Result, error) { return l.Allow(ctx, "k", n) })
			step(time.Second)
			now += time.Second
		}
		// TakenAt half a second after a random entry (or before them all):
		// the server reads it as an age on the system clock.
		at := time.Duration(r.IntN(int(now/time.Second)+1))*time.Second - 500*time.Millisecond
		back := 1 + r.IntN(limit)
		msg := fmt.Sprintf("round %d: refund %d taken at %v, now %v", round, back, at, now)
		want, err := local.Refund(ctx, "k", back, TakenAt(epoch.Add(at)))
		require.NoError(t, err, msg)
		got, err := remote.Refund(ctx, "k", back, TakenAt(time.Now().Add(at-now)))
		require.NoError(t, err, msg)
		require.Equal(t, want, got, msg)
		// What is left, entry by entry: the waits of the largest call as
		// the entries leave.
		for j := 0; j < 12; j++ {
			both(fmt.Sprintf("%s; then %d", msg, j), func(l Adjuster) (Result, error) { return l.Allow(ctx, "k", limit) })
			both(fmt.Sprintf("%s; then %d", msg, j), func(l Adjuster) (Result, error) { return l.Allow(ctx, "k", 0) })
			step(5 * time.Second)
		}
	}
}
