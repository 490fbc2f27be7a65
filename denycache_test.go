package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingLimiter counts the calls that reach l.
type countingLimiter struct {
	l     Limiter
	calls atomic.Int64
}

func (c *countingLimiter) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := c.Decide(ctx, key, n)
	return d.Result, err
}

// Decide counts the call and passes on l's Decision, whose rules let a
// DenyCache around c answer locally.
func (c *countingLimiter) Decide(ctx context.Context, key string, n int) (Decision, error) {
	c.calls.Add(1)
	return decideAny(ctx, c.l, key, n)
}

// Policies asks l: no call is counted.
func (c *countingLimiter) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if d, ok := c.l.(Decider); ok {
		return d.Policies(ctx, key)
	}
	return nil, nil
}

func TestDenyCacheNeverDeniesWhatTheBackendWouldAllow(t *testing.T) {
	// Every limiter, in process and on miniredis, behind a DenyCache on a
	// clock that moves with the backend's. Another client takes tokens on
	// the backend directly now and then. Each answer the cache gives
	// itself is checked against the backend's own: a denial there changes
	// nothing, so asking is safe.
	t.Parallel()
	r := rand.New(rand.NewPCG(9, 10))
	subjects := append(append([]subject{}, bucketSubjects...), windowSubjects...)
	for _, sub := range subjects {
		t.Run(sub.name, func(t *testing.T) {
			local := 0
			for round := 0; round < sized(2, 6); round++ {
				limit := 1 + r.IntN(8)
				period := time.Duration(1+r.Int64N(4000)) * time.Millisecond
				backend, advanceBackend := sub.newLimiter(t, limit, period)
				clock := ratelimittest.NewClock(epoch)
				counted := &countingLimiter{l: backend}
				cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock, MaxAge: time.Duration(r.Int64N(int64(2 * period)))})
				require.NoError(t, err)
				ctx := context.Background()
				for i, c := range randomSchedule(r, sized(80, 300), limit, period/time.Duration(limit), false, "a", "b") {
					c.advance = c.advance.Truncate(time.Millisecond)
					clock.Advance(c.advance)
					advanceBackend(c.advance)
					if r.IntN(5) == 0 {
						_, _ = backend.Allow(ctx, c.key, 1) // another client
					}
					before := counted.calls.Load()
					got, err := cache.Allow(ctx, c.key, c.n)
					if c.n > limit {
						require.ErrorIs(t, err, ErrCostExceedsLimit)
						continue
					}
					require.NoError(t, err)
					if counted.calls.Load() != before {
						continue // the backend answered
					}
					local++
					require.False(t, got.Allowed, "step %d: the cache only ever denies", i)
					truth, err := backend.Allow(ctx, c.key, c.n)
					require.NoError(t, err)
					require.False(t, truth.Allowed, "step %d: the cache denied %+v, the backend allows it", i, c)
					assert.LessOrEqual(t, got.RetryAfter, truth.RetryAfter, "step %d: the cache's wait is not longer than the backend's", i)
				}
			}
			assert.Positive(t, local, "the cache answered some calls itself")
		})
	}
}

func TestDenyCacheAnswersAFloodLocally(t *testing.T) {
	t.Parallel()
	// Around a backend that passes its Decision on, and around one that
	// hides it (the same-cost rule): a flood of cost 1 is answered locally.
	for _, hides := range []bool{false, true} {
		clock := ratelimittest.NewClock(epoch)
		backend, err := NewTokenBucket(PerSecond(1), 10, WithClock(clock))
		require.NoError(t, err)
		var wrapped Limiter
		var reached *atomic.Int64
		if hides {
			counted := &plainCounter{l: backend}
			wrapped, reached = counted, &counted.calls
		} else {
			counted := &countingLimiter{l: backend}
			wrapped, reached = counted, &counted.calls
		}
		hooks := &recordingHooks{}
		cache, err := NewDenyCache(wrapped, DenyCacheConfig{Clock: clock, Hooks: hooks})
		require.NoError(t, err)
		ctx := context.Background()
		const calls = 10_000
		allowed := 0
		for i := 0; i < calls; i++ {
			res, err := cache.Allow(ctx, "flood", 1)
			require.NoError(t, err)
			if res.Allowed {
				allowed++
			}
			clock.Advance(time.Millisecond) // 1000 requests a second against 1 a second
		}
		// 10 s: the 10 of the burst, then one a second.
		assert.Equal(t, 10+9, allowed, "hides its Decision: %v", hides)
		backendCalls := reached.Load()
		t.Logf("hides its Decision: %v: %d calls, %d reached the backend (%.1f%% answered locally)", hides, calls, backendCalls, 100*float64(calls-int(backendCalls))/calls)
		assert.Less(t, backendCalls, int64(calls/10), "hides its Decision: %v: at least 90%% answered locally", hides)
		assert.Equal(t, FromDenyCache, hooks.last().Source)
	}
}

// plainCounter counts the calls that reach l and hides l's Decision: it is
// a Limiter only, as a decorator of another package may be.
type plainCounter struct {
	l     Limiter
	calls atomic.Int64
}

func (c *plainCounter) Allow(ctx context.Context, key string, n int) (Result, error) {
	c.calls.Add(1)
	return c.l.Allow(ctx, key, n)
}

// TestDenyCacheKeepsTheSameCostRuleForABackendThatHidesItsState: around a
// Limiter that does not pass a Decision on, the DenyCache cannot tell how
// the key's state moves, so it remembers only a denial of n with n-1 left,
// and answers from it calls of that same n until its RetryAfter, with the
// backend's answer aged; every other call goes to the backend.
func TestDenyCacheKeepsTheSameCostRuleForABackendThatHidesItsState(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewTokenBucket(PerSecond(1), 5, WithClock(clock))
	require.NoError(t, err)
	counted := &plainCounter{l: backend}
	cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock, MaxAge: time.Minute})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = cache.Allow(ctx, "k", 3)
	require.NoError(t, err)
	d, err := cache.Decide(ctx, "k", 3) // 2 left: denied, remembered
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, FromBackend, d.Source)
	calls := counted.calls.Load()

	clock.Advance(400 * time.Millisecond)
	d, err = cache.Decide(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, FromDenyCache, d.Source, "the same request is denied locally")
	assert.Equal(t, calls, counted.calls.Load())
	truth, err := backend.Allow(ctx, "k", 3) // a denial: changes nothing
	require.NoError(t, err)
	assert.Equal(t, truth, d.Result, "the backend's answer, aged")
	assert.Equal(t, 600*time.Millisecond, d.RetryAfter)

	d, err = cache.Decide(ctx, "k", 4)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, FromBackend, d.Source, "another cost goes to the backend")
	assert.Equal(t, calls+1, counted.calls.Load())
	d, err = cache.Decide(ctx, "k", 2)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a smaller one goes to the backend and passes")
	assert.Equal(t, calls+2, counted.calls.Load())
	_, err = cache.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, calls+3, counted.calls.Load(), "peeks always go to the backend")

	clock.Advance(600 * time.Millisecond) // the denial's RetryAfter has passed
	d, err = cache.Decide(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.Equal(t, calls+4, counted.calls.Load(), "a denial holds no longer than its RetryAfter")
}

func TestDenyCacheLetsSmallerRequestsThrough(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewTokenBucket(PerSecond(1), 5, WithClock(clock))
	require.NoError(t, err)
	counted := &countingLimiter{l: backend}
	cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = cache.Allow(ctx, "k", 3)
	require.NoError(t, err)
	res, err := cache.Allow(ctx, "k", 3) // 2 left: denied, remembered
	require.NoError(t, err)
	require.False(t, res.Allowed)
	calls := counted.calls.Load()
	res, err = cache.Allow(ctx, "k", 3)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, calls, counted.calls.Load(), "the same request is denied locally")
	res, err = cache.Allow(ctx, "k", 4)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
	assert.Equal(t, calls, counted.calls.Load(), "a larger cost is denied locally too")
	truth, err := backend.Allow(ctx, "k", 4) // a denial: changes nothing
	require.NoError(t, err)
	assert.Equal(t, truth, res, "with the backend's wait for that cost")
	res, err = cache.Allow(ctx, "k", 2)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "a smaller one goes to the backend and passes")
	assert.Equal(t, calls+1, counted.calls.Load())
	_, err = cache.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, calls+2, counted.calls.Load(), "peeks always go to the backend")
}

func TestDenyCacheMemoryIsBounded(t *testing.T) {
	t.Parallel()
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewTokenBucket(PerSecond(1), 1, WithClock(clock))
	require.NoError(t, err)
	cache, err := NewDenyCache(backend, DenyCacheConfig{Clock: clock, MaxKeys: 6400})
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 50_000; i++ {
		key := strconv.Itoa(i)
		_, _ = cache.Allow(ctx, key, 1)
		_, _ = cache.Allow(ctx, key, 1) // denied: remembered if there is room
	}
	assert.LessOrEqual(t, cache.denials.len(), 6400)
	assert.Positive(t, cache.denials.len())
	clock.Advance(3 * time.Second) // every denial has passed
	for i := 0; i < 1000; i++ {
		_, _ = cache.Allow(ctx, "x"+strconv.Itoa(i), 1)
	}
	assert.Equal(t, 0, cache.denials.len())
}

func TestNewDenyCacheRejectsBadConfig(t *testing.T) {
	_, err := NewDenyCache(nil, DenyCacheConfig{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewDenyCache(&stubBackend{}, DenyCacheConfig{MaxAge: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewDenyCache(&stubBackend{}, DenyCacheConfig{MaxKeys: -1})
	require.ErrorIs(t, err, ErrInvalidConfig)
}

// BenchmarkDenyCacheFlood floods one denied key through a DenyCache and
// reports the share of calls answered without the backend.
func BenchmarkDenyCacheFlood(b *testing.B) {
	backend, err := NewTokenBucket(PerSecond(10), 10)
	if err != nil {
		b.Fatal(err)
	}
	counted := &countingLimiter{l: backend}
	cache, err := NewDenyCache(counted, DenyCacheConfig{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_, _ = cache.Allow(ctx, "flood", 1)
		}
	})
	b.ReportMetric(100*(1-float64(counted.calls.Load())/float64(b.N)), "%local")
}

func TestDenyCacheReportsTheBackendsRetryAfterLessTheTimePassed(t *testing.T) {
	// One token a minute: the backend's denial says 60 s, far beyond the
	// default MaxAge of 1 s, which must bound only how long the denial is
	// remembered.
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewTokenBucket(PerMinute(1), 1, WithClock(clock))
	require.NoError(t, err)
	counted := &countingLimiter{l: backend}
	cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	_, err = cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	first, err := cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	require.False(t, first.Allowed)
	assert.Equal(t, time.Minute, first.RetryAfter)
	calls := counted.calls.Load()

	clock.Advance(250 * time.Millisecond)
	local, err := cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, calls, counted.calls.Load(), "answered locally")
	assert.Equal(t, Result{Limit: 1, RetryAfter: time.Minute - 250*time.Millisecond, ResetAfter: time.Minute - 250*time.Millisecond}, local)

	// Past MaxAge the backend is asked again, and says the same.
	clock.Advance(time.Second)
	again, err := cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, calls+1, counted.calls.Load(), "asked the backend after MaxAge")
	assert.Equal(t, time.Minute-1250*time.Millisecond, again.RetryAfter)
}

func TestWaitThroughADenyCacheFailsAtOnceWhenTheDeadlineIsTooNear(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewTokenBucket(PerMinute(1), 1, WithClock(clock))
	require.NoError(t, err)
	cache, err := NewDenyCache(backend, DenyCacheConfig{Clock: clock})
	require.NoError(t, err)
	_, err = cache.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	_, err = cache.Allow(context.Background(), "k", 1) // remembered
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := Wait(ctx, cache, "k", 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, res.Allowed)
	assert.Less(t, time.Since(start), time.Second, "no sleep in vain")
}

func TestDenyCacheHoldsAtMostMaxKeys(t *testing.T) {
	for _, maxKeys := range []int{1, 3, 63, 65} {
		clock := ratelimittest.NewClock(epoch)
		backend, err := NewTokenBucket(PerSecond(1), 1, WithClock(clock))
		require.NoError(t, err)
		counted := &countingLimiter{l: backend}
		cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock, MaxKeys: maxKeys})
		require.NoError(t, err)
		ctx := context.Background()
		for i := 0; i < 500; i++ {
			key := strconv.Itoa(i)
			_, _ = cache.Allow(ctx, key, 1)
			_, _ = cache.Allow(ctx, key, 1) // denied: remembered if there is room
		}
		assert.Equal(t, maxKeys, cache.denials.len(), "MaxKeys %d", maxKeys)

		// Once they have passed, new denials take their place, even when
		// no call touches the shards that hold the old ones.
		clock.Advance(3 * time.Second)
		for i := 0; i < 2*maxKeys; i++ {
			key := "new" + strconv.Itoa(i)
			_, _ = cache.Allow(ctx, key, 1)
			_, _ = cache.Allow(ctx, key, 1)
			if i < maxKeys {
				before := counted.calls.Load()
				_, _ = cache.Allow(ctx, key, 1)
				assert.Equal(t, before, counted.calls.Load(), "MaxKeys %d: %s remembered", maxKeys, key)
			}
			assert.LessOrEqual(t, cache.denials.len(), maxKeys)
			assert.Equal(t, int64(cache.denials.len()), cache.denials.held.Load())
		}
	}
}

func TestDenyCacheHoldsAtMostMaxKeysUnderConcurrency(t *testing.T) {
	backend, err := NewTokenBucket(Every(1000*time.Second), 1)
	require.NoError(t, err)
	cache, err := NewDenyCache(backend, DenyCacheConfig{MaxKeys: 10, MaxAge: time.Hour})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				key := strconv.Itoa(g*1000 + i)
				_, _ = cache.Allow(context.Background(), key, 1)
				_, _ = cache.Allow(context.Background(), key, 1)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 10, cache.denials.len())
	assert.Equal(t, int64(10), cache.denials.held.Load())
}

func TestDenyCacheReportsItsBackendsPolicy(t *testing.T) {
	backend, err := NewTokenBucket(PerSecond(2), 10)
	require.NoError(t, err)
	cache, err := NewDenyCache(backend, DenyCacheConfig{})
	require.NoError(t, err)
	ps, err := cache.Policies(context.Background(), "k")
	require.NoError(t, err)
	assert.Equal(t, []NamedPolicy{{Name: "default", Policy: Policy{Limit: 10, Window: 5 * time.Second}}}, ps)
	assert.Equal(t, backend.Policy(), ps[0].Policy)

	opaque, err := NewDenyCache(&stubBackend{}, DenyCacheConfig{})
	require.NoError(t, err)
	ps, err = opaque.Policies(context.Background(), "k")
	require.NoError(t, err)
	assert.Empty(t, ps, "a backend without a policy gives none")
}

func TestDenyCacheNotMadeByItsConstructorErrs(t *testing.T) {
	var nilCache *DenyCache
	_, err := nilCache.Allow(context.Background(), "k", 1)
	require.Error(t, err)
	_, err = (&DenyCache{}).Allow(context.Background(), "k", 1)
	require.Error(t, err)
}

func TestDenyCacheLocalAnswersEqualTheBackendsForCostsAboveOne(t *testing.T) {
	// 10 at 10/s, drained, asked for 5, 9 and 1 as it refills: every
	// denial, of any cost, is remembered, and every answer, local or not,
	// matches the backend's own.
	clock := ratelimittest.NewClock(epoch)
	backend, err := NewTokenBucket(PerSecond(10), 10, WithClock(clock))
	require.NoError(t, err)
	bare, err := NewTokenBucket(PerSecond(10), 10, WithClock(clock))
	require.NoError(t, err)
	counted := &countingLimiter{l: backend}
	cache, err := NewDenyCache(counted, DenyCacheConfig{Clock: clock})
	require.NoError(t, err)
	ctx := context.Background()
	for _, l := range []Limiter{cache, bare} {
		_, err := l.Allow(ctx, "k", 10)
		require.NoError(t, err)
	}
	for i, n := range []int{5, 5, 9, 1, 1, 5, 1} {
		clock.Advance(30 * time.Millisecond)
		want, err := bare.Allow(ctx, "k", n)
		require.NoError(t, err)
		got, err := cache.Allow(ctx, "k", n)
		require.NoError(t, err)
		assert.Equal(t, want, got, "step %d, n %d", i, n)
	}
	assert.Less(t, counted.calls.Load(), int64(1+7), "some were answered locally")
}

func TestDenyCacheRefusesANilContext(t *testing.T) {
	backend, err := NewTokenBucket(PerSecond(1), 1)
	require.NoError(t, err)
	cache, err := NewDenyCache(backend, DenyCacheConfig{})
	require.NoError(t, err)
	var nilCtx context.Context
	_, err = cache.Allow(nilCtx, "k", 1)
	require.ErrorContains(t, err, "nil context")
}

func TestDenyCacheOverASlidingCounterAllowsWhatItsBackendAllows(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	counter, err := NewSlidingCounter(4, 10*time.Second, WithClock(clock))
	require.NoError(t, err)
	cache, err := NewDenyCache(counter, DenyCacheConfig{Clock: clock, MaxAge: time.Minute})
	require.NoError(t, err)
	_, err = cache.Allow(ctx, "k", 4)
	require.NoError(t, err)
	clock.Advance(10 * time.Second) // the previous window's 4 weigh 4
	res, err := cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, no(4, 0, 2500*ms, 10*time.Second), res)
	clock.Advance(time.Second)
	res, err = cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, no(4, 0, 1500*ms, 9*time.Second), res, "the same cost, within its RetryAfter, is denied")
	clock.Advance(1500 * ms)
	res, err = cache.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ok(4, 0, 17500*ms), res, "once its backend allows, so does the cache, though the estimate is not yet 0")
}
