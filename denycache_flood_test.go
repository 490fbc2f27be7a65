package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// floodBackend is one backend of the DenyCache flood tests: a limiter, and
// the function that moves its time and the DenyCache's together (nil on a
// real server, whose time is its own).
type floodBackend struct {
	name    string
	limiter Decider
	step    func(time.Duration)
	clock   Clock
	exact   bool // both clocks are stepped together: local answers equal the backend's
}

// floodBackends returns the backends of the flood tests: the three
// algorithms, a Composite with a PerCall part and a limiter built
// WithPolicyFunc, in process, on miniredis and on a real server.
func floodBackends(t *testing.T) []floodBackend {
	t.Helper()
	plan := func(context.Context, string) (Policy, error) { return Policy{Limit: 150, Window: time.Minute}, nil }
	type builder func(local bool, client redis.Scripter, clock Clock) (Decider, error)
	kinds := []struct {
		name  string
		build builder
	}{
		{"TokenBucket", func(local bool, client redis.Scripter, clock Clock) (Decider, error) {
			if local {
				return NewTokenBucket(PerSecond(2), 100, WithClock(clock))
			}
			return NewRedisTokenBucket(client, PerSecond(2), 100)
		}},
		{"GCRA", func(local bool, client redis.Scripter, clock Clock) (Decider, error) {
			if local {
				return NewGCRA(100, time.Minute, WithClock(clock))
			}
			return NewRedisGCRA(client, 100, time.Minute)
		}},
		{"FixedWindow", func(local bool, client redis.Scripter, clock Clock) (Decider, error) {
			if local {
				return NewFixedWindow(100, time.Minute, WithClock(clock))
			}
			return NewRedisFixedWindow(client, 100, time.Minute)
		}},
		{"Composite", func(local bool, client redis.Scripter, clock Clock) (Decider, error) {
			var requests, tokens Limiter
			var err error
			if local {
				requests, err = NewGCRA(20, time.Minute, WithClock(clock))
				if err == nil {
					tokens, err = NewTokenBucket(PerSecond(3), 200, WithClock(clock))
				}
			} else {
				requests, err = NewRedisGCRA(client, 20, time.Minute)
				if err == nil {
					tokens, err = NewRedisTokenBucket(client, PerSecond(3), 200)
				}
			}
			if err != nil {
				return nil, err
			}
			return NewComposite(Part{Name: "requests", Limiter: requests, PerCall: true}, Part{Name: "tokens", Limiter: tokens})
		}},
		{"PolicyFunc", func(local bool, client redis.Scripter, clock Clock) (Decider, error) {
			if local {
				return NewGCRA(100, time.Minute, WithClock(clock), WithPolicyFunc(plan))
			}
			return NewRedisGCRA(client, 100, time.Minute, WithPolicyFunc(plan))
		}},
	}
	var out []floodBackend
	start := time.Unix(1_700_000_000, 0)
	for _, k := range kinds {
		clock := ratelimittest.NewClock(start)
		l, err := k.build(true, nil, clock)
		require.NoError(t, err)
		out = append(out, floodBackend{"in process/" + k.name, l, clock.Advance, clock, true})

		clock = ratelimittest.NewClock(start)
		_, client, step := redistest.Miniredis(t, start)
		l, err = k.build(false, client, nil)
		require.NoError(t, err)
		out = append(out, floodBackend{"miniredis/" + k.name, l, func(d time.Duration) { clock.Advance(d); step(d) }, clock, true})
	}
	server := redistest.Shared(t)
	for _, k := range kinds {
		l, err := k.build(false, server.Client(t), nil)
		require.NoError(t, err)
		out = append(out, floodBackend{name: "real Redis/" + k.name, limiter: l})
	}
	return out
}

// TestDenyCacheAnswersAFloodOfAnyCostLocally: on an exhausted key, a flood
// of one fixed cost (1, 7, 100) or of mixed costs is answered locally for
// at least 90% of its calls, and every local denial is one the backend
// would also make (asked at once, with no other traffic between): on a
// backend whose time is stepped with the cache's, the very same answer.
func TestDenyCacheAnswersAFloodOfAnyCostLocally(t *testing.T) {
	t.Parallel()
	for _, b := range floodBackends(t) {
		// The backends whose time the test steps run side by side, and
		// beside the other tests.
		if b.step != nil {
			t.Run(b.name, func(t *testing.T) {
				t.Parallel()
				floodTrial(t, b)
			})
		}
	}
}

// TestDenyCacheAnswersAFloodOfAnyCostLocallyOnARealServer does as
// TestDenyCacheAnswersAFloodOfAnyCostLocally on a real server, one backend
// after another and apart from the tests that run in parallel: there the
// direct call must follow the local denial at once.
func TestDenyCacheAnswersAFloodOfAnyCostLocallyOnARealServer(t *testing.T) {
	for _, b := range floodBackends(t) {
		if b.step == nil {
			t.Run(b.name, func(t *testing.T) { floodTrial(t, b) })
		}
	}
}

// floodTrial runs the floods of TestDenyCacheAnswersAFloodOfAnyCostLocally
// on b: the four floods on one backend share its clock, so they run one
// after another.
func floodTrial(t *testing.T, b floodBackend) {
	ctx := context.Background()
	costs := map[string]func(*rand.Rand) int{
		"cost 1":      func(*rand.Rand) int { return 1 },
		"cost 7":      func(*rand.Rand) int { return 7 },
		"cost 100":    func(*rand.Rand) int { return 100 },
		"mixed costs": func(r *rand.Rand) int { return 1 + r.IntN(100) },
	}
	for costName, cost := range costs {
		t.Run(costName, func(t *testing.T) {
			key := "flood:" + b.name + ":" + costName + ":" + strconv.FormatInt(time.Now().UnixNano(), 36)
			cache, err := NewDenyCache(b.limiter, DenyCacheConfig{Clock: b.clock})
			require.NoError(t, err)
			// Exhaust the key.
			for {
				d, err := b.limiter.Decide(ctx, key, 1)
				require.NoError(t, err)
				if !d.Allowed {
					break
				}
			}
			r := rand.New(rand.NewPCG(1, 2))
			// 1000 calls 10 ms apart in process; on Redis 400 (on
			// miniredis 4 s: past MaxAge four times, and past the
			// refill of 7 units of the token bucket), 1000 under -soak.
			calls := 1000
			if !strings.HasPrefix(b.name, "in process/") {
				calls = sized(400, 1000)
			}
			local := 0
			for range calls {
				if b.step != nil {
					b.step(10 * time.Millisecond)
				}
				n := cost(r)
				d, err := cache.Decide(ctx, key, n)
				require.NoError(t, err)
				if d.Source != FromDenyCache {
					continue
				}
				local++
				require.False(t, d.Allowed)
				direct, err := b.limiter.Decide(ctx, key, n)
				require.NoError(t, err)
				require.False(t, direct.Allowed, "a local denial of %d the backend would allow: %+v", n, direct.Result)
				if b.exact {
					assert.Equal(t, direct.Result, d.Result, "cost %d", n)
					assert.Equal(t, direct.Parts, d.Parts, "cost %d", n)
					assert.Equal(t, direct.PolicyIndex, d.PolicyIndex, "cost %d", n)
				}
			}
			assert.GreaterOrEqual(t, local, calls*9/10, "calls answered locally")
		})
	}
}

// gatedLimiter is a Decider and Adjuster around a limiter whose Decide,
// once armed, waits for release before returning what it decided.
type gatedLimiter struct {
	*TokenBucket
	armed   bool
	decided chan struct{}
	release chan struct{}
}

// Decide decides through the bucket and, when armed, holds the answer.
func (g *gatedLimiter) Decide(ctx context.Context, key string, n int) (Decision, error) {
	d, err := g.TokenBucket.Decide(ctx, key, n)
	if g.armed {
		g.decided <- struct{}{}
		<-g.release
	}
	return d, err
}

// TestDenyCacheForgetsADenialARefundOvertook: a Refund through the cache
// that completes while a denial is on its way back from the backend keeps
// that denial from answering later calls.
func TestDenyCacheForgetsADenialARefundOvertook(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(time.Unix(0, 0))
	b, err := NewTokenBucket(Every(1000*time.Second), 3, WithClock(clock))
	require.NoError(t, err)
	g := &gatedLimiter{TokenBucket: b, decided: make(chan struct{}), release: make(chan struct{})}
	cache, err := NewDenyCache(g, DenyCacheConfig{Clock: clock, MaxAge: time.Hour})
	require.NoError(t, err)
	res, err := cache.Allow(ctx, "k", 3)
	require.NoError(t, err)
	require.True(t, res.Allowed)

	g.armed = true
	done := make(chan Decision)
	go func() {
		d, _ := cache.Decide(ctx, "k", 1)
		done <- d
	}()
	<-g.decided // the backend has denied
	_, err = cache.Refund(ctx, "k", 3)
	require.NoError(t, err)
	close(g.release)
	d := <-done
	assert.False(t, d.Allowed, "the denial made before the Refund")
	g.armed = false

	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source, "the denial the Refund overtook is not remembered")
	assert.True(t, d.Allowed)
}

// TestDenyCacheForgetsOtherKeysDenialsOnASharedPartGivenBack: when one
// user's Composite call gives units back to the part it shares with other
// users (their tenant's), the denials remembered for those users on that
// part are forgotten.
func TestDenyCacheForgetsOtherKeysDenialsOnASharedPartGivenBack(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(time.Unix(0, 0))
	users, err := NewGCRA(1000, time.Hour, WithClock(clock))
	require.NoError(t, err)
	tenants, err := NewGCRA(100, 24*time.Hour, WithClock(clock))
	require.NoError(t, err)
	tenantOf := func(key string) string { return "tenant:" + key[:1] }
	c, err := NewComposite(Part{Name: "user", Limiter: users}, Part{Name: "tenant", Limiter: tenants, Key: tenantOf})
	require.NoError(t, err)
	cache, err := NewDenyCache(c, DenyCacheConfig{Clock: clock, MaxAge: time.Hour})
	require.NoError(t, err)

	res, err := cache.Allow(ctx, "a-alice", 100)
	require.NoError(t, err)
	require.True(t, res.Allowed, "alice takes the whole tenant")
	d, err := cache.Decide(ctx, "a-bob", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, "tenant", d.Policy.Name)
	d, err = cache.Decide(ctx, "a-bob", 1)
	require.NoError(t, err)
	require.Equal(t, FromDenyCache, d.Source, "bob's denial is remembered")

	_, err = cache.Settle(ctx, "a-alice", 100, 1) // alice used 1
	require.NoError(t, err)
	d, err = cache.Decide(ctx, "a-bob", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	assert.True(t, d.Allowed, "the tenant has 99 left")
	assert.Equal(t, 98, d.Parts[1].Remaining)
}

// TestDenyCacheBoundsWhatItCannotSeeByMaxAge: a give-back made around the
// cache (another replica's) is seen once MaxAge has passed.
func TestDenyCacheBoundsWhatItCannotSeeByMaxAge(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(time.Unix(0, 0))
	b, err := NewTokenBucket(Every(1000*time.Second), 2, WithClock(clock))
	require.NoError(t, err)
	cache, err := NewDenyCache(b, DenyCacheConfig{Clock: clock})
	require.NoError(t, err)
	for range 3 {
		_, err = cache.Allow(ctx, "k", 1)
		require.NoError(t, err)
	}
	_, err = b.Refund(ctx, "k", 1) // around the cache
	require.NoError(t, err)
	d, err := cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromDenyCache, d.Source, "within MaxAge the cache cannot know")
	clock.Advance(time.Second)
	d, err = cache.Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source, "the default MaxAge is 1 s")
	assert.True(t, d.Allowed)
}
