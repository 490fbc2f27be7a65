package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// The kind table: every registered kind (kinds.go) × backend × capability.
// A kind's row says how to build its limiters and which of the shared
// capability tables hold for it; the runners below (and those in the
// capability files: adjust, settle cap, debt cap, DenyCache, bursts) build
// their subjects from the rows, so a new kind is covered by a row here
// beside its line in kinds.go, and TestEveryRegisteredKindHasARow fails
// until it has one.

// kindRow is one registered kind as the capability tests build it.
type kindRow struct {
	// local builds the kind's in-process limiter of limit per period (a
	// calendar window: of the calendar period of that nominal length, in
	// UTC) with opts.
	local func(limit int, period time.Duration, opts ...Option) (Limiter, error)
	// remote builds the kind's Redis limiter on client as local does.
	remote func(client redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error)
	// remoteClock: the Redis limiter reads the client's clock (WithClock)
	// for its windows' bounds, so a test that moves the server's time
	// moves that clock too.
	remoteClock bool
	// scenarios hold for the kind on every backend, alone, under a
	// PolicyFunc and as a Composite's one part.
	scenarios []scenario
	// adjust hold for the kind's Settle, Refund and Reset on every
	// backend, alone and as a Composite's one part.
	adjust []callScenario
	// byTTL: on Redis, the kind's window is its key's TTL (ResetAfter is
	// read from it), which a real server counts in real time, so the
	// real-server backend, on a fake clock, skips the kind; its tests on a
	// real server run in real time.
	byTTL bool
	// none says why the kind has no scenarios here (its own file holds
	// its tests).
	none string
}

// kindTable holds a row for every registered kind, by its name.
var kindTable = map[string]kindRow{
	"TokenBucket": {
		local: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewTokenBucket(Per(limit, period), limit, opts...)
		},
		remote: func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
			return NewRedisTokenBucket(c, Per(limit, period), limit, opts...)
		},
		scenarios: bucketScenarios,
		adjust:    bucketAdjustScenarios,
	},
	"GCRA": {
		local: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewGCRA(limit, period, opts...)
		},
		remote: func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
			return NewRedisGCRA(c, limit, period, opts...)
		},
		scenarios: bucketScenarios,
		adjust:    bucketAdjustScenarios,
	},
	"FixedWindow": {
		local: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewFixedWindow(limit, period, opts...)
		},
		remote: func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
			return NewRedisFixedWindow(c, limit, period, opts...)
		},
		byTTL:     true,
		scenarios: windowScenarios,
		adjust:    windowAdjustScenarios,
	},
	"SlidingLog": {
		local: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewSlidingLog(limit, period, opts...)
		},
		remote: func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
			return NewRedisSlidingLog(c, limit, period, opts...)
		},
		scenarios: logScenarios,
	},
	"SlidingCounter": {
		local: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewSlidingCounter(limit, period, opts...)
		},
		remote: func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
			return NewRedisSlidingCounter(c, limit, period, opts...)
		},
		scenarios: counterScenarios,
	},
	"CalendarWindow": {
		local: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewCalendarWindow(limit, Calendar{Period: periodOfNominal(period)}, opts...)
		},
		remote: func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
			return NewRedisCalendarWindow(c, limit, Calendar{Period: periodOfNominal(period)}, opts...)
		},
		remoteClock: true,
		byTTL:       true,
		scenarios:   calendarScenarios,
	},
	"Concurrency": {
		local: func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
			return NewConcurrency(limit, period, opts...)
		},
		remote: func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (Limiter, error) {
			return NewRedisConcurrency(c, limit, period, opts...)
		},
		none: "units in flight, held by leases: concurrency_*_test.go and redisconcurrency_*_test.go",
	},
}

// rowOf returns the table's row of the kind named name; it fails the test
// when there is none.
func rowOf(t *testing.T, name string) kindRow {
	t.Helper()
	row, ok := kindTable[name]
	require.True(t, ok, "no row for kind %s in kindTable (kindtable_test.go)", name)
	return row
}

func TestEveryRegisteredKindHasARow(t *testing.T) {
	_, client, _ := miniredisClock(t)
	for _, k := range kinds {
		row := rowOf(t, k.name())
		l, err := row.local(3, time.Minute)
		require.NoError(t, err, k.name())
		e, ok := engineOf(l)
		require.True(t, ok, k.name())
		assert.Equal(t, k, e.kindOf(), "%s's row builds its kind in process", k.name())
		r, err := row.remote(client, 3, time.Minute)
		require.NoError(t, err, k.name())
		e, ok = engineOf(r)
		require.True(t, ok, k.name())
		assert.Equal(t, k, e.kindOf(), "%s's row builds its kind on Redis", k.name())
		assert.True(t, len(row.scenarios) > 0 || row.none != "", "%s's row has scenarios or says why not", k.name())
	}
	assert.Len(t, kindTable, len(kinds), "every row is a registered kind's")
}

// tableBackend is where a subject keeps its state.
type tableBackend int

const (
	// inProcess: the kind's in-process limiter on a ratelimittest.Clock.
	inProcess tableBackend = iota
	// onMiniredis: the kind's Redis limiter on a miniredis whose TIME the
	// test moves.
	onMiniredis
	// onCallerClock: the Redis limiter built WithCallerClock, on a
	// miniredis whose TIME reads farFromEpoch and never moves: only the
	// caller's clock and the keys' TTLs (FastForward) follow the test, so
	// a decision that read TIME would be decades off.
	onCallerClock
	// onRealRedis: the Redis limiter built WithCallerClock on a real
	// redis-server, one a test binary shares (redistest.Shared), each
	// subject under a key prefix of its own, whose keys' TTLs the test
	// moves with the caller's clock (realRedis.fastForward). Skipped
	// without redis-server.
	onRealRedis
)

// backends are every backend, in the order the runners take them.
var backends = []tableBackend{inProcess, onMiniredis, onCallerClock, onRealRedis}

func (b tableBackend) String() string {
	return [...]string{"inprocess", "miniredis", "callerclock", "redis"}[b]
}

// variant is how a subject is built beyond its kind and backend.
type variant int

const (
	// plain: the constructor's policy, with the table's limit and period.
	plain variant = iota
	// byPolicyFunc: another policy of its own, and a PolicyFunc that
	// gives every key the table's: it decides the same.
	byPolicyFunc
	// uncoalesced: a Redis limiter WithoutCoalescing.
	uncoalesced
	// asPart: the plain limiter as a Composite's one part, which decides
	// and adjusts as the limiter alone.
	asPart
)

func (v variant) String() string {
	return [...]string{"", "/PolicyFunc", "/WithoutCoalescing", "/Composite"}[v]
}

// realRedis is a real server's client and the counter that gives each
// subject on it a key prefix of its own.
type realRedis struct {
	client *redis.Client
	next   atomic.Int64
}

// sharedRedis returns a client of the test binary's shared real server, or
// skips the test when redis-server is missing.
func sharedRedis(t *testing.T) *realRedis {
	t.Helper()
	return &realRedis{client: redistest.Shared(t).Client(t)}
}

// fastForward moves the TTLs of the keys under prefix on by d, as
// miniredis's FastForward does: a key whose TTL ends within d is gone, and
// a negative d lengthens every TTL.
func (r *realRedis) fastForward(t *testing.T, prefix string, d time.Duration) {
	t.Helper()
	if d == 0 {
		return
	}
	ctx := context.Background()
	keys, err := r.client.Keys(ctx, prefix+"*").Result()
	require.NoError(t, err)
	for _, key := range keys {
		ttl, err := r.client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		switch {
		case ttl < 0: // no TTL (-1), or gone since (-2)
		case ttl <= d:
			require.NoError(t, r.client.Del(ctx, key).Err())
		default:
			require.NoError(t, r.client.PExpire(ctx, key, ttl-d).Err())
		}
	}
}

// subject returns the row's kind on b built as v. real is the server of
// onRealRedis, nil for the other backends. The name is the limiter type's,
// then the backend's, then the variant's.
func (row kindRow) subject(name string, b tableBackend, v variant, real *realRedis) subject {
	build := func(t *testing.T, limit int, period time.Duration, opts ...Option) (Limiter, func(time.Duration)) {
		opts = opts[:len(opts):len(opts)]
		if v == byPolicyFunc {
			opts = append(opts, WithPolicyFunc(everyKey(limit, period)))
			limit, period = 3, time.Hour
		}
		clock := ratelimittest.NewClock(epoch)
		if b == inProcess {
			l, err := row.local(limit, period, append(opts, WithClock(clock))...)
			require.NoError(t, err)
			return l, clock.Advance
		}
		ropts := redisOpts(opts)
		if v == uncoalesced {
			ropts = append(ropts, WithoutCoalescing())
		}
		var client redis.Scripter
		advance := clock.Advance
		switch b {
		case onMiniredis:
			var moveServer func(time.Duration)
			_, client, moveServer = miniredisClock(t)
			if row.remoteClock {
				ropts = append(ropts, WithClock(clock))
			}
			advance = func(d time.Duration) {
				clock.Advance(d)
				moveServer(d)
			}
		case onCallerClock:
			m, c, _ := redistest.Miniredis(t, farFromEpoch)
			client = c
			ropts = append(ropts, WithCallerClock(clock))
			advance = func(d time.Duration) {
				clock.Advance(d)
				m.FastForward(d) // TTLs run on the server, whose TIME stays where it is
			}
		case onRealRedis:
			client = real.client
			prefix := fmt.Sprintf("t%d:", real.next.Add(1))
			ropts = append(ropts, WithCallerClock(clock), WithKeyPrefix(prefix))
			advance = func(d time.Duration) {
				clock.Advance(d)
				real.fastForward(t, prefix, d)
			}
		}
		l, err := row.remote(client, limit, period, ropts...)
		require.NoError(t, err)
		return l, advance
	}
	full := name
	if b != inProcess {
		full = "Redis" + name + "/" + b.String()
	}
	full += v.String()
	if v == asPart {
		inner := build
		build = func(t *testing.T, limit int, period time.Duration, opts ...Option) (Limiter, func(time.Duration)) {
			l, advance := inner(t, limit, period, opts...)
			c, err := NewComposite(Part{Name: "only", Limiter: l})
			require.NoError(t, err)
			return c, advance
		}
	}
	return subject{full, build}
}

// subjectsOf returns the named kinds in process and on miniredis, plain
// and under a PolicyFunc: the subjects of the capability tables that take
// a list of subjects.
func subjectsOf(names ...string) []subject {
	var subs []subject
	for _, b := range []tableBackend{inProcess, onMiniredis} {
		for _, v := range []variant{plain, byPolicyFunc} {
			for _, name := range names {
				subs = append(subs, kindTable[name].subject(name, b, v, nil))
			}
		}
	}
	return subs
}

// eachSubject calls f, in a parallel subtest per registered kind and
// backend, with every variant of the kind there; on a real server the
// subtest holds one shared server for all of them.
func eachSubject(t *testing.T, f func(t *testing.T, row kindRow, subs []subject)) {
	for _, k := range kinds {
		name := k.name()
		row := rowOf(t, name)
		for _, b := range backends {
			t.Run(name+"/"+b.String(), func(t *testing.T) {
				t.Parallel()
				var real *realRedis
				if b == onRealRedis {
					if row.byTTL {
						t.Skipf("on Redis a %s's window is its key's TTL, which a real server counts in real time, not on the test's clock", name)
					}
					real = sharedRedis(t)
				}
				vs := []variant{plain, byPolicyFunc, asPart}
				if b != inProcess {
					vs = append(vs, uncoalesced)
				}
				var subs []subject
				for _, v := range vs {
					subs = append(subs, row.subject(name, b, v, real))
				}
				f(t, row, subs)
			})
		}
	}
}

// TestEveryKindsScenarios runs each kind's scenarios on every backend,
// alone, under a PolicyFunc, WithoutCoalescing and as a Composite's part.
func TestEveryKindsScenarios(t *testing.T) {
	t.Parallel()
	eachSubject(t, func(t *testing.T, row kindRow, subs []subject) {
		if len(row.scenarios) == 0 {
			t.Skip(row.none)
		}
		runScenarios(t, subs, row.scenarios)
	})
}

// TestEveryKindsAdjustScenarios runs each kind's Settle, Refund and Reset
// scenarios on every backend, alone and as a Composite's part.
func TestEveryKindsAdjustScenarios(t *testing.T) {
	t.Parallel()
	eachSubject(t, func(t *testing.T, row kindRow, subs []subject) {
		if len(row.adjust) == 0 {
			t.Skip("the kind's adjustments are in its own tests")
		}
		var alone []subject
		for _, s := range subs {
			if !strings.HasPrefix(s.name, "Composite(") && !strings.HasSuffix(s.name, "/Composite") {
				alone = append(alone, s)
			}
		}
		runAdjustScenarios(t, alone, row.adjust)
	})
}

// TestEveryKindBehindEveryDecoratorDecidesAsTheBareLimiter runs one random
// schedule of Allows on each kind with scenarios, in process and on
// miniredis, bare and behind each decorator, each on a limiter of its own
// and a clock of its own moved alike: a Guard and an enforcing Shadow
// answer exactly as the bare limiter, and refuse what it refuses; a
// DenyCache allows exactly what the bare limiter allows (it answers some
// denials from memory).
func TestEveryKindBehindEveryDecoratorDecidesAsTheBareLimiter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const limit, period = 4, time.Minute
	decorators := []struct {
		name  string
		wrap  func(l Limiter, clock Clock) (Limiter, error)
		exact bool
	}{
		{"Guard", func(l Limiter, _ Clock) (Limiter, error) { return NewGuard(l, GuardConfig{}) }, true},
		{"Shadow", func(l Limiter, _ Clock) (Limiter, error) { return NewShadow(l, ShadowConfig{Enforce: true}) }, true},
		{"DenyCache", func(l Limiter, clock Clock) (Limiter, error) {
			return NewDenyCache(l, DenyCacheConfig{Clock: clock, MaxAge: time.Hour})
		}, false},
	}
	for ki, k := range kinds {
		name := k.name()
		row := rowOf(t, name)
		if len(row.scenarios) == 0 {
			continue // row.none says where its tests are
		}
		for _, b := range []tableBackend{inProcess, onMiniredis} {
			for di, d := range decorators {
				t.Run(name+"/"+b.String()+"/"+d.name, func(t *testing.T) {
					t.Parallel()
					sub := row.subject(name, b, plain, nil)
					bare, moveBare := sub.newLimiter(t, limit, period)
					inner, moveInner := sub.newLimiter(t, limit, period)
					clock := ratelimittest.NewClock(epoch)
					decorated, err := d.wrap(inner, clock)
					require.NoError(t, err)
					r := rand.New(rand.NewPCG(uint64(ki), uint64(di)))
					for i, c := range randomSchedule(r, sized(30, 600), limit, period/limit, false, "a", "b") {
						c.advance = c.advance.Truncate(time.Microsecond)
						moveBare(c.advance)
						moveInner(c.advance)
						clock.Advance(c.advance)
						want, wantErr := bare.Allow(ctx, c.key, c.n)
						got, err := decorated.Allow(ctx, c.key, c.n)
						if wantErr != nil {
							require.Error(t, err, "step %d: %v: the bare limiter refuses it: %v", i, c, wantErr)
							continue
						}
						require.NoError(t, err, "step %d: %v", i, c)
						if d.exact {
							require.Equal(t, want, got, "step %d: %v", i, c)
						} else {
							require.Equal(t, want.Allowed, got.Allowed, "step %d: %v: %+v, bare %+v", i, c, got, want)
						}
					}
				})
			}
		}
	}
}

// ceilMicro rounds a Result's durations up to whole microseconds, the
// Redis limiters' unit.
func ceilMicro(res Result) Result {
	res.RetryAfter = (res.RetryAfter + time.Microsecond - 1).Truncate(time.Microsecond)
	res.ResetAfter = (res.ResetAfter + time.Microsecond - 1).Truncate(time.Microsecond)
	return res
}

// TestEveryKindDecidesAlikeInProcessAndOnEveryRedisBackend runs random
// schedules of Allows (whole milliseconds apart), of random limits per a
// minute or an hour (whole microseconds per unit), on each kind with scenarios in process and on
// each Redis backend at once, on one and on four keys: the Redis limiter
// answers as the in-process one, its durations rounded up to whole
// microseconds.
func TestEveryKindDecidesAlikeInProcessAndOnEveryRedisBackend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limits := []int{1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 16, 20}
	for ki, k := range kinds {
		name := k.name()
		row := rowOf(t, name)
		if len(row.scenarios) == 0 {
			continue // row.none says where its tests are
		}
		for _, b := range backends[1:] {
			t.Run(name+"/"+b.String(), func(t *testing.T) {
				t.Parallel()
				var real *realRedis
				if b == onRealRedis {
					if row.byTTL {
						t.Skipf("on Redis a %s's window is its key's TTL, which a real server counts in real time, not on the test's clock", name)
					}
					real = sharedRedis(t)
				}
				r := rand.New(rand.NewPCG(uint64(ki), uint64(b)))
				for round := range sized(2, 24) {
					limit := limits[r.IntN(len(limits))]
					period := []time.Duration{time.Minute, time.Hour}[r.IntN(2)]
					local, moveLocal := row.subject(name, inProcess, plain, nil).newLimiter(t, limit, period)
					remote, moveRemote := row.subject(name, b, plain, real).newLimiter(t, limit, period)
					keys := []string{"a", "b", "c", "d"}
					if round%2 == 0 {
						keys = keys[:1]
					}
					for i, c := range randomSchedule(r, sized(60, 120), limit, period/time.Duration(limit), false, keys...) {
						c.advance = c.advance.Truncate(time.Millisecond) // a fixed window's TTL is in ms
						moveLocal(c.advance)
						moveRemote(c.advance)
						want, wantErr := local.Allow(ctx, c.key, c.n)
						got, err := remote.Allow(ctx, c.key, c.n)
						require.Equal(t, wantErr == nil, err == nil, "round %d step %d: errors %v and %v", round, i, wantErr, err)
						require.Equal(t, ceilMicro(want), ceilMicro(got), "round %d step %d: %d per %v, %v", round, i, limit, period, c)
					}
				}
			})
		}
	}
}
