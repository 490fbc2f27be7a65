package ratelimit

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// hotKeyTrial runs the flood trial through cache around counted, whose
// keys are buckets of 10 refilling one unit in 100 s: 1,000 calls of 1 on
// an exhausted hot key, 1 ms apart; then flood distinct keys, each
// exhausted and denied, within half a MaxAge, halfway through which a
// request on the hot key is settled through the cache (which drops its
// denial); then 1,000 calls on the hot key again. It returns how many of the hot key's
// calls, before and after the flood, reached the backend. step moves
// every clock the trial runs on.
func hotKeyTrial(t *testing.T, cache *DenyCache, counted *adjustingCounter, flood int, step func(time.Duration)) (before, after int64) {
	t.Helper()
	ctx := context.Background()
	prefix := strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	hot := prefix + "hot"
	_, err := cache.Allow(ctx, hot, 10)
	require.NoError(t, err)
	hotCalls := func() int64 {
		start := counted.calls.Load()
		for range 1000 {
			step(time.Millisecond)
			_, err := cache.Decide(ctx, hot, 1)
			require.NoError(t, err)
		}
		return counted.calls.Load() - start
	}
	before = hotCalls()
	gap := 500 * time.Millisecond / time.Duration(flood)
	for i := range flood {
		step(gap)
		if i == flood/2 {
			// A request on the hot key is settled through the cache: its
			// denial goes, and the flood takes its place.
			_, err = cache.Refund(ctx, hot, 1)
			require.NoError(t, err)
		}
		key := prefix + "flood:" + strconv.Itoa(i)
		_, err := cache.Allow(ctx, key, 10)
		require.NoError(t, err)
		d, err := cache.Decide(ctx, key, 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
	}
	return before, hotCalls()
}

// TestDenyCacheKeepsProtectingTheHotKeyAfterAFloodOfDeniedKeys is the
// trial's flood: a DenyCache of the default MaxKeys (100,000) answers
// 998 of 1,000 calls on an exhausted hot key locally; then 100,000
// distinct keys are denied within one MaxAge, which fill it, while a
// request on the hot key is settled through the cache, which drops its
// denial; and the hot key's next 1,000 calls still reach the backend a handful of
// times at most (the refunded unit's call, its denial, and a few more): the
// denials that answered no call make room for one that answers nearly
// every call.
// In process with the trial's figures, and at a smaller scale where each
// of the flood's calls is a script call: on a real server MaxKeys 10,000
// and 10,000 flood keys, on miniredis (whose scripts are slow) 2,000.
func TestDenyCacheKeepsProtectingTheHotKeyAfterAFloodOfDeniedKeys(t *testing.T) {
	t.Parallel()
	t.Run("in process", func(t *testing.T) {
		t.Parallel()
		clock := ratelimittest.NewClock(epoch)
		backend, err := NewTokenBucket(Every(100*time.Second), 10, WithClock(clock))
		require.NoError(t, err)
		counted := &adjustingCounter{countingLimiter{l: backend}}
		cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock})
		require.NoError(t, err)
		before, after := hotKeyTrial(t, cache, counted, 100_000, clock.Advance)
		t.Logf("hot key calls that reached the backend: %d of 1000 before the flood, %d of 1000 after", before, after)
		assert.LessOrEqual(t, before, int64(2))
		assert.LessOrEqual(t, after, int64(4), "the flood does not unseat the hot key")
		assert.LessOrEqual(t, cache.denials.len(), 100_000)
	})
	t.Run("miniredis", func(t *testing.T) {
		t.Parallel()
		_, client, step := miniredisClock(t)
		hotKeyRedisTrial(t, client, step, 2_000)
	})
}

// TestDenyCacheKeepsProtectingTheHotKeyAfterAFloodOfDeniedKeysOnARealServer
// does as TestDenyCacheKeepsProtectingTheHotKeyAfterAFloodOfDeniedKeys on a
// real server, apart from the tests that run in parallel. The server's time
// is its own: the hot key (1 a second) and the flood keys stay denied
// through the few seconds the trial takes there, while the DenyCache's fake
// clock follows the schedule.
func TestDenyCacheKeepsProtectingTheHotKeyAfterAFloodOfDeniedKeysOnARealServer(t *testing.T) {
	hotKeyRedisTrial(t, redistest.Shared(t).Client(t), nil, 10_000)
}

// hotKeyRedisTrial runs hotKeyTrial on a DenyCache of at most keys keys
// around a Redis token bucket through client; step, if not nil, steps the
// server's time with the cache's.
func hotKeyRedisTrial(t *testing.T, client redis.Scripter, step func(time.Duration), keys int) {
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewRedisTokenBucket(client, Every(100*time.Second), 10)
	require.NoError(t, err)
	counted := &adjustingCounter{countingLimiter{l: backend}}
	cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock, MaxKeys: keys})
	require.NoError(t, err)
	before, after := hotKeyTrial(t, cache, counted, keys, func(d time.Duration) {
		clock.Advance(d)
		if step != nil {
			step(d)
		}
	})
	t.Logf("hot key calls that reached the backend: %d of 1000 before the flood, %d of 1000 after", before, after)
	assert.LessOrEqual(t, before, int64(2))
	assert.LessOrEqual(t, after, int64(4), "the flood does not unseat the hot key")
	assert.LessOrEqual(t, cache.denials.len(), keys)
}

// TestDenyCacheEvictsOnlyDenialsWorthNoMoreThanTheNewOne: in a full
// DenyCache, a new denial takes the place of one that has passed, or of
// one that answered no more calls than the key's own earlier denials did;
// a denial that answered many calls stays, and the new one is then not
// remembered. MaxKeys stays a hard bound throughout.
func TestDenyCacheEvictsOnlyDenialsWorthNoMoreThanTheNewOne(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewTokenBucket(Every(1000*time.Second), 1, WithClock(clock))
	require.NoError(t, err)
	counted := &adjustingCounter{countingLimiter{l: backend}}
	// One key per shard at most, so that every newcomer finds the held
	// denials among those it samples.
	cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock, MaxKeys: 2, MaxAge: time.Hour})
	require.NoError(t, err)
	deny := func(key string) {
		_, _ = cache.Allow(ctx, key, 1)
		d, err := cache.Decide(ctx, key, 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
	}
	local := func(key string) bool {
		before := counted.calls.Load()
		d, err := cache.Decide(ctx, key, 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		return counted.calls.Load() == before
	}
	// Two hot keys in neighbouring shards, so that newcomers' sampling
	// finds them.
	shardOf := cache.denials.shardIndex
	hot := []string{"hot-0"}
	for i := 1; len(hot) < 2; i++ {
		k := "hot-" + strconv.Itoa(i)
		if (shardOf(k)-shardOf(hot[0])+shardCount)%shardCount == 1 {
			hot = append(hot, k)
		}
	}
	for _, k := range hot {
		deny(k)
		for range 5 {
			require.True(t, local(k))
		}
	}
	require.Equal(t, 2, cache.denials.len())
	// Newcomers in the hot keys' shards, worth nothing yet: refused.
	for i, placed := 0, 0; placed < 20; i++ {
		k := "cold-" + strconv.Itoa(i)
		if shardOf(k) != shardOf(hot[0]) {
			continue
		}
		placed++
		deny(k)
		assert.False(t, local(k), "%s: not remembered in place of a denial that answered calls", k)
	}
	for _, k := range hot {
		assert.True(t, local(k), "%s stays", k)
	}
	assert.Equal(t, 2, cache.denials.len())
	assert.Equal(t, int64(2), cache.denials.held.Load())

	// Once the hot keys' denials have passed, a newcomer takes a place.
	clock.Advance(2 * time.Hour)
	for i := 0; ; i++ {
		k := "late-" + strconv.Itoa(i)
		if shardOf(k) != shardOf(hot[0]) {
			continue
		}
		deny(k)
		assert.True(t, local(k), "%s takes the place of a denial that has passed", k)
		break
	}
	assert.LessOrEqual(t, cache.denials.len(), 2)
	assert.Equal(t, int64(cache.denials.len()), cache.denials.held.Load())
}

// adjustingCounter is a countingLimiter whose backend adjusts: Refund,
// Settle and Reset go to it, uncounted.
type adjustingCounter struct{ countingLimiter }

func (c *adjustingCounter) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return c.l.(Adjuster).Refund(ctx, key, n, opts...)
}

func (c *adjustingCounter) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return c.l.(Adjuster).Settle(ctx, key, taken, cost, opts...)
}

func (c *adjustingCounter) Reset(ctx context.Context, key string) error {
	return c.l.(Adjuster).Reset(ctx, key)
}

// TestDenyCacheEvictionUnderConcurrencyKeepsMaxKeysAndTheHotKey: goroutines
// flood a small DenyCache with distinct denied keys while others hammer
// one hot key: MaxKeys is never passed, the count of held denials matches
// the table, and the hot key's calls are still nearly all answered
// locally. Run it with -race.
func TestDenyCacheEvictionUnderConcurrencyKeepsMaxKeysAndTheHotKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	backend, err := NewTokenBucket(Every(1000*time.Second), 1)
	require.NoError(t, err)
	counted := &countingLimiter{l: backend}
	cache, err := NewDenyCache(counted, DenyCacheConfig{MaxKeys: 256, MaxAge: time.Hour})
	require.NoError(t, err)
	_, _ = cache.Allow(ctx, "hot", 1)
	var wg sync.WaitGroup
	var hotCalls, hotLocal atomic.Int64
	for g := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range 2_000 {
				key := strconv.Itoa(g*10_000 + i)
				_, _ = cache.Allow(ctx, key, 1)
				_, _ = cache.Allow(ctx, key, 1)
			}
		}()
		go func() {
			defer wg.Done()
			for range 2_000 {
				d, err := cache.Decide(ctx, "hot", 1)
				if err != nil || d.Allowed {
					t.Errorf("hot key: %+v, %v", d, err)
					return
				}
				hotCalls.Add(1)
				if d.Source == FromDenyCache {
					hotLocal.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, cache.denials.len(), 256)
	assert.Equal(t, int64(cache.denials.len()), cache.denials.held.Load())
	t.Logf("hot key: %d of %d calls answered locally", hotLocal.Load(), hotCalls.Load())
	assert.Greater(t, hotLocal.Load(), hotCalls.Load()*99/100)
}
