package outbound

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// storeCase is one Store under the contract test, with a way to move its
// time, or nil when only real time moves it.
type storeCase struct {
	name    string
	store   Store
	advance func(time.Duration)
}

// storeCases returns a MemoryStore, a RedisStore on miniredis and one on a
// real server (skipped without redis-server).
func storeCases(t *testing.T) []storeCase {
	ft := newFakeTime()
	_, mini, advance := redistest.Miniredis(t, time.Now())
	cases := []storeCase{
		{"memory", NewMemoryStore(ft.clock), ft.clock.Advance},
		{"miniredis", mustRedisStore(t, mini, ""), advance},
	}
	if real := realRedis(t); real != nil {
		cases = append(cases, storeCase{"redis-server", mustRedisStore(t, real, "test:"+t.Name()+":"), nil})
	}
	return cases
}

// realRedis returns a client to the shared real server, or nil, logging
// why, when redis-server is not installed.
func realRedis(t *testing.T) *redis.Client {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Log("redis-server is not installed: the case on a real server is skipped")
		return nil
	}
	return redistest.Shared(t).Client(t)
}

func mustRedisStore(t *testing.T, c redis.Scripter, prefix string) *RedisStore {
	t.Helper()
	s, err := NewRedisStore(c, prefix)
	require.NoError(t, err)
	return s
}

func TestStoresKeepTheLongestPauseAndTheLastStatedLimit(t *testing.T) {
	for _, sc := range storeCases(t) {
		t.Run(sc.name, func(t *testing.T) {
			ctx, s := context.Background(), sc.store
			st, err := s.Load(ctx, "api")
			require.NoError(t, err)
			assert.Equal(t, State{}, st, "nothing learned")

			require.NoError(t, s.Pause(ctx, "api", 2*time.Second))
			require.NoError(t, s.Pause(ctx, "api", time.Second))
			st, err = s.Load(ctx, "api")
			require.NoError(t, err)
			assert.InDelta(t, 2*time.Second, st.Pause, float64(100*time.Millisecond), "the longer pause is kept")
			require.NoError(t, s.Pause(ctx, "api", 3*time.Second))
			st, err = s.Load(ctx, "api")
			require.NoError(t, err)
			assert.InDelta(t, 3*time.Second, st.Pause, float64(100*time.Millisecond))

			five := ratelimit.Policy{Limit: 5, Window: time.Second}
			assert.True(t, learn(t, s, ctx, "api", five, time.Minute), "none before")
			assert.False(t, learn(t, s, ctx, "api", five, time.Minute), "the same again")
			assert.True(t, learn(t, s, ctx, "api", ratelimit.Policy{Limit: 5, Window: 2 * time.Second}, time.Minute), "another window")
			assert.True(t, learn(t, s, ctx, "api", five, time.Minute))
			st, err = s.Load(ctx, "api")
			require.NoError(t, err)
			assert.Equal(t, five, st.Policy)
			assert.InDelta(t, time.Minute, st.PolicyLeft, float64(100*time.Millisecond))

			st, err = s.Load(ctx, "other")
			require.NoError(t, err)
			assert.Equal(t, State{}, st, "a partition of its own")

			assert.True(t, learn(t, s, ctx, "api", ratelimit.Policy{}, time.Minute), "forgotten")
			assert.False(t, learn(t, s, ctx, "api", ratelimit.Policy{}, time.Minute))
			st, err = s.Load(ctx, "api")
			require.NoError(t, err)
			assert.Equal(t, ratelimit.Policy{}, st.Policy, "the zero policy forgets")
			assert.Zero(t, st.PolicyLeft)
			assert.Positive(t, st.Pause, "forgetting the policy keeps the pause")

			require.ErrorIs(t, s.Pause(ctx, "api", 0), ratelimit.ErrInvalidConfig)
			_, err = s.Learn(ctx, "api", five, 0)
			require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

			if sc.advance == nil {
				return
			}
			assert.True(t, learn(t, s, ctx, "api", five, 10*time.Second))
			sc.advance(3 * time.Second)
			st, err = s.Load(ctx, "api")
			require.NoError(t, err)
			assert.Equal(t, State{Policy: five, PolicyLeft: 7 * time.Second}, st, "the pause ended")
			sc.advance(7 * time.Second)
			st, err = s.Load(ctx, "api")
			require.NoError(t, err)
			assert.Equal(t, State{}, st, "the policy forgotten")
			assert.True(t, learn(t, s, ctx, "api", five, 10*time.Second), "stated again after it lapsed")
		})
	}
}

func TestARedisStoreKeyLastsAsLongAsItsStateAndNoLonger(t *testing.T) {
	mr, c, advance := redistest.Miniredis(t, time.Now())
	s := mustRedisStore(t, c, "")
	ctx := context.Background()
	require.NoError(t, s.Pause(ctx, "api", 2*time.Second))
	learn(t, s, ctx, "api", ratelimit.Policy{Limit: 5, Window: time.Second}, 5*time.Second)
	assert.Equal(t, 5*time.Second, mr.TTL(DefaultStorePrefix+"api"))
	advance(5 * time.Second)
	assert.False(t, mr.Exists(DefaultStorePrefix+"api"))
}

func TestARedisStoreRefusesAKeyThatIsNotItsOwnAndLeavesIt(t *testing.T) {
	mr, c, _ := redistest.Miniredis(t, time.Now())
	s := mustRedisStore(t, c, "")
	ctx := context.Background()
	key := DefaultStorePrefix + "api"
	for name, setup := range map[string]func(){
		"a string":           func() { require.NoError(t, mr.Set(key, "x")) },
		"another field":      func() { mr.HSet(key, "p", "1", "token", "2"); mr.SetTTL(key, time.Minute) },
		"a value not a time": func() { mr.HSet(key, "p", "soon"); mr.SetTTL(key, time.Minute) },
		"a negative value":   func() { mr.HSet(key, "q", "-5"); mr.SetTTL(key, time.Minute) },
		"a value too long":   func() { mr.HSet(key, "p", "12345678901234567"); mr.SetTTL(key, time.Minute) },
		"a part of a limit":  func() { mr.HSet(key, "q", "5"); mr.SetTTL(key, time.Minute) },
		"no TTL":             func() { mr.HSet(key, "p", "1") },
	} {
		t.Run(name, func(t *testing.T) {
			mr.Del(key)
			setup()
			before := mr.Dump()
			_, err := s.Load(ctx, "api")
			require.ErrorIs(t, err, ratelimit.ErrCorruptState)
			require.ErrorIs(t, s.Pause(ctx, "api", time.Second), ratelimit.ErrCorruptState)
			assert.Equal(t, before, mr.Dump(), "left as it was")
		})
	}
}

func TestARedisStoreTellsItsFailuresAndMistakesByClass(t *testing.T) {
	_, err := NewRedisStore(nil, "")
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, err = NewRedisStore((*redis.Client)(nil), "")
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer down.Close()
	s := mustRedisStore(t, down, "")
	_, err = s.Load(context.Background(), "api")
	require.ErrorIs(t, err, ratelimit.ErrBackend)

	_, c, _ := redistest.Miniredis(t, time.Now())
	s = mustRedisStore(t, c, "")
	_, err = s.Load(context.Background(), strings.Repeat("x", MaxPartitionLength+1))
	require.ErrorIs(t, err, ratelimit.ErrInvalidKey)
	_, err = s.Learn(context.Background(), "api", ratelimit.Policy{Limit: -1, Window: time.Second}, time.Second)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

	var zero *RedisStore
	_, err = zero.Load(context.Background(), "api")
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	var zeroMem MemoryStore
	_, err = zeroMem.Load(context.Background(), "api")
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}

func TestAMemoryStoreDropsEndedPartitionsAsItGrows(t *testing.T) {
	ft := newFakeTime()
	s := NewMemoryStore(ft.clock)
	ctx := context.Background()
	for i := range 200 {
		require.NoError(t, s.Pause(ctx, strings.Repeat("k", i+1), time.Second))
	}
	ft.clock.Advance(time.Second)
	for i := range 200 {
		require.NoError(t, s.Pause(ctx, strings.Repeat("n", i+1), time.Second))
	}
	s.mu.Lock()
	n := len(s.entries)
	s.mu.Unlock()
	assert.Less(t, n, 300, "the ended pauses were swept")
}
