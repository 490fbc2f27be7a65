package ratelimit

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// anchorBackend is a backend of the anchor tests: a limiter whose key can
// hold units after a denial, and the function that moves its time (nil on
// a real server, whose time is its own).
type anchorBackend struct {
	name string
	l    Limiter
	step func(time.Duration)
}

// anchorBackends returns a token bucket that refills one unit a minute and
// a fixed window of a minute, both of limit 10, in process, on miniredis
// and on a real server.
func anchorBackends(t *testing.T) []anchorBackend {
	t.Helper()
	var out []anchorBackend
	clock := ratelimittest.NewClock(epoch)
	bucket, err := NewTokenBucket(PerMinute(1), 10, WithClock(clock))
	require.NoError(t, err)
	out = append(out, anchorBackend{"in process/TokenBucket", bucket, clock.Advance})
	clock = ratelimittest.NewClock(epoch)
	window, err := NewFixedWindow(10, time.Minute, WithClock(clock))
	require.NoError(t, err)
	out = append(out, anchorBackend{"in process/FixedWindow", window, clock.Advance})

	redisKinds := []struct {
		name  string
		build func(client redis.Scripter) (Limiter, error)
	}{
		{"RedisTokenBucket", func(c redis.Scripter) (Limiter, error) { return NewRedisTokenBucket(c, PerMinute(1), 10) }},
		{"RedisFixedWindow", func(c redis.Scripter) (Limiter, error) { return NewRedisFixedWindow(c, 10, time.Minute) }},
	}
	for _, k := range redisKinds {
		_, client, step := miniredisClock(t)
		l, err := k.build(client)
		require.NoError(t, err)
		out = append(out, anchorBackend{"miniredis/" + k.name, l, step})
	}
	client := redistest.Shared(t).Client(t)
	for _, k := range redisKinds {
		l, err := k.build(client)
		require.NoError(t, err)
		out = append(out, anchorBackend{name: "real Redis/" + k.name, l: l})
	}
	return out
}

// TestDenyCacheAsksTheBackendOnceMaxAgeHasPassedSinceTheDenial: an allowed
// answer on a key whose denial is remembered (a smaller call that fits)
// does not make the denial last longer: once MaxAge has passed since the
// backend's denial, every call goes to the backend. In process, on
// miniredis and on a real server (the DenyCache on a fake clock: a minute's
// key does not move in the test's second).
func TestDenyCacheAsksTheBackendOnceMaxAgeHasPassedSinceTheDenial(t *testing.T) {
	ctx := context.Background()
	for _, b := range anchorBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			clock := ratelimittest.NewClock(epoch)
			advance := func(d time.Duration) {
				clock.Advance(d)
				if b.step != nil {
					b.step(d)
				}
			}
			cache, err := NewDenyCache(b.l, DenyCacheConfig{Clock: clock, MaxAge: time.Second})
			require.NoError(t, err)
			key := "anchor:" + strconv.FormatInt(time.Now().UnixNano(), 36)
			d, err := cache.Decide(ctx, key, 6)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			d, err = cache.Decide(ctx, key, 5) // 4 left: denied, remembered
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Equal(t, FromBackend, d.Source)
			d, err = cache.Decide(ctx, key, 5)
			require.NoError(t, err)
			require.Equal(t, FromDenyCache, d.Source, "remembered")

			advance(600 * time.Millisecond)
			d, err = cache.Decide(ctx, key, 1) // fits: the backend allows it
			require.NoError(t, err)
			require.True(t, d.Allowed)
			require.Equal(t, FromBackend, d.Source)
			d, err = cache.Decide(ctx, key, 5)
			require.NoError(t, err)
			assert.Equal(t, FromDenyCache, d.Source, "still within MaxAge of the denial")

			advance(500 * time.Millisecond) // 1.1 s after the denial
			d, err = cache.Decide(ctx, key, 5)
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Equal(t, FromBackend, d.Source, "MaxAge has passed since the denial: the backend answers")
		})
	}
}

// TestDenyCacheDoesNotDenyUnderAPolicyThatNeverDenied: a key's denial is
// remembered under its free plan; the key is raised to pro, and its next
// call, allowed by the backend, drops the denial: a call the pro plan's
// state would deny goes to the backend, which denies it itself. In process
// and on miniredis.
func TestDenyCacheDoesNotDenyUnderAPolicyThatNeverDenied(t *testing.T) {
	ctx := context.Background()
	free, pro := Policy{Limit: 2, Window: time.Minute}, Policy{Limit: 10, Window: time.Minute}
	builds := map[string]func(t *testing.T, plans *planMap, clock Clock) Limiter{
		"GCRA": func(t *testing.T, plans *planMap, clock Clock) Limiter {
			l, err := NewGCRA(2, time.Minute, WithClock(clock), WithPolicyFunc(plans.f))
			require.NoError(t, err)
			return l
		},
		"FixedWindow": func(t *testing.T, plans *planMap, clock Clock) Limiter {
			l, err := NewFixedWindow(2, time.Minute, WithClock(clock), WithPolicyFunc(plans.f))
			require.NoError(t, err)
			return l
		},
		"RedisGCRA/miniredis": func(t *testing.T, plans *planMap, _ Clock) Limiter {
			_, client, _ := miniredisClock(t)
			l, err := NewRedisGCRA(client, 2, time.Minute, WithPolicyFunc(plans.f))
			require.NoError(t, err)
			return l
		},
		"RedisFixedWindow/miniredis": func(t *testing.T, plans *planMap, _ Clock) Limiter {
			_, client, _ := miniredisClock(t)
			l, err := NewRedisFixedWindow(client, 2, time.Minute, WithPolicyFunc(plans.f))
			require.NoError(t, err)
			return l
		},
	}
	for name, build := range builds {
		t.Run(name, func(t *testing.T) {
			plans := newPlanMap()
			plans.set("k", free)
			clock := ratelimittest.NewClock(epoch)
			cache, err := NewDenyCache(build(t, plans, clock), DenyCacheConfig{Clock: clock, MaxAge: time.Minute})
			require.NoError(t, err)
			for _, want := range []bool{true, true, false} {
				d, err := cache.Decide(ctx, "k", 1)
				require.NoError(t, err)
				require.Equal(t, want, d.Allowed)
			}
			d, err := cache.Decide(ctx, "k", 1)
			require.NoError(t, err)
			require.Equal(t, FromDenyCache, d.Source, "remembered under free")

			plans.set("k", pro)
			d, err = cache.Decide(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "pro allows it")
			require.Equal(t, FromBackend, d.Source)
			require.Equal(t, 7, d.Remaining)
			d, err = cache.Decide(ctx, "k", 8) // 7 left under pro
			require.NoError(t, err)
			assert.False(t, d.Allowed)
			assert.Equal(t, FromBackend, d.Source, "pro never denied: its denial is the backend's to make")
		})
	}
}

// TestDenyCacheLocalAnswersKeepTheGodocsPromise drives a DenyCache around
// token buckets, GCRAs and fixed windows built WithPolicyFunc, in process
// and on miniredis, with random costs, plan changes, refunds through the
// cache, other clients' calls and time steps, and checks every answer it
// gives itself against a model of what its godoc promises: a local answer
// is a denial, made within MaxAge of a denial the backend made of a call
// on the key, under the policy the key has now, with no give-back through
// the cache on the key since; and the backend, asked at once, denies it
// too.
func TestDenyCacheLocalAnswersKeepTheGodocsPromise(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plansOf := []Policy{{Limit: 4, Window: time.Second}, {Limit: 12, Window: time.Second}, {Limit: 4, Window: 3 * time.Second}}
	subjects := []subject{
		inProcessSubject("TokenBucket", func(_ int, _ time.Duration, opts ...Option) (Limiter, error) {
			return NewTokenBucket(PerSecond(4), 4, opts...)
		}),
		inProcessSubject("GCRA", func(_ int, _ time.Duration, opts ...Option) (Limiter, error) {
			return NewGCRA(4, time.Second, opts...)
		}),
		inProcessSubject("FixedWindow", func(_ int, _ time.Duration, opts ...Option) (Limiter, error) {
			return NewFixedWindow(4, time.Second, opts...)
		}),
		miniredisSubject("RedisGCRA", func(client *redis.Client, _ int, _ time.Duration, opts ...Option) (Limiter, error) {
			return NewRedisGCRA(client, 4, time.Second, redisOpts(opts)...)
		}),
		miniredisSubject("RedisFixedWindow", func(client *redis.Client, _ int, _ time.Duration, opts ...Option) (Limiter, error) {
			return NewRedisFixedWindow(client, 4, time.Second, redisOpts(opts)...)
		}),
	}
	type denialSeen struct {
		at     time.Time
		policy Policy
	}
	for si, sub := range subjects {
		t.Run(sub.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(33, uint64(si)))
			local, stale := 0, 0
			for round := range sized(2, 12) {
				plans := newPlanMap()
				keys := []string{"a", "b", "c"}
				for _, k := range keys {
					plans.set(k, plansOf[0])
				}
				backend, advanceBackend := sub.newLimiter(t, 0, 0, WithPolicyFunc(plans.f))
				clock := ratelimittest.NewClock(epoch)
				maxAge := time.Duration(200+r.IntN(1300)) * time.Millisecond
				cache, err := NewDenyCache(backend, DenyCacheConfig{Clock: clock, MaxAge: maxAge})
				require.NoError(t, err)
				denials := map[string]denialSeen{}
				for step := range sized(200, 400) {
					// Whole ms keep miniredis and the fake clocks together.
					d := time.Duration(r.IntN(120)) * time.Millisecond
					clock.Advance(d)
					advanceBackend(d)
					key := keys[r.IntN(len(keys))]
					switch x := r.IntN(40); {
					case x < 2: // a plan change
						plans.set(key, plansOf[r.IntN(len(plansOf))])
					case x < 4: // a give-back through the cache
						_, err := cache.Refund(ctx, key, 1)
						require.NoError(t, err)
						delete(denials, key)
					case x < 7: // another client, around the cache
						_, err := backend.Allow(ctx, key, 1)
						require.NoError(t, err)
					}
					n := 1 + r.IntN(4)
					got, err := cache.Decide(ctx, key, n)
					require.NoError(t, err)
					if got.Source == FromBackend {
						if !got.Allowed {
							denials[key] = denialSeen{clock.Now(), plans.get(key)}
						}
						continue
					}
					require.Equal(t, FromDenyCache, got.Source)
					local++
					require.False(t, got.Allowed, "round %d step %d: the cache only ever denies", round, step)
					seen, ok := denials[key]
					switch {
					case !ok:
						stale++
						t.Logf("round %d step %d: %q denied locally with no denial since the last give-back", round, step, key)
					case clock.Now().Sub(seen.at) >= maxAge:
						stale++
						t.Logf("round %d step %d: %q denied locally %v after the backend's denial, MaxAge %v", round, step, key, clock.Now().Sub(seen.at), maxAge)
					case plans.get(key) != seen.policy:
						stale++
						t.Logf("round %d step %d: %q denied locally under %+v, denied under %+v", round, step, key, plans.get(key), seen.policy)
					}
					truth, err := backend.Allow(ctx, key, n) // a denial: changes nothing
					require.NoError(t, err)
					require.False(t, truth.Allowed, "round %d step %d: the cache denied %d on %q, the backend allows it", round, step, n, key)
				}
			}
			t.Logf("%d local answers, %d outside the godoc's promise", local, stale)
			assert.Positive(t, local, "the cache answered some calls itself")
			assert.Zero(t, stale, "local answers outside the godoc's promise")
		})
	}
}
