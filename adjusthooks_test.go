package ratelimit

import (
	"context"
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

// adjustRecorder is a Hooks that also keeps the adjustments it is told of.
type adjustRecorder struct {
	recordingHooks
	amu         sync.Mutex
	adjustments []AdjustEvent
}

func (h *adjustRecorder) Adjusted(ev AdjustEvent) {
	h.amu.Lock()
	defer h.amu.Unlock()
	h.adjustments = append(h.adjustments, ev)
}

// take returns the adjustments reported since the last take, with their
// latencies checked and zeroed and their errors checked against want (nil:
// none) and removed, so that the rest compares with assert.Equal.
func (h *adjustRecorder) take(t *testing.T, want error) []AdjustEvent {
	t.Helper()
	h.amu.Lock()
	defer h.amu.Unlock()
	got := h.adjustments
	h.adjustments = nil
	for i := range got {
		assert.GreaterOrEqual(t, got[i].Latency, time.Duration(0))
		got[i].Latency = 0
		if want == nil {
			assert.NoError(t, got[i].Err)
		} else {
			assert.ErrorIs(t, got[i].Err, want)
		}
		got[i].Err = nil
	}
	return got
}

var (
	_ AdjustHooks = NopHooks{}
	_ AdjustHooks = (*adjustRecorder)(nil)
)

// adjustSubject is an Adjuster of 3 units per 3 s whose adjustments a
// recorder hears, and the names it reports them under.
type adjustSubject struct {
	name     string
	build    func(t *testing.T, h Hooks, client *redis.Client) Adjuster
	redis    bool
	reporter string
}

// adjustSubjects are every limiter of the package, built WithHooks, and
// each decorator with the Hooks in its config around a limiter without.
func adjustSubjects() []adjustSubject {
	clock := func() Option { return WithClock(ratelimittest.NewClock(epoch)) }
	must := func(t *testing.T, l Adjuster, err error) Adjuster {
		t.Helper()
		require.NoError(t, err)
		return l
	}
	bucket := func(t *testing.T) Adjuster {
		l, err := NewTokenBucket(PerSecond(1), 3, clock())
		return must(t, l, err)
	}
	return []adjustSubject{
		{"TokenBucket", func(t *testing.T, h Hooks, _ *redis.Client) Adjuster {
			l, err := NewTokenBucket(PerSecond(1), 3, clock(), WithHooks(h))
			return must(t, l, err)
		}, false, "TokenBucket"},
		{"GCRA", func(t *testing.T, h Hooks, _ *redis.Client) Adjuster {
			l, err := NewGCRA(3, 3*time.Second, clock(), WithHooks(h), WithName("gcra"))
			return must(t, l, err)
		}, false, "gcra"},
		{"FixedWindow", func(t *testing.T, h Hooks, _ *redis.Client) Adjuster {
			l, err := NewFixedWindow(3, 3*time.Second, clock(), WithHooks(h))
			return must(t, l, err)
		}, false, "FixedWindow"},
		{"FixedWindowWithPolicyFunc", func(t *testing.T, h Hooks, _ *redis.Client) Adjuster {
			f := func(context.Context, string) (Policy, error) { return Policy{Limit: 3, Window: 3 * time.Second}, nil }
			l, err := NewFixedWindow(5, time.Second, clock(), WithHooks(h), WithPolicyFunc(f))
			return must(t, l, err)
		}, false, "FixedWindow"},
		{"RedisTokenBucket", func(t *testing.T, h Hooks, c *redis.Client) Adjuster {
			l, err := NewRedisTokenBucket(c, PerSecond(1), 3, WithHooks(h))
			return must(t, l, err)
		}, true, "RedisTokenBucket"},
		{"RedisGCRA", func(t *testing.T, h Hooks, c *redis.Client) Adjuster {
			l, err := NewRedisGCRA(c, 3, 3*time.Second, WithHooks(h))
			return must(t, l, err)
		}, true, "RedisGCRA"},
		{"RedisFixedWindow", func(t *testing.T, h Hooks, c *redis.Client) Adjuster {
			l, err := NewRedisFixedWindow(c, 3, 3*time.Second, WithHooks(h), WithName("window"))
			return must(t, l, err)
		}, true, "window"},
		{"SlidingCounter", func(t *testing.T, h Hooks, _ *redis.Client) Adjuster {
			l, err := NewSlidingCounter(3, 3*time.Second, clock(), WithHooks(h))
			return must(t, l, err)
		}, false, "SlidingCounter"},
		{"RedisSlidingCounter", func(t *testing.T, h Hooks, c *redis.Client) Adjuster {
			l, err := NewRedisSlidingCounter(c, 3, 3*time.Second, WithHooks(h), WithName("sliding"))
			return must(t, l, err)
		}, true, "sliding"},
		{"Guard", func(t *testing.T, h Hooks, _ *redis.Client) Adjuster {
			l, err := NewGuard(bucket(t), GuardConfig{Hooks: h, Clock: ratelimittest.NewClock(epoch)})
			return must(t, l, err)
		}, false, "Guard"},
		{"GuardOnRedis", func(t *testing.T, h Hooks, c *redis.Client) Adjuster {
			backend, err := NewRedisTokenBucket(c, PerSecond(1), 3)
			require.NoError(t, err)
			l, err := NewGuard(backend, GuardConfig{Hooks: h, Name: "guard", OnFailure: FailOpen, BreakerFailures: 1, BreakerCoolDown: time.Minute})
			return must(t, l, err)
		}, true, "guard"},
		{"Shadow", func(t *testing.T, h Hooks, _ *redis.Client) Adjuster {
			l, err := NewShadow(bucket(t), ShadowConfig{Hooks: h})
			return must(t, l, err)
		}, false, "Shadow"},
		{"DenyCache", func(t *testing.T, h Hooks, _ *redis.Client) Adjuster {
			l, err := NewDenyCache(bucket(t), DenyCacheConfig{Hooks: h, Name: "cache"})
			return must(t, l, err)
		}, false, "cache"},
	}
}

func TestEveryAdjusterReportsItsAdjustmentsToAdjustHooks(t *testing.T) {
	for _, s := range adjustSubjects() {
		t.Run(s.name, func(t *testing.T) {
			_, client, _ := miniredisClock(t)
			checkAdjustReports(t, s, client)
		})
	}
}

// checkAdjustReports runs Settles, a Refund, refused adjustments and a
// Reset through s, built on client, and checks what each reports.
func checkAdjustReports(t *testing.T, s adjustSubject, client *redis.Client) {
	t.Helper()
	ctx := context.Background()
	h := &adjustRecorder{}
	l := s.build(t, h, client)
	ev := func(op AdjustOp, taken, cost int, token string, res Result) AdjustEvent {
		return AdjustEvent{Limiter: s.reporter, Op: op, Key: KeyDigest("k"), Taken: taken, Cost: cost, Token: token, Result: res}
	}

	res, err := l.Allow(ctx, "k", 2)
	require.NoError(t, err)
	require.True(t, res.Allowed)
	assert.Empty(t, h.take(t, nil), "a decision is no adjustment")

	res, err = l.Settle(ctx, "k", 2, 3, WithToken("req-1"))
	require.NoError(t, err)
	assert.Equal(t, 0, res.Remaining)
	assert.Equal(t, []AdjustEvent{ev(AdjustSettle, 2, 3, "req-1", res)}, h.take(t, nil))

	res, err = l.Refund(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Remaining)
	assert.Equal(t, []AdjustEvent{ev(AdjustRefund, 1, 0, "", res)}, h.take(t, nil))

	res, err = l.Settle(ctx, "k", -1, 2)
	require.ErrorIs(t, err, ErrInvalidCost)
	assert.Equal(t, Result{Limit: 3}, res)
	assert.Equal(t, []AdjustEvent{ev(AdjustSettle, -1, 2, "", res)}, h.take(t, ErrInvalidCost),
		"a refused adjustment is reported with its error")

	_, err = l.Settle(ctx, "k", 0, 1, WithToken(""))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Len(t, h.take(t, ErrInvalidConfig), 1, "a bad option is reported with its error")

	require.NoError(t, l.Reset(ctx, "k"))
	assert.Equal(t, []AdjustEvent{ev(AdjustReset, 0, 0, "", Result{})}, h.take(t, nil))

	res, err = l.Allow(ctx, "k", 3)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the Reset was applied")
}

func TestRealRedisAdjustmentsAreReportedAndFailWhenTheServerIsGone(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t, func(o *redis.Options) { o.MaxRetries, o.DialerRetries = -1, 1 })
	for _, s := range adjustSubjects() {
		if s.redis {
			t.Run(s.name, func(t *testing.T) {
				require.NoError(t, client.FlushAll(context.Background()).Err())
				checkAdjustReports(t, s, client)
			})
		}
	}
	t.Run("Composite", func(t *testing.T) {
		require.NoError(t, client.FlushAll(context.Background()).Err())
		checkCompositeReports(t, compositeSubjects()["Redis"], client)
	})
	h := &adjustRecorder{}
	l, err := NewRedisGCRA(client, 3, 3*time.Second, WithHooks(h))
	require.NoError(t, err)
	server.Kill()
	res, err := l.Settle(context.Background(), "k", 1, 2, WithToken("req-2"))
	require.ErrorIs(t, err, ErrBackend)
	assert.Equal(t, []AdjustEvent{{Limiter: "RedisGCRA", Op: AdjustSettle, Key: KeyDigest("k"), Taken: 1, Cost: 2, Token: "req-2", Result: res}},
		h.take(t, ErrBackend))
}

func TestAdjustmentsRedisCouldNotApplyAreReportedWithTheBackendError(t *testing.T) {
	ctx := context.Background()
	for _, s := range adjustSubjects() {
		if !s.redis {
			continue
		}
		t.Run(s.name, func(t *testing.T) {
			h := &adjustRecorder{}
			m, _, _ := miniredisClock(t)
			// A client that does not retry, to a Redis that is down.
			client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
			t.Cleanup(func() { _ = client.Close() })
			l := s.build(t, h, client)
			m.Close()

			res, err := l.Settle(ctx, "k", 1, 2)
			require.ErrorIs(t, err, ErrBackend, "an adjustment bypasses a Guard's failure policy")
			assert.Equal(t, Result{Limit: 3}, res)
			assert.Equal(t, []AdjustEvent{{Limiter: s.reporter, Op: AdjustSettle, Key: KeyDigest("k"), Taken: 1, Cost: 2, Result: res}},
				h.take(t, ErrBackend))

			res, err = l.Refund(ctx, "k", 1)
			require.ErrorIs(t, err, ErrBackend)
			assert.Equal(t, []AdjustEvent{{Limiter: s.reporter, Op: AdjustRefund, Key: KeyDigest("k"), Taken: 1, Result: res}},
				h.take(t, ErrBackend))

			require.ErrorIs(t, l.Reset(ctx, "k"), ErrBackend)
			assert.Equal(t, []AdjustEvent{{Limiter: s.reporter, Op: AdjustReset, Key: KeyDigest("k")}}, h.take(t, ErrBackend))
		})
	}
	t.Run("Composite", func(t *testing.T) {
		h := &adjustRecorder{}
		m, _, _ := miniredisClock(t)
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1, DialerRetryTimeout: time.Millisecond})
		t.Cleanup(func() { _ = client.Close() })
		c := compositeSubjects()["Redis"](t, h, client)
		m.Close()

		_, err := c.Settle(ctx, "k", 2, 3)
		require.ErrorIs(t, err, ErrBackend)
		assert.Equal(t, []AdjustEvent{
			{Limiter: "units", Op: AdjustSettle, Key: KeyDigest("k"), Taken: 2, Cost: 3, Result: Result{Limit: 3}},
			{Limiter: "calls", Op: AdjustSettle, Key: KeyDigest("tenant"), Taken: 1, Cost: 1, Result: Result{Limit: 10}},
		}, h.take(t, ErrBackend), "each part reports its own key and the call's error")
	})
}

// compositeSubjects build a Composite of a part counting units on the
// call's key and one counting calls on "tenant", both reporting to h, in
// process and on a miniredis.
func compositeSubjects() map[string]func(t *testing.T, h Hooks, client *redis.Client) *Composite {
	build := func(t *testing.T, units, calls Limiter) *Composite {
		c, err := NewComposite(
			Part{Name: "units", Limiter: units},
			Part{Name: "calls", Limiter: calls, PerCall: true, Key: func(string) string { return "tenant" }},
		)
		require.NoError(t, err)
		return c
	}
	return map[string]func(t *testing.T, h Hooks, client *redis.Client) *Composite{
		"InProcess": func(t *testing.T, h Hooks, _ *redis.Client) *Composite {
			units, err := NewTokenBucket(PerSecond(1), 3, WithClock(ratelimittest.NewClock(epoch)), WithHooks(h), WithName("units"))
			require.NoError(t, err)
			calls, err := NewFixedWindow(10, time.Minute, WithClock(ratelimittest.NewClock(epoch)), WithHooks(h), WithName("calls"))
			require.NoError(t, err)
			return build(t, units, calls)
		},
		"Redis": func(t *testing.T, h Hooks, client *redis.Client) *Composite {
			units, err := NewRedisTokenBucket(client, PerSecond(1), 3, WithHooks(h), WithName("units"))
			require.NoError(t, err)
			calls, err := NewRedisFixedWindow(client, 10, time.Minute, WithHooks(h), WithName("calls"))
			require.NoError(t, err)
			return build(t, units, calls)
		},
	}
}

func TestCompositePartsReportTheirOwnShareOfAnAdjustment(t *testing.T) {
	for name, build := range compositeSubjects() {
		t.Run(name, func(t *testing.T) {
			_, client, _ := miniredisClock(t)
			checkCompositeReports(t, build, client)
		})
	}
}

// checkCompositeReports runs adjustments through a Composite build makes
// on client, and checks what each part reports.
func checkCompositeReports(t *testing.T, build func(t *testing.T, h Hooks, client *redis.Client) *Composite, client *redis.Client) {
	t.Helper()
	ctx := context.Background()
	h := &adjustRecorder{}
	c := build(t, h, client)
	_, err := c.Allow(ctx, "k", 2)
	require.NoError(t, err)
	_, err = c.Allow(ctx, "k", 1)
	require.NoError(t, err)

	_, err = c.Settle(ctx, "k", 1, 0, WithToken("req-1"))
	require.NoError(t, err)
	got := h.take(t, nil)
	require.Len(t, got, 2)
	assert.Equal(t, AdjustEvent{Limiter: "units", Op: AdjustSettle, Key: KeyDigest("k"), Taken: 1, Cost: 0, Token: "req-1",
		Result: got[0].Result}, got[0])
	assert.Equal(t, 1, got[0].Result.Remaining, "3 - 2 - 1 + 1")
	assert.Equal(t, AdjustEvent{Limiter: "calls", Op: AdjustSettle, Key: KeyDigest("tenant"), Taken: 1, Cost: 0, Token: "req-1",
		Result: got[1].Result}, got[1], "a part counting calls reports the call it gave back")
	assert.Equal(t, 9, got[1].Result.Remaining, "10 - 2 calls + 1 given back")

	_, err = c.Refund(ctx, "k", 1)
	require.NoError(t, err)
	got = h.take(t, nil)
	require.Len(t, got, 2)
	assert.Equal(t, AdjustRefund, got[0].Op)
	assert.Equal(t, 2, got[0].Result.Remaining)
	assert.Equal(t, [2]int{1, 0}, [2]int{got[1].Taken, got[1].Cost})
	assert.Equal(t, 10, got[1].Result.Remaining)

	_, err = c.Settle(ctx, "k", 4, 4)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.Equal(t, []AdjustEvent{
		{Limiter: "units", Op: AdjustSettle, Key: KeyDigest("k"), Taken: 4, Cost: 4, Result: Result{Limit: 3}},
		{Limiter: "calls", Op: AdjustSettle, Key: KeyDigest("k"), Taken: 1, Cost: 1, Result: Result{Limit: 10}},
	}, h.take(t, ErrCostExceedsLimit), "an error before the parts' keys were derived reports the call's key")

	require.NoError(t, c.Reset(ctx, "k"))
	assert.Equal(t, []AdjustEvent{
		{Limiter: "units", Op: AdjustReset, Key: KeyDigest("k")},
		{Limiter: "calls", Op: AdjustReset, Key: KeyDigest("tenant")},
	}, h.take(t, nil))
}

func TestHooksWithoutAdjustedHearOnlyDecisions(t *testing.T) {
	ctx := context.Background()
	for _, s := range adjustSubjects() {
		t.Run(s.name, func(t *testing.T) {
			h := &recordingHooks{}
			_, client, _ := miniredisClock(t)
			l := s.build(t, h, client)
			_, err := l.Allow(ctx, "k", 2)
			require.NoError(t, err)
			_, err = l.Settle(ctx, "k", 2, 3)
			require.NoError(t, err)
			_, err = l.Refund(ctx, "k", 1)
			require.NoError(t, err)
			require.NoError(t, l.Reset(ctx, "k"))
			h.mu.Lock()
			defer h.mu.Unlock()
			assert.LessOrEqual(t, len(h.events), 1, "the Allow only, if the reporter reports it")
		})
	}
}

func TestAdjustmentsCostNoAllocationWhetherOrNotHooksListen(t *testing.T) {
	// Reporting costs nothing but the key's digest in each report (see
	// WithKeysShown): one allocation per AdjustEvent.
	ctx := context.Background()
	listener := &countingListener{}
	hooks := map[string]Hooks{"no hooks": nil, "Decided only": &recordingHooks{}, "AdjustHooks": listener}
	subjects := adjustSubjects()
	subjects = append(subjects, adjustSubject{name: "Composite", build: func(t *testing.T, h Hooks, client *redis.Client) Adjuster {
		return compositeSubjects()["InProcess"](t, h, client)
	}})
	for hname, h := range hooks {
		for _, s := range subjects {
			if s.redis {
				continue
			}
			t.Run(hname+"/"+s.name, func(t *testing.T) {
				if raceEnabled && s.name == "Composite" {
					t.Skip("the race detector's sync.Pool drops a Composite's call buffers at random: counted without -race")
				}
				var l Adjuster
				if h == nil {
					l = s.build(t, NopHooks{}, nil)
				} else {
					l = s.build(t, h, nil)
				}
				_, err := l.Allow(ctx, "k", 1)
				require.NoError(t, err)
				listener.n.Store(0)
				allocs := testing.AllocsPerRun(100, func() {
					_, _ = l.Settle(ctx, "k", 1, 2)
					_, _ = l.Refund(ctx, "k", 1)
					_ = l.Reset(ctx, "k")
				})
				digests := float64(listener.n.Load()) / 101 // AllocsPerRun's warm-up run too
				assert.Equal(t, digests, allocs)
			})
		}
	}
}

// nopListener listens to everything and does nothing, so that what
// reporting itself costs shows.
type nopListener struct{ NopHooks }

func (nopListener) Decided(Event) {}

// countingListener is a nopListener that counts the adjustments it hears.
type countingListener struct {
	nopListener
	n atomic.Int64
}

func (c *countingListener) Adjusted(AdjustEvent) { c.n.Add(1) }

// BenchmarkTokenBucketSettle measures a Settle and a Refund on one key,
// without hooks, with hooks that hear decisions only, and with
// AdjustHooks that do nothing: what reporting itself costs.
func BenchmarkTokenBucketSettle(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []Option
	}{
		{"NoHooks", nil},
		{"DecidedOnly", []Option{WithHooks(&recordingHooks{})}},
		{"AdjustHooks", []Option{WithHooks(nopListener{})}},
	} {
		b.Run(c.name, func(b *testing.B) {
			l, err := NewTokenBucket(PerSecond(1e8), 1<<20, c.opts...)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_, _ = l.Settle(ctx, "hot", 1, 2)
				_, _ = l.Refund(ctx, "hot", 1)
			}
		})
	}
}

// A keyed Composite part's report of a failed adjustment names its key's
// limit, as its report of a failed decision does.
func TestCompositeKeyedPartReportsItsKeysLimitOnAFailedAdjustment(t *testing.T) {
	t.Parallel()
	mr, client, _ := miniredisClock(t)
	ctx := context.Background()
	h := &adjustRecorder{}
	keyed, err := NewRedisGCRA(client, 4, time.Second, WithHooks(h),
		WithPolicyFunc(func(_ context.Context, key string) (Policy, error) {
			if key == "u1" {
				return Policy{Limit: 10, Window: time.Second}, nil
			}
			return Policy{}, nil
		}))
	require.NoError(t, err)
	plain, err := NewRedisGCRA(client, 6, time.Second, WithKeyPrefix("p:"))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "k", Limiter: keyed}, Part{Name: "p", Limiter: plain})
	require.NoError(t, err)
	mr.Close()
	_, err = c.Refund(ctx, "u1", 1)
	require.Error(t, err)
	require.NotEmpty(t, h.adjustments)
	assert.Equal(t, 10, h.adjustments[len(h.adjustments)-1].Result.Limit)
}
