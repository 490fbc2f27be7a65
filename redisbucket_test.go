package ratelimit

import (
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRedisTokenBucketMatchesInProcessOnRandomSchedules(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	steps := 0
	for round := 0; round < sized(3, 24); round++ {
		capacity := 1 + r.IntN(20)
		interval := time.Duration(1+r.Int64N(2_000_000)) * time.Microsecond // whole µs
		rate := Every(interval)
		_, client, advance := miniredisClock(t)
		remote, err := NewRedisTokenBucket(client, rate, capacity)
		require.NoError(t, err)
		clock := ratelimittest.NewClock(epoch)
		local, err := NewTokenBucket(rate, capacity, WithClock(clock))
		require.NoError(t, err)

		// Half the runs are on one key, for long runs of collisions. The
		// clock only moves forward: after a step back, a Redis bucket's
		// key owes the step, while an in-process one's time stands still
		// from the last call to its shard, so they may differ until the
		// clock catches up.
		keys := []string{"a", "b", "c", "d"}
		if round%2 == 0 {
			keys = keys[:1]
		}
		for i, c := range randomSchedule(r, 250, capacity, interval, false, keys...) {
			c.advance = c.advance.Truncate(time.Microsecond)
			clock.Advance(c.advance)
			advance(c.advance)
			want, wantErr := local.Allow(context.Background(), c.key, c.n)
			got, err := remote.Allow(context.Background(), c.key, c.n)
			require.Equal(t, wantErr == nil, err == nil, "round %d step %d: errors %v and %v", round, i, wantErr, err)
			require.Equal(t, want, got, "round %d step %d: capacity %d, interval %v, %+v", round, i, capacity, interval, c)
			steps++
		}
	}
	t.Logf("%d steps compared", steps)
}

func TestRedisTokenBucketPeekCreatesNoKey(t *testing.T) {
	m, client, _ := miniredisClock(t)
	l, err := NewRedisTokenBucket(client, PerSecond(1), 3)
	require.NoError(t, err)
	res, err := l.Allow(context.Background(), "k", 0)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 3, Remaining: 3}, res)
	assert.False(t, m.Exists(storedKey(l.KeyPrefix(), "k")))
	assert.Empty(t, m.Keys())
}

func TestRedisTokenBucketKeyAndTTL(t *testing.T) {
	m, client, _ := miniredisClock(t)
	l, err := NewRedisTokenBucket(client, PerSecond(3), 5, WithKeyPrefix("app:")) // 333333 µs per token
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "user:1", 2)
	require.NoError(t, err)
	assert.Equal(t, []string{"app:tb:{user:1}"}, m.Keys(), "the Redis key is the prefix, the state's name and the key in a hash tag")
	// 2 tokens are 666666 µs from full: 666.666 ms, rounded up.
	assert.Equal(t, 667*time.Millisecond, m.TTL("app:tb:{user:1}"))
	// Full again 2 tokens of 333333 µs after the server's time, in µs.
	fields, err := m.HKeys("app:tb:{user:1}")
	require.NoError(t, err)
	assert.Equal(t, []string{"tat"}, fields)
	assert.Equal(t, strconv.FormatInt(epoch.UnixMicro()+2*333333, 10), m.HGet("app:tb:{user:1}", "tat"))
}

func TestRedisTokenBucketRefusesABucketKeptAsCreditAndLastRefill(t *testing.T) {
	// A HASH of exactly credit and last_refill, the shape the bucket had
	// before it was kept as tat, which no release wrote, is not the
	// bucket's state: every call refuses it and leaves it as it is.
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	l, err := NewRedisTokenBucket(client, PerSecond(1), 5, WithKeyPrefix("app:")) // 1 s per token
	require.NoError(t, err)
	window, err := NewRedisFixedWindow(client, 10, time.Minute, WithKeyPrefix("win:"))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "bucket", Limiter: l}, Part{Name: "window", Limiter: window})
	require.NoError(t, err)
	now := epoch.UnixMicro()
	us := func(v int64) string { return strconv.FormatInt(v, 10) }
	for _, tc := range []struct {
		name   string
		credit string
		last   int64 // µs
	}{
		{"full", "2000000", now - 3_000_000},
		{"one token", "1000000", now},
		{"in debt", "-2000000", now},
		{"credit above full", "9000000", now - 1_000_000},
		{"last_refill ahead of the clock", "3000000", now + 2_000_000},
		{"last_refill far ahead of the clock", "0", now + 1<<52},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m.HSet("app:tb:{k}", "credit", tc.credit, "last_refill", us(tc.last))
			m.SetTTL("app:tb:{k}", time.Hour)
			before := snapshotKey(t, client, "app:tb:{k}")
			for _, n := range []int{1, 0} {
				res, err := l.Allow(ctx, "k", n)
				require.ErrorIs(t, err, ErrCorruptState, "n = %d", n)
				assert.Contains(t, err.Error(), `"app:tb:"+`+KeyDigest("k"), "the error names the key by its digest")
				assert.Equal(t, Result{Limit: 5}, res)
			}
			_, err := l.Refund(ctx, "k", 1)
			require.ErrorIs(t, err, ErrCorruptState, "a refund")
			res, err := c.Allow(ctx, "k", 1)
			require.ErrorIs(t, err, ErrCorruptState, "a Composite")
			assert.False(t, res.Allowed)
			requireUnchanged(t, client, "app:tb:{k}", before)
			assert.False(t, m.Exists("win:fw:{k}"), "the Composite's other part took nothing")
		})
	}
}

func TestRedisTokenBucketRefusesBadCostsWithoutARoundTrip(t *testing.T) {
	l, err := NewRedisTokenBucket(refusingScripter{t: t}, PerSecond(1), 3)
	require.NoError(t, err)
	res, err := l.Allow(context.Background(), "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
	assert.Equal(t, Result{Limit: 3}, res)
	res, err = l.Allow(context.Background(), "k", 4)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.Equal(t, Result{Limit: 3}, res)
}

func TestRedisTokenBucketRejectsMalformedReplies(t *testing.T) {
	boom := errors.New("connection reset")
	cases := []struct {
		name  string
		reply any
		err   error
	}{
		{"redis error", nil, boom},
		{"nil reply", nil, nil},
		{"an integer", int64(1), nil},
		{"an array of integers", []any{int64(1), int64(2), int64(0), int64(0)}, nil},
		{"an array of one record", []any{record(1, 2, 0, 0)}, nil},
		{"two records for one call", record(1, 2, 0, 0) + record(1, 2, 0, 0), nil},
		{"a record and a byte more", record(1, 2, 0, 0) + "\n", nil},
		{"a refusal of a second check the call does not have", refusalRecord(2, "not a HASH"), nil},
		{"a refusal longer than the reply", "\xff\x01\x00\x20not a HASH", nil},
		{"a refusal cut short", "\xff\x01", nil},
		{"empty", "", nil},
		{"a record cut short", record(1, 2, 0, 0)[:redisbatch.CheckSize-1], nil},
		{"the old text reply", "1 2 0 0", nil},
		{"allowed is 2", record(2, 2, 0, 0), nil},
		{"remaining above limit", record(1, 4, 0, 0), nil},
		{"negative remaining", record(1, -1, 0, 0), nil},
		{"allowed with a retry", record(1, 1, 5, 0), nil},
		{"denied without a retry", record(0, 0, 0, 10), nil},
		{"negative reset", record(0, 0, 5, -1), nil},
		{"retry overflows", record(0, 0, 4611686018427387904, 0), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewRedisTokenBucket(cannedScripter{reply: tc.reply, err: tc.err}, PerSecond(1), 3)
			require.NoError(t, err)
			res, err := l.Allow(context.Background(), "k", 1)
			require.Error(t, err)
			assert.Equal(t, Result{Limit: 3}, res)
			if tc.err != nil {
				assert.ErrorIs(t, err, tc.err)
			}
		})
	}
}

func TestRedisTokenBucketLeavesAnApplicationHashAlone(t *testing.T) {
	// A session HASH of the application's own where the bucket's key would
	// be is not a bucket, so it is neither written into nor given a TTL.
	m, client, advance := miniredisClock(t)
	l, err := NewRedisTokenBucket(client, PerSecond(1), 3, WithKeyPrefix(""))
	require.NoError(t, err)
	const session = "tb:{session:42}" // the bucket's key of "session:42"
	m.HSet(session, "user", "alice", "role", "admin")
	for _, n := range []int{1, 0} {
		res, err := l.Allow(context.Background(), "session:42", n)
		require.ErrorIs(t, err, ErrCorruptState)
		assert.Contains(t, err.Error(), KeyDigest("session:42"), "the error names the key by its digest")
		assert.Equal(t, Result{Limit: 3}, res)
	}
	advance(time.Second)
	fields, err := m.HKeys(session)
	require.NoError(t, err)
	assert.Equal(t, []string{"role", "user"}, fields)
	assert.Equal(t, "alice", m.HGet(session, "user"))
	assert.Equal(t, "admin", m.HGet(session, "role"))
	assert.Zero(t, m.TTL(session), "still no TTL")
}

func TestNewRedisTokenBucketRejectsBadConfig(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	cases := []struct {
		name   string
		client redis.Scripter
		rate   Rate
		burst  int
		opts   []Option
		want   string
	}{
		{"nil client", nil, PerSecond(1), 1, nil, "nil Redis client"},
		{"typed nil client", (*redis.Client)(nil), PerSecond(1), 1, nil, "nil Redis client"},
		{"typed nil cluster client", (*redis.ClusterClient)(nil), PerSecond(1), 1, nil, "nil Redis client"},
		{"zero burst", client, PerSecond(1), 0, nil, "burst 0 must be > 0"},
		{"burst beyond 2^52", client, PerSecond(1e6), maxRedisLimit + 1, nil, "above 4503599627370496"},
		{"zero Rate", client, Rate{}, 1, nil, "zero Rate"},
		{"zero units", client, PerSecond(0), 1, nil, "rate 0/s: units 0 must be > 0"},
		{"zero period", client, Per(1, 0), 1, nil, "rate 1/0s: period 0s must be > 0"},
		{"faster than 1 µs per token", client, PerSecond(2e6), 1, nil, "rate 2000000/s gives less than one clock unit (1µs) per token"},
		{"fill time beyond 2^52 µs", client, Every(1000 * time.Second), 1 << 40, nil, "2^52"},
		{"WithClock", client, PerSecond(1), 1, []Option{WithClock(ratelimittest.NewClock(epoch))}, "WithClock does not apply"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := NewRedisTokenBucket(tc.client, tc.rate, tc.burst, redisOpts(tc.opts)...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, l)
		})
	}
}

func TestRedisTokenBucketWorksThroughARing(t *testing.T) {
	m, _, _ := miniredisClock(t)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": m.Addr()}})
	defer ring.Close()
	l, err := NewRedisTokenBucket(ring, PerSecond(1), 2)
	require.NoError(t, err)
	for _, want := range []bool{true, true, false} {
		res, err := l.Allow(context.Background(), "k", 1)
		require.NoError(t, err)
		assert.Equal(t, want, res.Allowed)
	}
}

// record is one check's record of the batch script's reply.
func record(allowed byte, remaining, retry, reset int64) string {
	b := []byte{allowed}
	for _, v := range []int64{remaining, retry, reset} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return string(b)
}

// refusalRecord is the batch script's record of a request whose check i
// was refused for reason: the byte 255, i, the reason's length in two
// bytes, and the reason.
func refusalRecord(i int, reason string) string {
	return string([]byte{0xFF, byte(i), byte(len(reason) >> 8), byte(len(reason))}) + reason
}
