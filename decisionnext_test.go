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

// nextStep is one call of a NextUnit scenario: the clock moves by advance,
// then n is decided (or settled into debt by settle), and policy i of the
// Decision has the wait want (ok false: not told).
type nextStep struct {
	advance time.Duration
	n       int
	settle  int // when > 0, a Settle of 0 taken at this cost first
	i       int
	want    time.Duration
	ok      bool
}

// nextKind builds a limiter for a NextUnit scenario, in process on clock
// or on Redis through client (nil in process).
type nextKind struct {
	name  string
	build func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider
	steps []nextStep
}

var nextKinds = []nextKind{
	{"token bucket", func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider {
		if client != nil {
			return must(NewRedisTokenBucket(client, PerSecond(2), 4))
		}
		return must(NewTokenBucket(PerSecond(2), 4, WithClock(clock)))
	}, []nextStep{
		{n: 0, want: 500 * time.Millisecond, ok: true},                                  // full: a unit taken now is back in 500 ms
		{n: 1, want: 500 * time.Millisecond, ok: true},                                  // 3 left, the 4th back in 500 ms
		{advance: 200 * time.Millisecond, n: 2, want: 300 * time.Millisecond, ok: true}, // 3.4 − 2 = 1.4: 2 at 0.3 s
		{settle: 10, n: 0, want: 2500 * time.Millisecond, ok: true},                     // −4, the debt's cap: 1 after 5 units' refill
	}},
	{"GCRA", func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider {
		if client != nil {
			return must(NewRedisGCRA(client, 4, 2*time.Second))
		}
		return must(NewGCRA(4, 2*time.Second, WithClock(clock)))
	}, []nextStep{
		{n: 0, want: 500 * time.Millisecond, ok: true},
		{n: 1, want: 500 * time.Millisecond, ok: true},
		{advance: 200 * time.Millisecond, n: 2, want: 300 * time.Millisecond, ok: true},
	}},
	{"fixed window", func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider {
		if client != nil {
			return must(NewRedisFixedWindow(client, 4, 10*time.Second))
		}
		return must(NewFixedWindow(4, 10*time.Second, WithClock(clock)))
	}, []nextStep{
		{n: 0, want: 10 * time.Second, ok: true}, // empty: the next unit opens a window of 10 s
		{n: 1, want: 10 * time.Second, ok: true},
		{advance: 3 * time.Second, n: 3, want: 7 * time.Second, ok: true},
		{advance: time.Second, settle: 5, n: 0, want: 6 * time.Second, ok: true}, // in debt until the window ends
	}},
	{"calendar window", func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider {
		day := Calendar{Period: CalendarDay, Location: time.UTC}
		if client != nil {
			return must(NewRedisCalendarWindow(client, 4, day, WithClock(clock)))
		}
		return must(NewCalendarWindow(4, day, WithClock(clock)))
	}, []nextStep{
		{advance: time.Hour, n: 0, want: 23 * time.Hour, ok: true}, // empty: the limiter tells the day's end
		{n: 1, want: 23 * time.Hour, ok: true},
	}},
	{"sliding log", func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider {
		if client != nil {
			return must(NewRedisSlidingLog(client, 4, 10*time.Second))
		}
		return must(NewSlidingLog(4, 10*time.Second, WithClock(clock)))
	}, []nextStep{
		{n: 0, want: 10 * time.Second, ok: true}, // empty: a unit taken now counts for 10 s
		{n: 1, want: 10 * time.Second, ok: true}, // until the unit taken now leaves
	}},
	{"sliding counter", func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider {
		if client != nil {
			return must(NewRedisSlidingCounter(client, 4, 10*time.Second))
		}
		return must(NewSlidingCounter(4, 10*time.Second, WithClock(clock)))
	}, []nextStep{
		{n: 0, want: 10 * time.Second, ok: true},
		// 3 left, which taken at once count with the first in the
		// previous window after the roll: one more once ⌈4 × (10 s − e)
		// / 10 s⌉ <= 3, at 12.5 s.
		{n: 1, want: 12500 * time.Millisecond, ok: true},
	}},
	{"concurrency", func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider {
		if client != nil {
			return must(NewRedisConcurrency(client, 4, 10*time.Second))
		}
		return must(NewConcurrency(4, 10*time.Second, WithClock(clock)))
	}, []nextStep{
		{n: 0, ok: false}, // a release may free units at any moment
		{n: 1, ok: false},
	}},
	{"composite", func(t *testing.T, client redis.Scripter, clock *ratelimittest.Clock) Decider {
		var bucket, window Limiter
		if client != nil {
			bucket, window = must(NewRedisTokenBucket(client, PerSecond(2), 4)), must(NewRedisFixedWindow(client, 100, time.Minute))
		} else {
			bucket, window = must(NewTokenBucket(PerSecond(2), 4, WithClock(clock))), must(NewFixedWindow(100, time.Minute, WithClock(clock)))
		}
		return must(NewComposite(Part{Name: "burst", Limiter: bucket}, Part{Name: "minute", Limiter: window}))
	}, []nextStep{
		{n: 1, i: 0, want: 500 * time.Millisecond, ok: true}, // each part its own
		{advance: 20 * time.Second, n: 0, i: 1, want: 40 * time.Second, ok: true},
		{n: 4, i: 0, want: 500 * time.Millisecond, ok: true}, // a denial: each part's state as it is
		{n: 4, i: 1, want: 40 * time.Second, ok: true},
		{n: 1, i: 2, ok: false}, // no such policy
	}},
}

// must returns v, or panics on err: the scenarios' constructors cannot
// fail.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// NextUnit tells, for every kind, how long a policy holds its key to what
// it has left: one unit's refill for a bucket or GCRA, the window's end for
// a window, nothing where the Result does not tell it; in process and on
// Redis alike.
func TestNextUnitOfEveryKind(t *testing.T) {
	for _, kind := range nextKinds {
		for _, where := range []string{"in process", "miniredis"} {
			t.Run(kind.name+" "+where, func(t *testing.T) {
				clock := ratelimittest.NewClock(epoch)
				var client redis.Scripter
				advance := clock.Advance
				if where == "miniredis" {
					_, c, move := miniredisClock(t)
					client = c
					advance = func(d time.Duration) { clock.Advance(d); move(d) }
				}
				l := kind.build(t, client, clock)
				ctx := context.Background()
				for j, st := range kind.steps {
					advance(st.advance)
					if st.settle > 0 {
						_, err := l.(Adjuster).Settle(ctx, "k", 0, st.settle)
						require.NoError(t, err)
					}
					d, err := l.Decide(ctx, "k", st.n)
					require.NoError(t, err, "step %d", j)
					got, ok := d.NextUnit(st.i)
					assert.Equal(t, st.ok, ok, "step %d", j)
					assert.Equal(t, st.want, got, "step %d", j)
				}
			})
		}
	}
}

// The decorators tell what their backend's Decision tells; an answer made
// without the backend tells nothing, and a Prefetch's block tells one unit's
// time.
func TestNextUnitThroughDecorators(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	bucket := must(NewTokenBucket(PerSecond(2), 4, WithClock(clock)))

	cache := must(NewDenyCache(bucket, DenyCacheConfig{Clock: clock}))
	shadow := must(NewShadow(cache, ShadowConfig{}))
	d, err := shadow.Decide(ctx, "a", 1)
	require.NoError(t, err)
	got, ok := d.NextUnit(0)
	assert.True(t, ok)
	assert.Equal(t, 500*time.Millisecond, got)

	down := &stubBackend{}
	down.set(Result{}, backendErr(context.DeadlineExceeded))
	guard := must(NewGuard(down, GuardConfig{OnFailure: FailOpen, Clock: clock}))
	d, err = guard.Decide(ctx, "a", 1)
	require.NoError(t, err)
	_, ok = d.NextUnit(0)
	assert.False(t, ok, "a fail-open answer tells nothing")

	fallback := must(NewTokenBucket(PerSecond(2), 4, WithClock(clock)))
	failover := must(NewGuard(down, GuardConfig{OnFailure: FailOver, Fallback: fallback, Clock: clock}))
	d, err = failover.Decide(ctx, "a", 2)
	require.NoError(t, err)
	require.Equal(t, FromFallback, d.Source)
	got, ok = d.NextUnit(d.PolicyIndex)
	assert.True(t, ok, "a fallback's answer tells the fallback's")
	assert.Equal(t, 500*time.Millisecond, got)

	d, err = decideAny(ctx, &stubBackend{}, "a", 1)
	require.NoError(t, err)
	_, ok = d.NextUnit(0)
	assert.False(t, ok, "a Limiter of another package")

	prefetch := must(NewPrefetch(must(NewTokenBucket(PerSecond(10), 100, WithClock(clock))), PrefetchConfig{HotCalls: 1}))
	for range 20 {
		d, err = prefetch.Decide(ctx, "hot", 1)
		require.NoError(t, err)
	}
	clock.Advance(30 * time.Millisecond) // the bare bucket's next unit: 70 ms away
	d, err = prefetch.Decide(ctx, "hot", 1)
	require.NoError(t, err)
	got, ok = d.NextUnit(0)
	assert.True(t, ok)
	assert.Equal(t, 100*time.Millisecond, got, "one unit's time")
}
