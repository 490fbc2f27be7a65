package outbound

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestALearnedLimitLowersEveryKindAndDecoratorThatReadsIt runs one
// scenario across the library's stack: an upstream's stated limit of 4 a
// second lowers a limiter configured for 10 a second, of each kind, in
// process and on Redis, and behind the decorators, to a burst of 4; with
// nothing stated, the burst is the limiter's own 10.
func TestALearnedLimitLowersEveryKindAndDecoratorThatReadsIt(t *testing.T) {
	learn := ratelimit.WithPolicyFunc(LearnedPolicy)
	for _, tc := range []struct {
		name  string
		build func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration))
	}{
		{"GCRA", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			return ratelimit.Must(ratelimit.NewGCRA(10, time.Second, learn, ratelimit.WithClock(ft.clock))), nil
		}},
		{"TokenBucket", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			return ratelimit.Must(ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10, learn, ratelimit.WithClock(ft.clock))), nil
		}},
		{"FixedWindow", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			return ratelimit.Must(ratelimit.NewFixedWindow(10, time.Second, learn, ratelimit.WithClock(ft.clock))), nil
		}},
		{"SlidingLog", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			return ratelimit.Must(ratelimit.NewSlidingLog(10, time.Second, learn, ratelimit.WithClock(ft.clock))), nil
		}},
		{"SlidingCounter", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			return ratelimit.Must(ratelimit.NewSlidingCounter(10, time.Second, learn, ratelimit.WithClock(ft.clock))), nil
		}},
		{"RedisGCRA", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			_, rdb, advance := redistest.Miniredis(t, ft.clock.Now())
			return ratelimit.Must(ratelimit.NewRedisGCRA(rdb, 10, time.Second, learn)), advance
		}},
		{"RedisTokenBucket", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			_, rdb, advance := redistest.Miniredis(t, ft.clock.Now())
			return ratelimit.Must(ratelimit.NewRedisTokenBucket(rdb, ratelimit.PerSecond(10), 10, learn)), advance
		}},
		{"RedisFixedWindow", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			_, rdb, advance := redistest.Miniredis(t, ft.clock.Now())
			return ratelimit.Must(ratelimit.NewRedisFixedWindow(rdb, 10, time.Second, learn)), advance
		}},
		{"RedisSlidingLog", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			_, rdb, advance := redistest.Miniredis(t, ft.clock.Now())
			return ratelimit.Must(ratelimit.NewRedisSlidingLog(rdb, 10, time.Second, learn)), advance
		}},
		{"Guard around RedisGCRA", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			_, rdb, advance := redistest.Miniredis(t, ft.clock.Now())
			backend := ratelimit.Must(ratelimit.NewRedisGCRA(rdb, 10, time.Second, learn))
			return ratelimit.Must(ratelimit.NewGuard(backend, ratelimit.GuardConfig{Timeout: time.Second})), advance
		}},
		{"DenyCache around GCRA", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			backend := ratelimit.Must(ratelimit.NewGCRA(10, time.Second, learn, ratelimit.WithClock(ft.clock)))
			return ratelimit.Must(ratelimit.NewDenyCache(backend, ratelimit.DenyCacheConfig{Clock: ft.clock})), nil
		}},
		{"Composite of a learning part and a looser one", func(t *testing.T, ft *fakeTime) (ratelimit.Limiter, func(time.Duration)) {
			learning := ratelimit.Must(ratelimit.NewGCRA(10, time.Second, learn, ratelimit.WithClock(ft.clock)))
			hourly := ratelimit.Must(ratelimit.NewFixedWindow(1000, time.Hour, ratelimit.WithClock(ft.clock)))
			return ratelimit.Must(ratelimit.NewComposite(ratelimit.Part{Name: "second", Limiter: learning}, ratelimit.Part{Name: "hour", Limiter: hourly})), nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ft := newFakeTime()
			store := NewMemoryStore(ft.clock)
			limiter, advance := tc.build(t, ft)
			up, _ := newTestUpstream(t, ft, limiter, Config{Store: store, MaxWait: -1})
			assert.Equal(t, 10, burst(t, up, "own"), "nothing stated: the limiter's own")
			_, err := store.Learn(context.Background(), "api", ratelimit.Policy{Limit: 4, Window: time.Second}, time.Minute)
			require.NoError(t, err)
			assert.Equal(t, 4, burst(t, up, "api"), "the stated 4 a second")
			ft.clock.Advance(2 * time.Second)
			if advance != nil {
				advance(2 * time.Second)
			}
			assert.Equal(t, 4, burst(t, up, "api"), "at 4 a second: full again 2 s later")
		})
	}
}

// shadowHooks counts the denials a Shadow let through.
type shadowHooks struct {
	ratelimit.NopHooks
	wouldDeny int
}

func (h *shadowHooks) Decided(e ratelimit.Event) {
	if e.WouldDeny {
		h.wouldDeny++
	}
}

func TestAShadowLetsEveryCallThroughAndReportsWhatALearnedLimitWouldDeny(t *testing.T) {
	ft := newFakeTime()
	store := NewMemoryStore(ft.clock)
	backend := ratelimit.Must(ratelimit.NewGCRA(10, time.Second, ratelimit.WithPolicyFunc(LearnedPolicy), ratelimit.WithClock(ft.clock)))
	hooks := &shadowHooks{}
	shadow := ratelimit.Must(ratelimit.NewShadow(backend, ratelimit.ShadowConfig{Hooks: hooks}))
	up, _ := newTestUpstream(t, ft, shadow, Config{Store: store, MaxWait: -1})
	_, err := store.Learn(context.Background(), "api", ratelimit.Policy{Limit: 4, Window: time.Second}, time.Minute)
	require.NoError(t, err)
	for range 6 {
		_, err := up.Admit(context.Background(), "api", 1)
		require.NoError(t, err, "nothing waits behind a Shadow")
	}
	assert.Equal(t, 2, hooks.wouldDeny, "the learned 4 would deny the 5th and 6th")
}
