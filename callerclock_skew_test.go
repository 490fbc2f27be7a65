package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// offsetClock reads a reference clock moved by a fixed offset: a client
// whose clock is ahead (offset > 0) or behind (offset < 0) of the others.
type offsetClock struct {
	ref    *ratelimittest.Clock
	offset time.Duration
}

func (c *offsetClock) Now() time.Time { return c.ref.Now().Add(c.offset) }

// skewEvent is one call of a skew run: when it was made on the reference
// clock, by which client, its cost and whether it was allowed.
type skewEvent struct {
	at      time.Duration // since the run's start, on the reference clock
	client  int
	n       int
	allowed bool
}

// skewKind is a Redis limiter of one policy for the skew runs, built by new
// on client with opts, and how to measure what its allowed calls exceed
// one clock's bound by (see the excess functions).
type skewKind struct {
	name    string
	new     func(client redis.Scripter, opts ...RedisOption) (Limiter, error)
	maxStep time.Duration // the largest step of the reference clock between calls
	maxN    int
	excess  func(events []skewEvent) int
}

// skewOffsets are the clients' clocks in the skew runs: one 5 s behind and
// one 5 s ahead of the reference clock, 10 s apart.
var skewOffsets = []time.Duration{-5 * time.Second, 5 * time.Second}

// runSkew runs a random schedule of seed, of steps calls, on one key shared
// by one client per offset, each a limiter of kind built WithCallerClock of
// its offsetClock, on a miniredis whose TIME is far from them all, and
// returns its events. Before each call of a client behind another, it
// checks that it sees no more units than the client furthest ahead (the
// latest time any client may have written the key at) sees at once: a
// client behind never creates units.
func runSkew(t *testing.T, kind skewKind, offsets []time.Duration, seed uint64, steps int) []skewEvent {
	t.Helper()
	m, client, _ := redistest.Miniredis(t, farFromEpoch)
	ctx := context.Background()
	start := epoch.Add(30 * time.Second)
	ref := ratelimittest.NewClock(start)
	limiters := make([]Limiter, len(offsets))
	ahead := 0
	for i, off := range offsets {
		l, err := kind.new(client, WithCallerClock(&offsetClock{ref, off}), WithKeyPrefix("skew:"))
		require.NoError(t, err)
		limiters[i] = l
		if off > offsets[ahead] {
			ahead = i
		}
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	var events []skewEvent
	for range steps {
		d := time.Duration(rng.Int64N(int64(kind.maxStep/ms)+1)) * ms
		ref.Advance(d)
		m.FastForward(d) // the server's TTLs follow the reference clock
		c := rng.IntN(len(offsets))
		n := 1 + rng.IntN(kind.maxN)
		if offsets[c] < offsets[ahead] {
			seen, err := limiters[c].Allow(ctx, "k", 0)
			require.NoError(t, err)
			latest, err := limiters[ahead].Allow(ctx, "k", 0)
			require.NoError(t, err)
			require.LessOrEqual(t, seen.Remaining, latest.Remaining,
				"seed %d at %v: a client %v behind sees more units than one at the latest time", seed, ref.Now().Sub(start), offsets[ahead]-offsets[c])
		}
		res, err := limiters[c].Allow(ctx, "k", n)
		require.NoError(t, err)
		events = append(events, skewEvent{at: ref.Now().Sub(start), client: c, n: n, allowed: res.Allowed})
	}
	return events
}

// bucketExcess returns the most units allowed in any span of the reference
// clock beyond what one clock allows a bucket of limit refilling one unit
// per interval: limit + ⌊span / interval⌋.
func bucketExcess(limit int, interval time.Duration) func([]skewEvent) int {
	return func(events []skewEvent) int {
		most := 0
		for i, a := range events {
			sum := 0
			for _, b := range events[i:] {
				if b.allowed {
					sum += b.n
					most = max(most, sum-limit-int((b.at-a.at)/interval))
				}
			}
		}
		return most
	}
}

// spanExcess returns the most units allowed in any span shorter than
// window on the reference clock beyond limit, what one clock allows a
// sliding log.
func spanExcess(limit int, window time.Duration) func([]skewEvent) int {
	return func(events []skewEvent) int {
		most := 0
		for i, a := range events {
			sum := 0
			for _, b := range events[i:] {
				if b.at-a.at >= window {
					break
				}
				if b.allowed {
					sum += b.n
				}
			}
			most = max(most, sum-limit)
		}
		return most
	}
}

// calendarExcess returns the most units allowed in one window of period
// (aligned on the reference clock, which starts 30 s into one) beyond
// limit, what one clock allows a calendar window.
func calendarExcess(limit int, period time.Duration) func([]skewEvent) int {
	return func(events []skewEvent) int {
		counts := map[time.Duration]int{}
		most := 0
		for _, e := range events {
			if e.allowed {
				w := (e.at + 30*time.Second) / period
				counts[w] += e.n
				most = max(most, counts[w]-limit)
			}
		}
		return most
	}
}

// heldExcess returns the most units held at once beyond limit, each
// allowed unit held for ttl from its call on the reference clock, what one
// clock allows a concurrency limiter whose leases are never released.
func heldExcess(limit int, ttl time.Duration) func([]skewEvent) int {
	return func(events []skewEvent) int {
		most := 0
		for i, e := range events {
			held := 0
			for _, b := range events[:i+1] {
				if b.allowed && e.at < b.at+ttl {
					held += b.n
				}
			}
			most = max(most, held-limit)
		}
		return most
	}
}

// skewKinds are the Redis limiters measured: their policies are chosen so
// that the clients' spread of D = 10 s is a part of a period (the bucket:
// D × rate = 5 units of 20) or more than one (the small bucket: D × rate =
// 20 units of 4).
var skewKinds = []skewKind{
	{"RedisTokenBucket 20 per 40 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisTokenBucket(c, Every(2*time.Second), 20, o...)
	},
		time.Second, 2, bucketExcess(20, 2*time.Second)},
	{"RedisGCRA 20 per 40 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisGCRA(c, 20, 40*time.Second, o...)
	},
		time.Second, 2, bucketExcess(20, 2*time.Second)},
	{"RedisGCRA 4 per 2 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisGCRA(c, 4, 2*time.Second, o...)
	},
		200 * ms, 1, bucketExcess(4, 500*ms)},
	{"RedisSlidingLog 10 per 20 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisSlidingLog(c, 10, 20*time.Second, o...)
	},
		time.Second, 2, spanExcess(10, 20*time.Second)},
	{"RedisSlidingLog 4 per 4 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisSlidingLog(c, 4, 4*time.Second, o...)
	},
		300 * ms, 1, spanExcess(4, 4*time.Second)},
	{"RedisSlidingCounter 10 per 20 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisSlidingCounter(c, 10, 20*time.Second, o...)
	}, time.Second, 2, spanExcess(10, 20*time.Second)},
	{"RedisCalendarWindow 10 per minute", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisCalendarWindow(c, 10, Calendar{Period: CalendarMinute}, o...)
	}, 2 * time.Second, 2, calendarExcess(10, time.Minute)},
	{"RedisConcurrency 5 for 20 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisConcurrency(c, 5, 20*time.Second, o...)
	}, time.Second, 1, heldExcess(5, 20*time.Second)},
	{"RedisConcurrency 3 for 4 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisConcurrency(c, 3, 4*time.Second, o...)
	}, 300 * ms, 1, heldExcess(3, 4*time.Second)},
}

// skewBounds are the documented bounds (see WithCallerClock) on what the
// skew runs of skewKinds, whose clients are D = 10 s apart, may allow
// beyond one clock's bound; -1 where none holds (a window or lease TTL not
// longer than D).
var skewBounds = map[string]int{
	"RedisTokenBucket 20 per 40 s":      5,  // min(limit, ⌈D × rate⌉ = 5)
	"RedisGCRA 20 per 40 s":             5,  // min(limit, ⌈D × rate⌉ = 5)
	"RedisGCRA 4 per 2 s":               4,  // min(limit, ⌈D × rate⌉ = 20)
	"RedisSlidingLog 10 per 20 s":       10, // limit × (⌈W / (W − D)⌉ − 1)
	"RedisSlidingLog 4 per 4 s":         -1, // W <= D
	"RedisSlidingCounter 10 per 20 s":   5,  // ⌈limit × D / W⌉, beyond what one clock gives
	"RedisCalendarWindow 10 per minute": 20, // 2 × limit: both neighbours' counts within D of the bounds
	"RedisConcurrency 5 for 20 s":       5,  // limit × (⌈TTL / (TTL − D)⌉ − 1)
	"RedisConcurrency 3 for 4 s":        -1, // TTL <= D
}

func TestCallerClockSkewBehindNeverCreatesUnitsAndAheadTakesAtMostTheBound(t *testing.T) {
	t.Parallel()
	steps, seeds := sized(40, 150), sized(1, 8)
	for _, kind := range skewKinds {
		t.Run(kind.name, func(t *testing.T) {
			worst, oneClock := 0, 0
			for seed := range uint64(seeds) {
				worst = max(worst, kind.excess(runSkew(t, kind, skewOffsets, seed, steps)))
				oneClock = max(oneClock, kind.excess(runSkew(t, kind, []time.Duration{0, 0}, seed, steps)))
			}
			t.Logf("%s: clients 10 s apart allow at most %d units beyond one clock's bound (one clock: %d), over %d schedules of %d calls",
				kind.name, worst, oneClock, seeds, steps)
			if bound := skewBounds[kind.name]; bound >= 0 {
				assert.LessOrEqual(t, worst, bound+oneClock)
			}
			if kind.name != "RedisSlidingCounter 10 per 20 s" { // an estimate: one clock exceeds a log's bound too
				assert.Zero(t, oneClock, "one clock keeps the bound")
			}
		})
	}
}

func TestCallerClockSkewDoesNotMoveAFixedWindow(t *testing.T) {
	t.Parallel()
	kind := skewKind{"RedisFixedWindow 10 per 20 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
		return NewRedisFixedWindow(c, 10, 20*time.Second, o...)
	}, time.Second, 2, nil}
	for seed := range uint64(sized(2, 6)) {
		skewed := runSkew(t, kind, skewOffsets, seed, 150)
		oneClock := runSkew(t, kind, []time.Duration{0, 0}, seed, 150)
		require.Equal(t, oneClock, skewed, fmt.Sprintf("seed %d: the window runs on the server's key expiry", seed))
	}
}

func TestCallerClockAheadOfAnEmptiedKeyTakesDTimesRateCappedAtTheLimit(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		new       func(c redis.Scripter, o ...RedisOption) (Limiter, error)
		limit     int
		wantEarly int
	}{
		{"RedisTokenBucket 20 per 40 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
			return NewRedisTokenBucket(c, Every(2*time.Second), 20, o...)
		}, 20, 5},
		{"RedisGCRA 20 per 40 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
			return NewRedisGCRA(c, 20, 40*time.Second, o...)
		}, 20, 5},
		{"RedisGCRA 4 per 2 s", func(c redis.Scripter, o ...RedisOption) (Limiter, error) {
			return NewRedisGCRA(c, 4, 2*time.Second, o...)
		}, 4, 4},
	} {
		_, client, _ := redistest.Miniredis(t, farFromEpoch)
		ref := ratelimittest.NewClock(epoch)
		behind, err := tc.new(client, WithCallerClock(&offsetClock{ref, -5 * time.Second}), WithKeyPrefix("k:"))
		require.NoError(t, err)
		ahead, err := tc.new(client, WithCallerClock(&offsetClock{ref, 5 * time.Second}), WithKeyPrefix("k:"))
		require.NoError(t, err)
		res, err := behind.Allow(ctx, "k", tc.limit)
		require.NoError(t, err)
		require.True(t, res.Allowed)
		early := 0
		for {
			res, err := ahead.Allow(ctx, "k", 1)
			require.NoError(t, err)
			if !res.Allowed {
				break
			}
			early++
		}
		assert.Equal(t, tc.wantEarly, early, tc.name)
		// The client behind now owes what the one ahead took early.
		res, err = behind.Allow(ctx, "k", 0)
		require.NoError(t, err)
		assert.Zero(t, res.Remaining, tc.name)
	}
}
