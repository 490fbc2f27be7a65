package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// keyEnv is where a subject of the key tests keeps its state: a fake
// clock, and, on Redis, a client of miniredis or of a real server.
type keyEnv struct {
	clock  *ratelimittest.Clock
	m      *miniredis.Miniredis // nil in process and on a real server
	client *redis.Client
}

// keyRuleSubject is a limiter of the key tests, built with opts on an env.
type keyRuleSubject struct {
	name  string
	redis bool
	build func(t *testing.T, e *keyEnv, opts ...Option) Limiter
}

// keyRuleSubjects are the fourteen limiters of the package, a limit of 3.
func keyRuleSubjects() []keyRuleSubject {
	must := func(t *testing.T, l Limiter, err error) Limiter {
		t.Helper()
		require.NoError(t, err)
		return l
	}
	local := func(e *keyEnv, opts []Option) []Option { return append(opts, WithClock(e.clock)) }
	const w = 10 * time.Second
	return []keyRuleSubject{
		{"TokenBucket", false, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewTokenBucket(PerSecond(1), 3, local(e, o)...)
			return must(t, l, err)
		}},
		{"GCRA", false, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewGCRA(3, w, local(e, o)...)
			return must(t, l, err)
		}},
		{"FixedWindow", false, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewFixedWindow(3, w, local(e, o)...)
			return must(t, l, err)
		}},
		{"SlidingLog", false, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewSlidingLog(3, w, local(e, o)...)
			return must(t, l, err)
		}},
		{"SlidingCounter", false, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewSlidingCounter(3, w, local(e, o)...)
			return must(t, l, err)
		}},
		{"CalendarWindow", false, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewCalendarWindow(3, Calendar{Period: CalendarMinute}, local(e, o)...)
			return must(t, l, err)
		}},
		{"Concurrency", false, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewConcurrency(3, w, local(e, o)...)
			return must(t, l, err)
		}},
		{"RedisTokenBucket", true, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewRedisTokenBucket(e.client, PerSecond(1), 3, redisOpts(o)...)
			return must(t, l, err)
		}},
		{"RedisGCRA", true, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewRedisGCRA(e.client, 3, w, redisOpts(o)...)
			return must(t, l, err)
		}},
		{"RedisFixedWindow", true, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewRedisFixedWindow(e.client, 3, w, redisOpts(o)...)
			return must(t, l, err)
		}},
		{"RedisSlidingLog", true, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewRedisSlidingLog(e.client, 3, w, redisOpts(o)...)
			return must(t, l, err)
		}},
		{"RedisSlidingCounter", true, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewRedisSlidingCounter(e.client, 3, w, redisOpts(o)...)
			return must(t, l, err)
		}},
		{"RedisCalendarWindow", true, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			// Days: a real server's clock, which e.clock reads, crosses no
			// boundary within a test.
			l, err := NewRedisCalendarWindow(e.client, 3, Calendar{Period: CalendarDay}, append(redisOpts(o), WithClock(e.clock))...)
			return must(t, l, err)
		}},
		{"RedisConcurrency", true, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			l, err := NewRedisConcurrency(e.client, 3, w, redisOpts(o)...)
			return must(t, l, err)
		}},
	}
}

// keyStacks are the subjects and, around a token bucket in process and on
// Redis, a Composite of two parts (one keyed by Part.Key), a Guard, a
// DenyCache, a Shadow and a Prefetch, each layer built with opts (a
// decorator with h as its hooks).
func keyStacks() []keyRuleSubject {
	subjects := keyRuleSubjects()
	bucket, redisBucket := subjects[0], subjects[7]
	composite := func(base keyRuleSubject) keyRuleSubject {
		return keyRuleSubject{"Composite{" + base.name + "}", base.redis, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
			c, err := NewComposite(
				Part{Name: "user", Limiter: base.build(t, e, o...)},
				Part{Name: "tenant", Limiter: base.build(t, e, o...), Key: func(k string) string { return "{t}" + k }},
			)
			require.NoError(t, err)
			return c
		}}
	}
	decorators := func(base keyRuleSubject) []keyRuleSubject {
		hooksOf := func(o []Option) Hooks {
			var cfg config
			for _, opt := range o {
				_ = opt.applyLocal(&cfg)
			}
			return cfg.hooks
		}
		return []keyRuleSubject{
			{"Guard{" + base.name + "}", base.redis, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
				g, err := NewGuard(base.build(t, e, o...), GuardConfig{OnFailure: FailOpen, BreakerFailures: 1, BreakerCoolDown: time.Minute, Hooks: hooksOf(o), Clock: e.clock})
				require.NoError(t, err)
				return g
			}},
			{"DenyCache{" + base.name + "}", base.redis, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
				c, err := NewDenyCache(base.build(t, e, o...), DenyCacheConfig{MaxAge: time.Minute, Hooks: hooksOf(o), Clock: e.clock})
				require.NoError(t, err)
				return c
			}},
			{"Shadow{" + base.name + "}", base.redis, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
				s, err := NewShadow(base.build(t, e, o...), ShadowConfig{Hooks: hooksOf(o), Clock: e.clock})
				require.NoError(t, err)
				return s
			}},
			{"Prefetch{" + base.name + "}", base.redis, func(t *testing.T, e *keyEnv, o ...Option) Limiter {
				l, err := NewPrefetch(base.build(t, e, o...), PrefetchConfig{HotCalls: 1, Hooks: hooksOf(o)})
				require.NoError(t, err)
				t.Cleanup(func() { _ = l.Close(context.Background()) })
				return l
			}},
		}
	}
	out := append(subjects, composite(bucket), composite(redisBucket))
	out = append(out, decorators(bucket)...)
	return append(out, decorators(redisBucket)...)
}

// newKeyEnv returns an env on miniredis, or on a real redis-server when
// real is set (skipping the test without one).
func newKeyEnv(t *testing.T, real bool) *keyEnv {
	e := &keyEnv{clock: ratelimittest.NewClock(epoch)}
	if real {
		e.clock = ratelimittest.NewClock(time.Now())
		e.client = redistest.Shared(t).Client(t)
		return e
	}
	e.m, _, _ = miniredisClock(t)
	// No retries: a closed miniredis fails each call at once.
	e.client = redis.NewClient(&redis.Options{Addr: e.m.Addr(), MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = e.client.Close() })
	return e
}

// storedKeys returns how many keys an in-process limiter of the package
// (or a Composite or decorator of them) keeps state for.
func storedKeys(l Limiter) int {
	switch v := l.(type) {
	case *TokenBucket:
		return (*schedule)(v).tats.len()
	case *GCRA:
		return (*schedule)(v).tats.len()
	case *FixedWindow:
		return v.windows.len()
	case *SlidingLog:
		return v.logs.len()
	case *SlidingCounter:
		return v.keys.len()
	case *CalendarWindow:
		return v.windows.len()
	case *Concurrency:
		return v.keys.len()
	case *Composite:
		n := 0
		for _, p := range v.parts {
			n += storedKeys(p.Limiter)
		}
		return n
	case *Guard:
		return storedKeys(v.backend.Limiter)
	case *DenyCache:
		return v.denials.len() + storedKeys(v.backend.Limiter)
	case *Shadow:
		return storedKeys(v.backend.Limiter)
	case *Prefetch:
		return int(v.count.Load()) + storedKeys(v.backend.Limiter)
	}
	return 0
}

// keyCalls makes every call of l's that takes a key, on key, and returns
// their errors by name.
func keyCalls(ctx context.Context, l Limiter, key string) map[string]error {
	errs := map[string]error{}
	_, errs["Allow"] = l.Allow(ctx, key, 1)
	if d, ok := l.(Decider); ok {
		_, errs["Decide"] = d.Decide(ctx, key, 1)
	}
	if a, ok := l.(Acquirer); ok {
		var lease Lease
		lease, _, errs["Acquire"] = a.Acquire(ctx, key, 1)
		_ = lease.Release(ctx)
	}
	if a, ok := l.(Adjuster); ok {
		_, errs["Settle"] = a.Settle(ctx, key, 1, 2)
		_, errs["Refund"] = a.Refund(ctx, key, 1)
		errs["Reset"] = a.Reset(ctx, key)
	}
	return errs
}

func TestAKeyOverTheBoundIsRefusedAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	for _, real := range []bool{false, true} {
		for _, s := range keyStacks() {
			if real && !s.redis {
				continue
			}
			name := s.name
			if real {
				name = "real/" + name
			}
			t.Run(name, func(t *testing.T) {
				checkAKeyOverTheBoundIsRefused(t, s, real)
			})
		}
	}
}

// checkAKeyOverTheBoundIsRefused makes every call of s on a key of 1 MB,
// and on keys just within and just over a bound of 16, and checks that the
// long keys are refused with ErrInvalidKey (of class ErrCaller, never
// ErrBackend, the key's length and not the key in the error), that no
// PolicyFunc is asked and that nothing is stored, and that the key within
// the bound is decided.
func checkAKeyOverTheBoundIsRefused(t *testing.T, s keyRuleSubject, real bool) {
	ctx := context.Background()
	var asked atomic.Int64
	policy := WithPolicyFunc(func(context.Context, string) (Policy, error) {
		asked.Add(1)
		return Policy{}, nil
	})
	huge := strings.Repeat("k", 1<<20)
	for _, c := range []struct {
		name  string
		opts  []Option
		key   string
		bound int
	}{
		{"1 MB, default bound", nil, huge, DefaultMaxKeyLength},
		{"1 MB, with a PolicyFunc", []Option{policy}, huge, DefaultMaxKeyLength},
		{"17 bytes over 16", []Option{WithMaxKeyLength(16)}, strings.Repeat("x", 17), 16},
	} {
		e := newKeyEnv(t, real)
		l := s.build(t, e, c.opts...)
		for call, err := range keyCalls(ctx, l, c.key) {
			require.Error(t, err, "%s: %s", c.name, call)
			assert.ErrorIs(t, err, ErrInvalidKey, "%s: %s", c.name, call)
			assert.ErrorIs(t, err, ErrCaller, "%s: %s", c.name, call)
			assert.NotErrorIs(t, err, ErrBackend, "%s: %s", c.name, call)
			assert.Contains(t, err.Error(), fmt.Sprintf("a key of %d bytes; at most %d", len(c.key), c.bound), "%s: %s", c.name, call)
			assert.NotContains(t, err.Error(), c.key[:16], "%s: %s: the key is not in the error", c.name, call)
		}
		if pl, ok := l.(interface {
			Policies(context.Context, string) ([]NamedPolicy, error)
		}); ok && len(c.opts) > 0 && c.key == huge {
			// Policies asks a PolicyFunc of the key's policy: not of
			// one the limiter refuses.
			_, err := pl.Policies(ctx, c.key)
			assert.ErrorIs(t, err, ErrInvalidKey, "%s: Policies", c.name)
		}
		assert.Zero(t, asked.Load(), "%s: no PolicyFunc asked", c.name)
		assert.Zero(t, storedKeys(l), "%s: nothing stored in process", c.name)
		if e.client != nil {
			n, err := e.client.DBSize(ctx).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "%s: nothing written to Redis", c.name)
		}
	}
	// A key of exactly the bound is decided (a Composite's longest part
	// key, "{t}" + key, is).
	e := newKeyEnv(t, real)
	l := s.build(t, e, WithMaxKeyLength(16))
	within := 16
	if strings.HasPrefix(s.name, "Composite") {
		within -= len("{t}")
	}
	for call, err := range keyCalls(ctx, l, strings.Repeat("x", within)) {
		assert.NoError(t, err, call)
	}
}

func TestAGuardNeverCountsAKeyOverTheBound(t *testing.T) {
	ctx := context.Background()
	e := newKeyEnv(t, false)
	backend, err := NewRedisTokenBucket(e.client, PerSecond(1), 3)
	require.NoError(t, err)
	h := &recordingHooks{}
	g, err := NewGuard(backend, GuardConfig{OnFailure: FailOpen, BreakerFailures: 1, BreakerCoolDown: time.Minute, Hooks: h})
	require.NoError(t, err)
	long := strings.Repeat("k", DefaultMaxKeyLength+1)
	for range 5 {
		res, err := g.Allow(ctx, long, 1)
		require.ErrorIs(t, err, ErrInvalidKey)
		assert.False(t, res.Allowed, "never allowed by the failure policy")
	}
	assert.Equal(t, BreakerClosed, g.BreakerState())
	assert.Empty(t, h.changes, "the breaker never moved")
	for _, ev := range h.events {
		assert.Equal(t, FromBackend, ev.Source)
		assert.NoError(t, ev.BackendErr)
	}
}

func TestWithMaxKeyLengthRefusesABoundBelowOne(t *testing.T) {
	_, client, _ := miniredisClock(t)
	for _, n := range []int{0, -1} {
		_, err := NewTokenBucket(PerSecond(1), 1, WithMaxKeyLength(n))
		assert.ErrorIs(t, err, ErrInvalidConfig, "%d", n)
		_, err = NewRedisGCRA(client, 1, time.Second, WithMaxKeyLength(n))
		assert.ErrorIs(t, err, ErrInvalidConfig, "%d", n)
	}
}

func TestACompositePartsKeyIsBoundedByItsOwnLimiter(t *testing.T) {
	// Part.Key makes a long key of a short one: the part's limiter's
	// bound refuses it, naming the part, and no part is touched.
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	user, err := NewTokenBucket(PerSecond(1), 3, WithClock(clock))
	require.NoError(t, err)
	tenant, err := NewTokenBucket(PerSecond(1), 3, WithClock(clock), WithMaxKeyLength(8))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "user", Limiter: user}, Part{Name: "tenant", Limiter: tenant, Key: func(k string) string { return "tenant:" + k }})
	require.NoError(t, err)
	_, err = c.Allow(ctx, "a", 1)
	require.NoError(t, err, "tenant:a is 8 bytes")
	_, err = c.Allow(ctx, "ab", 1)
	require.ErrorIs(t, err, ErrInvalidKey)
	assert.Contains(t, err.Error(), `Composite part "tenant"`)
	assert.Equal(t, 2, storedKeys(c), "the call on \"ab\" touched no part")
}

// secretKey is the key of the secrecy tests: an API key, as a caller that
// limits by API key passes it.
const secretKey = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"

// keyRecorder keeps every event and adjustment it hears, and every
// breaker change.
type keyRecorder struct {
	mu      sync.Mutex
	events  []Event
	adjusts []AdjustEvent
}

func (h *keyRecorder) Decided(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

func (h *keyRecorder) BreakerChanged(BreakerState, BreakerState) {}

func (h *keyRecorder) Adjusted(ev AdjustEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.adjusts = append(h.adjusts, ev)
}

// texts returns every event and adjustment as text, with their errors.
func (h *keyRecorder) texts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.events {
		out = append(out, fmt.Sprintf("%+v", ev))
	}
	for _, ev := range h.adjusts {
		out = append(out, fmt.Sprintf("%+v", ev))
	}
	return out
}

// keys returns the keys of every event and adjustment.
func (h *keyRecorder) keys() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.events {
		out = append(out, ev.Key)
	}
	for _, ev := range h.adjusts {
		out = append(out, ev.Key)
	}
	return out
}

// secretCalls makes the calls of l on secretKey whose errors and reports
// would name it: decisions, adjustments and a lease's life, a cost over
// the limit, and, on Redis, a key that holds another's state and a server
// that is gone. It returns every error.
func secretCalls(t *testing.T, e *keyEnv, l Limiter, prefix string) []error {
	ctx := context.Background()
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	for _, err := range keyCalls(ctx, l, secretKey) {
		add(err)
	}
	if a, ok := l.(Acquirer); ok {
		lease, _, err := a.Acquire(ctx, secretKey, 1)
		add(err)
		if lease.Held() {
			errs = append(errs, errors.New(lease.String()))
			if ad, ok := l.(Adjuster); ok {
				add(ad.Reset(ctx, secretKey))
			}
			_, err = lease.Extend(ctx)
			add(err)
		}
	}
	_, err := l.Allow(ctx, secretKey, 99)
	add(err)
	if e.m != nil {
		// Another's state under the key, then a server that is gone.
		e.m.FlushAll()
		require.NoError(t, e.m.Set(prefix+secretKey, "not the limiter's"))
		for _, err := range keyCalls(ctx, l, secretKey) {
			add(err)
		}
		e.m.Close()
		for _, err := range keyCalls(ctx, l, secretKey) {
			add(err)
		}
	}
	return errs
}

// prefixOf returns the Redis key prefix of the limiter under a stack: its
// KeyPrefix, through decorators; "" in process.
func prefixOf(l Limiter) string {
	switch v := l.(type) {
	case interface{ KeyPrefix() string }:
		return v.KeyPrefix()
	case *Composite:
		return prefixOf(v.parts[0].Limiter)
	case *Guard:
		return prefixOf(v.backend.Limiter)
	case *DenyCache:
		return prefixOf(v.backend.Limiter)
	case *Shadow:
		return prefixOf(v.backend.Limiter)
	case *Prefetch:
		return prefixOf(v.backend.Limiter)
	}
	return ""
}

func TestNoErrorOrHookEventCarriesASecretKeyByDefault(t *testing.T) {
	t.Parallel()
	for _, s := range keyStacks() {
		t.Run(s.name, func(t *testing.T) {
			e := newKeyEnv(t, false)
			h := &keyRecorder{}
			l := s.build(t, e, WithHooks(h))
			errs := secretCalls(t, e, l, prefixOf(l))
			require.NotEmpty(t, errs)
			for _, err := range errs {
				assert.NotContains(t, err.Error(), secretKey)
			}
			require.NotEmpty(t, h.keys(), "the layers report")
			for _, k := range h.keys() {
				// A Composite's tenant part reports its own key.
				assert.Contains(t, []string{KeyDigest(secretKey), KeyDigest("{t}" + secretKey)}, k)
			}
			for _, text := range h.texts() {
				assert.NotContains(t, text, secretKey)
			}
		})
	}
}

func TestWithKeysShownShowsKeysInErrorsAndReports(t *testing.T) {
	t.Parallel()
	for _, s := range keyStacks() {
		t.Run(s.name, func(t *testing.T) {
			e := newKeyEnv(t, false)
			h := &keyRecorder{}
			l := s.build(t, e, WithHooks(h), WithKeysShown())
			errs := secretCalls(t, e, l, prefixOf(l))
			if s.redis {
				var named bool
				for _, err := range errs {
					named = named || strings.Contains(err.Error(), strconv.Quote(storedKey(prefixOf(l), secretKey)))
				}
				assert.True(t, named, "an error names the Redis key whole: %v", errs)
			}
			require.NotEmpty(t, h.keys())
			for _, k := range h.keys() {
				assert.Contains(t, k, secretKey)
			}
		})
	}
}

func TestKeyDigestIsTheSHA256OfTheKey(t *testing.T) {
	// printf %s abc | sha256sum: ba7816bf8f01cfea414140de5dae2223...
	assert.Equal(t, "sha256:ba7816bf8f01cfea", KeyDigest("abc"))
	assert.Equal(t, "sha256:e3b0c44298fc1c14", KeyDigest(""))
	assert.NotEqual(t, KeyDigest("user:1"), KeyDigest("user:2"))
}

// keylessRecorder is a keyRecorder that ignores keys (KeylessHooks).
type keylessRecorder struct{ keyRecorder }

func (*keylessRecorder) IgnoresKeys() {}

func TestKeylessHooksHearNoKeyAndCostNoDigest(t *testing.T) {
	for _, s := range keyStacks() {
		t.Run(s.name, func(t *testing.T) {
			e := newKeyEnv(t, false)
			h := &keylessRecorder{}
			l := s.build(t, e, WithHooks(h), WithKeysShown())
			_ = secretCalls(t, e, l, prefixOf(l))
			require.NotEmpty(t, h.keys())
			for _, k := range h.keys() {
				assert.Empty(t, k)
			}
		})
	}
	ctx := context.Background()
	tb, err := NewTokenBucket(PerSecond(1e6), 1<<30, WithHooks(&keylessRecorder{}))
	require.NoError(t, err)
	_, _ = tb.Allow(ctx, secretKey, 1)
	// The recorder's own appends aside (amortised), a report allocates
	// nothing.
	allocs := testing.AllocsPerRun(1000, func() { _, _ = tb.Allow(ctx, secretKey, 1) })
	assert.Less(t, allocs, 0.1)
}
