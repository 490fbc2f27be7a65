package ratelimit

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// keySubject is a Redis limiter of one configuration, for the table of
// what its keys name.
type keySubject struct {
	name  string
	build func(client redis.Scripter, clock []RedisOption) (Limiter, error)
	// shares names the state a limiter given an explicit prefix keeps:
	// two subjects of one shares keep a key in one place on purpose (a
	// redeploy with a new limit keeps what the key has used); "" for
	// one that shares with no other.
	shares string
}

// keyedTo returns WithPolicyFunc of a PolicyFunc giving every key p.
func keyedTo(p Policy) SharedOption {
	return WithPolicyFunc(func(context.Context, string) (Policy, error) { return p, nil })
}

// keySubjects returns the subjects of the table: every kind, of
// different limits, rates, windows, periods, zones and first weekdays,
// keyed (WithPolicyFunc) and not, and given one explicit prefix.
func keySubjects(t *testing.T) []keySubject {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	tokyoAsUTC := time.FixedZone("UTC", 9*3600) // prints as UTC
	cal := func(limit int, c Calendar, opts ...RedisOption) func(redis.Scripter, []RedisOption) (Limiter, error) {
		return func(client redis.Scripter, clock []RedisOption) (Limiter, error) {
			return NewRedisCalendarWindow(client, limit, c, append(opts, clock...)...)
		}
	}
	tb := func(rate Rate, capacity int, opts ...RedisOption) func(redis.Scripter, []RedisOption) (Limiter, error) {
		return func(client redis.Scripter, _ []RedisOption) (Limiter, error) {
			return NewRedisTokenBucket(client, rate, capacity, opts...)
		}
	}
	gcra := func(limit int, period time.Duration, opts ...RedisOption) func(redis.Scripter, []RedisOption) (Limiter, error) {
		return func(client redis.Scripter, _ []RedisOption) (Limiter, error) {
			return NewRedisGCRA(client, limit, period, opts...)
		}
	}
	fw := func(limit int, window time.Duration, opts ...RedisOption) func(redis.Scripter, []RedisOption) (Limiter, error) {
		return func(client redis.Scripter, _ []RedisOption) (Limiter, error) {
			return NewRedisFixedWindow(client, limit, window, opts...)
		}
	}
	sl := func(limit int, window time.Duration, opts ...RedisOption) func(redis.Scripter, []RedisOption) (Limiter, error) {
		return func(client redis.Scripter, _ []RedisOption) (Limiter, error) {
			return NewRedisSlidingLog(client, limit, window, opts...)
		}
	}
	sc := func(limit int, window time.Duration, opts ...RedisOption) func(redis.Scripter, []RedisOption) (Limiter, error) {
		return func(client redis.Scripter, _ []RedisOption) (Limiter, error) {
			return NewRedisSlidingCounter(client, limit, window, opts...)
		}
	}
	inflight := func(limit int, ttl time.Duration, opts ...RedisOption) func(redis.Scripter, []RedisOption) (Limiter, error) {
		return func(client redis.Scripter, _ []RedisOption) (Limiter, error) {
			return NewRedisConcurrency(client, limit, ttl, opts...)
		}
	}
	day, month := Calendar{Period: CalendarDay, Location: berlin}, Calendar{Period: CalendarMonth, Location: berlin}
	app := WithKeyPrefix("app:")
	return []keySubject{
		{name: "token bucket 10/s", build: tb(PerSecond(10), 10)},
		{name: "token bucket 10/min", build: tb(PerMinute(10), 10)},
		{name: "token bucket 10/s, keyed", build: tb(PerSecond(10), 10, keyedTo(Policy{}))},
		{name: "token bucket 10/min, keyed", build: tb(PerMinute(10), 10, keyedTo(Policy{}))},
		{name: "GCRA 10/s", build: gcra(10, time.Second)},
		{name: "GCRA 10/s, keyed", build: gcra(10, time.Second, keyedTo(Policy{}))},
		{name: "GCRA 10/min, keyed", build: gcra(10, time.Minute, keyedTo(Policy{}))},
		{name: "fixed window 10/s", build: fw(10, time.Second)},
		{name: "fixed window 10/min", build: fw(10, time.Minute)},
		{name: "fixed window 10/min, keyed", build: fw(10, time.Minute, keyedTo(Policy{}))},
		{name: "fixed window 10/h, keyed", build: fw(10, time.Hour, keyedTo(Policy{}))},
		{name: "sliding log 10/min", build: sl(10, time.Minute)},
		{name: "sliding log 10/min, keyed", build: sl(10, time.Minute, keyedTo(Policy{}))},
		{name: "sliding log 10/h, keyed", build: sl(10, time.Hour, keyedTo(Policy{}))},
		{name: "sliding counter 10/min", build: sc(10, time.Minute)},
		{name: "sliding counter 10/h", build: sc(10, time.Hour)},
		{name: "sliding counter 10/min, keyed", build: sc(10, time.Minute, keyedTo(Policy{}))},
		{name: "sliding counter 10/min, keyed, the key's 10/s", build: sc(10, time.Minute, keyedTo(Policy{Limit: 10, Window: time.Second}))},
		{name: "sliding counter 10/h, keyed", build: sc(10, time.Hour, keyedTo(Policy{}))},
		{name: "calendar 10 a day, UTC", build: cal(10, Calendar{Period: CalendarDay})},
		{name: "calendar 10 a day, UTC+9 named UTC", build: cal(10, Calendar{Period: CalendarDay, Location: tokyoAsUTC})},
		{name: "calendar 10 a day, Berlin", build: cal(10, day)},
		{name: "calendar 10 a month, Berlin", build: cal(10, month)},
		{name: "calendar 10 a week from Sunday", build: cal(10, Calendar{Period: CalendarWeek})},
		{name: "calendar 10 a week from Monday", build: cal(10, Calendar{Period: CalendarWeek, FirstWeekday: time.Monday})},
		{name: "calendar 10 a day, Berlin, keyed", build: cal(10, day, keyedTo(Policy{}))},
		{name: "calendar 10 a month, Berlin, keyed", build: cal(10, month, keyedTo(Policy{}))},
		{name: "calendar 10 a day, Berlin, keyed, the key's a month", build: cal(10, day, keyedTo(Policy{Limit: 10, Window: CalendarMonth.Nominal()}))},
		{name: "calendar 10 a week from Sunday, keyed", build: cal(10, Calendar{Period: CalendarWeek}, keyedTo(Policy{}))},
		{name: "calendar 10 a week from Monday, keyed", build: cal(10, Calendar{Period: CalendarWeek, FirstWeekday: time.Monday}, keyedTo(Policy{}))},
		{name: "units in flight 5 for 30 s", build: inflight(5, 30*time.Second)},
		{name: "units in flight 5 for 30 s, keyed", build: inflight(5, 30*time.Second, keyedTo(Policy{}))},

		// One explicit prefix: shared where the state means the same.
		{name: "app: token bucket 10/s", build: tb(PerSecond(10), 10, app), shares: "tb"},
		{name: "app: token bucket 20/min", build: tb(PerMinute(20), 20, app), shares: "tb"},
		{name: "app: token bucket 10/s, keyed", build: tb(PerSecond(10), 10, app, keyedTo(Policy{})), shares: "tb-i"},
		{name: "app: GCRA 10/s", build: gcra(10, time.Second, app), shares: "gcra"},
		{name: "app: GCRA 5/s", build: gcra(5, time.Second, app), shares: "gcra"},
		{name: "app: GCRA 10/s, keyed", build: gcra(10, time.Second, app, keyedTo(Policy{})), shares: "gcra-i"},
		{name: "app: fixed window 10/min", build: fw(10, time.Minute, app), shares: "fw"},
		{name: "app: fixed window 20/h", build: fw(20, time.Hour, app), shares: "fw"},
		{name: "app: fixed window 10/min, keyed", build: fw(10, time.Minute, app, keyedTo(Policy{})), shares: "fw"},
		{name: "app: sliding log 10/min", build: sl(10, time.Minute, app), shares: "sl"},
		{name: "app: sliding log 20/h, keyed", build: sl(20, time.Hour, app, keyedTo(Policy{})), shares: "sl"},
		{name: "app: sliding counter 10/min", build: sc(10, time.Minute, app), shares: "sc 1 min"},
		{name: "app: sliding counter 20/min, keyed", build: sc(20, time.Minute, app, keyedTo(Policy{})), shares: "sc 1 min"},
		{name: "app: sliding counter 10/h", build: sc(10, time.Hour, app)},
		{name: "app: calendar 10 a day, Berlin", build: cal(10, day, app), shares: "cal day Berlin"},
		{name: "app: calendar 20 a day, Berlin", build: cal(20, day, app), shares: "cal day Berlin"},
		{name: "app: calendar 10 a day, Berlin, keyed", build: cal(10, day, app, keyedTo(Policy{})), shares: "cal day Berlin"},
		{name: "app: calendar 10 a month, Berlin", build: cal(10, month, app)},
		{name: "app: calendar 10 a day, UTC", build: cal(10, Calendar{Period: CalendarDay}, app)},
		{name: "app: calendar 10 a day, UTC+9 named UTC", build: cal(10, Calendar{Period: CalendarDay, Location: tokyoAsUTC}, app)},
		{name: "app: calendar 10 a week from Monday", build: cal(10, Calendar{Period: CalendarWeek, FirstWeekday: time.Monday}, app)},
		{name: "app: units in flight 5 for 30 s", build: inflight(5, 30*time.Second, app), shares: "inflight"},
		{name: "app: units in flight 2 for 1 min, keyed", build: inflight(2, time.Minute, app, keyedTo(Policy{})), shares: "inflight"},
	}
}

// redisKeysOf returns the Redis keys subject writes for one call on key, on a
// server flushed first.
func redisKeysOf(t *testing.T, client *redis.Client, subject keySubject, clock []RedisOption, key string) []string {
	ctx := context.Background()
	require.NoError(t, client.FlushAll(ctx).Err())
	l, err := subject.build(client, clock)
	require.NoError(t, err, subject.name)
	res, err := l.Allow(ctx, key, 1)
	require.NoError(t, err, subject.name)
	require.True(t, res.Allowed, subject.name)
	keys, err := client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	slices.Sort(keys)
	require.NotEmpty(t, keys, subject.name)
	return keys
}

// checkLimitersNeverShareAKey requires that no two subjects write one
// Redis key for one key, but those given one explicit prefix whose state
// means the same, which write the same one; and that two subjects' keys
// are also apart in use: one that used its whole limit leaves another
// full, unless they share on purpose. The keys are compared for every
// pair; the use, for every pair that shares on purpose and for one in
// sample of the others (subjects i and j with (i + j) % sample == 0, so
// each subject meets about one in sample of the others): all of them for
// a sample of 1.
func checkLimitersNeverShareAKey(t *testing.T, client *redis.Client, clock []RedisOption, sample int) {
	subjects := keySubjects(t)
	keys := make([][]string, len(subjects))
	for i, s := range subjects {
		keys[i] = redisKeysOf(t, client, s, clock, "acme")
	}
	ctx := context.Background()
	for i, a := range subjects {
		for j, b := range subjects[:i] {
			shared := a.shares != "" && a.shares == b.shares
			if shared {
				assert.Equal(t, keys[j], keys[i], "%s and %s: one explicit prefix, one state", b.name, a.name)
			} else {
				for _, k := range keys[i] {
					assert.NotContains(t, keys[j], k, "%s and %s share a key", b.name, a.name)
				}
			}
			if !shared && (i+j)%sample != 0 {
				continue
			}
			// In use: b takes all it may, then a is still full.
			require.NoError(t, client.FlushAll(ctx).Err())
			lb, err := b.build(client, clock)
			require.NoError(t, err)
			la, err := a.build(client, clock)
			require.NoError(t, err)
			for range 30 {
				if res, err := lb.Allow(ctx, "acme", 1); err != nil || !res.Allowed {
					break
				}
			}
			before, err := la.Allow(ctx, "fresh", 0) // a's full
			require.NoError(t, err)
			res, err := la.Allow(ctx, "acme", 0)
			if shared {
				require.NoError(t, err)
				assert.Less(t, res.Remaining, before.Remaining, "%s sees what %s took", a.name, b.name)
				continue
			}
			require.NoError(t, err, "%s after %s", a.name, b.name)
			assert.Equal(t, before.Remaining, res.Remaining, "%s is untouched by %s", a.name, b.name)
		}
	}
}

// TestRedisLimitersNeverShareAKeyUnlessGivenOnePrefixOnMiniredis checks
// the use of one pair in eight without -soak (every pair under it): a
// script call costs ten times as much on miniredis as on a real server,
// where the test checks every pair.
func TestRedisLimitersNeverShareAKeyUnlessGivenOnePrefixOnMiniredis(t *testing.T) {
	t.Parallel()
	_, client, _ := miniredisClock(t)
	checkLimitersNeverShareAKey(t, client, []RedisOption{WithClock(ratelimittest.NewClock(epoch))}, sized(8, 1))
}

// TestRealRedisLimitersNeverShareAKeyUnlessGivenOnePrefix checks the use of
// every pair under -soak, of half of them at the quick size (a superset of
// the pairs the miniredis twin checks).
func TestRealRedisLimitersNeverShareAKeyUnlessGivenOnePrefix(t *testing.T) {
	t.Parallel()
	client := redistest.Start(t).Client(t) // of its own: the test flushes it
	checkLimitersNeverShareAKey(t, client, nil, sized(2, 1))
}

// trialQuotas returns a daily quota of 8 and a monthly one of 10 in
// Berlin, both WithPolicyFunc (the key's policy is the limiter's own), on
// client, their windows cut on clock when given.
func trialQuotas(t *testing.T, client redis.Scripter, clock ...RedisOption) (daily, monthly *RedisCalendarWindow) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	daily, err = NewRedisCalendarWindow(client, 8, Calendar{Period: CalendarDay, Location: berlin}, append(clock, keyedTo(Policy{}))...)
	require.NoError(t, err)
	monthly, err = NewRedisCalendarWindow(client, 10, Calendar{Period: CalendarMonth, Location: berlin}, append(clock, keyedTo(Policy{}))...)
	require.NoError(t, err)
	return daily, monthly
}

// TestKeyedDailyAndMonthlyQuotasKeepApartOnMiniredis: a daily and a
// monthly calendar window built WithPolicyFunc in one zone, used as two
// limiters over two days, hold the monthly quota to 10; in one Composite,
// they decide, to the same 10.
func TestKeyedDailyAndMonthlyQuotasKeepApartOnMiniredis(t *testing.T) {
	ctx := context.Background()
	for _, composite := range []bool{false, true} {
		t.Run(fmt.Sprint("composite=", composite), func(t *testing.T) {
			_, client, advance := miniredisClock(t)
			clock := ratelimittest.NewClock(epoch.Add(-48 * time.Hour)) // two days before a month ends
			advance(-48 * time.Hour)
			daily, monthly := trialQuotas(t, client, WithClock(clock))
			allow := func() bool {
				m, err := monthly.Allow(ctx, "acme", 0)
				require.NoError(t, err)
				d, err := daily.Allow(ctx, "acme", 0)
				require.NoError(t, err)
				if m.Remaining == 0 || d.Remaining == 0 {
					return false
				}
				_, err = daily.Allow(ctx, "acme", 1)
				require.NoError(t, err)
				_, err = monthly.Allow(ctx, "acme", 1)
				require.NoError(t, err)
				return true
			}
			if composite {
				c, err := NewComposite(Part{Name: "day", Limiter: daily}, Part{Name: "month", Limiter: monthly})
				require.NoError(t, err)
				allow = func() bool {
					res, err := c.Allow(ctx, "acme", 1)
					require.NoError(t, err, "the Composite decides")
					return res.Allowed
				}
			}
			allowed := 0
			for day := range 2 {
				for range 12 {
					if allow() {
						allowed++
					}
				}
				if day == 0 {
					assert.Equal(t, 8, allowed, "the first day: the daily quota")
				}
				clock.Advance(24 * time.Hour)
				advance(24 * time.Hour)
			}
			assert.Equal(t, 10, allowed, "the month: the monthly quota")
		})
	}
}

func TestRealRedisKeyedDailyAndMonthlyQuotasDecideInOneComposite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.Shared(t).Client(t)
	daily, monthly := trialQuotas(t, client)
	c, err := NewComposite(Part{Name: "day", Limiter: daily}, Part{Name: "month", Limiter: monthly})
	require.NoError(t, err)
	allowed := 0
	for range 12 {
		d, err := c.Decide(ctx, "acme", 1)
		require.NoError(t, err, "the Composite decides")
		if d.Allowed {
			allowed++
		}
	}
	// The test may straddle midnight in Berlin: at most 10 then, the
	// month's, unless it also straddles the month's end.
	assert.GreaterOrEqual(t, allowed, 8)
	res, err := monthly.Allow(ctx, "acme", 0)
	require.NoError(t, err)
	assert.Equal(t, 10-allowed, res.Remaining, "the monthly quota counted each allowed call once")
}

// TestNewCompositeRefusesPartsThatKeepEveryKeyInOnePlace: parts on the
// call's key whose Redis keys are always one (one limiter twice, or two of
// one configuration) could never decide: NewComposite refuses them,
// naming the parts; parts whose keys may differ are accepted.
func TestNewCompositeRefusesPartsThatKeepEveryKeyInOnePlace(t *testing.T) {
	_, client, _ := miniredisClock(t)
	tb1, err := NewRedisTokenBucket(client, PerSecond(10), 10)
	require.NoError(t, err)
	tb2, err := NewRedisTokenBucket(client, PerSecond(10), 10)
	require.NoError(t, err)
	app1, err := NewRedisFixedWindow(client, 10, time.Minute, WithKeyPrefix("app:"))
	require.NoError(t, err)
	app2, err := NewRedisFixedWindow(client, 20, time.Hour, WithKeyPrefix("app:"))
	require.NoError(t, err)
	daily, monthly := trialQuotas(t, client, WithClock(ratelimittest.NewClock(epoch)))
	keyed1, err := NewRedisSlidingCounter(client, 10, time.Minute, keyedTo(Policy{}))
	require.NoError(t, err)
	keyed2, err := NewRedisSlidingCounter(client, 10, time.Minute, keyedTo(Policy{Limit: 10, Window: time.Second}))
	require.NoError(t, err)
	local, err := NewTokenBucket(PerSecond(10), 10)
	require.NoError(t, err)
	tenant := func(string) string { return "{acme}" }
	for _, tc := range []struct {
		a, b    Part
		refused bool
	}{
		{Part{Name: "a", Limiter: tb1}, Part{Name: "b", Limiter: tb1}, true},
		{Part{Name: "a", Limiter: tb1}, Part{Name: "b", Limiter: tb2}, true},
		{Part{Name: "a", Limiter: app1}, Part{Name: "b", Limiter: app2}, true},
		{Part{Name: "a", Limiter: local}, Part{Name: "b", Limiter: local}, true},
		{Part{Name: "a", Limiter: tb1}, Part{Name: "b", Limiter: tb2, Key: tenant}, false},
		{Part{Name: "a", Limiter: local}, Part{Name: "b", Limiter: local, Key: tenant}, false},
		{Part{Name: "a", Limiter: daily}, Part{Name: "b", Limiter: monthly}, false},
		{Part{Name: "a", Limiter: keyed1}, Part{Name: "b", Limiter: keyed2}, false}, // their keys' windows differ
	} {
		_, err := NewComposite(tc.a, tc.b)
		if !tc.refused {
			assert.NoError(t, err)
			continue
		}
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), `parts "a" and "b"`)
	}
}

// apiPlans is the trial's plan of an API key: 5 a second (a bucket), 8 a
// day and 10 a month, the quotas in the key's zone; it records the keys
// it was asked about.
type apiPlans struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (p *apiPlans) policy(window time.Duration, limit int) PolicyFunc {
	return func(_ context.Context, key string) (Policy, error) {
		p.mu.Lock()
		p.seen[key] = true
		p.mu.Unlock()
		zone := ""
		if strings.HasSuffix(key, "-tokyo") {
			zone = "Asia/Tokyo"
		}
		if window == time.Second {
			zone = ""
		}
		return Policy{Limit: limit, Window: window, Zone: zone}, nil
	}
}

// apiComposite returns the Composite of the trial's three parts on one
// API key, each built WithPolicyFunc, on client, the calendars' windows
// cut on clock when given.
func apiComposite(t *testing.T, client redis.Scripter, plans *apiPlans, clock ...RedisOption) *Composite {
	perSecond, err := NewRedisTokenBucket(client, PerSecond(5), 5, WithPolicyFunc(plans.policy(time.Second, 5)))
	require.NoError(t, err)
	daily, err := NewRedisCalendarWindow(client, 8, Calendar{Period: CalendarDay}, append(clock, WithPolicyFunc(plans.policy(CalendarDay.Nominal(), 8)))...)
	require.NoError(t, err)
	monthly, err := NewRedisCalendarWindow(client, 10, Calendar{Period: CalendarMonth}, append(clock, WithPolicyFunc(plans.policy(CalendarMonth.Nominal(), 10)))...)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "rps", Limiter: perSecond}, Part{Name: "day", Limiter: daily}, Part{Name: "month", Limiter: monthly})
	require.NoError(t, err)
	return c
}

// checkCompositeOfOneKeyNeedsNoBraces runs the trial's Composite on keys
// without braces through a cluster client: every call is decided (its
// parts' keys are in one slot), each key gets its daily quota, a Settle
// with a token applies once, and every PolicyFunc sees the caller's key
// as it is.
func checkCompositeOfOneKeyNeedsNoBraces(t *testing.T, client *redis.ClusterClient, clock ...RedisOption) {
	ctx := context.Background()
	plans := &apiPlans{seen: map[string]bool{}}
	c := apiComposite(t, client, plans, clock...)
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("key-%d", i), fmt.Sprintf("key-%d-tokyo", i))
	}
	keys = append(keys, "ac}me", "", "{acme}", "{acme}:alice")
	for _, key := range keys {
		allowed := 0
		for range 5 {
			d, err := c.Decide(ctx, key, 1)
			require.NoError(t, err, "key %q", key)
			if d.Allowed {
				allowed++
			}
		}
		assert.Equal(t, 5, allowed, "key %q", key)
		for range 2 {
			_, err := c.Settle(ctx, key, 1, 3, WithToken("req:1"))
			require.NoError(t, err, "key %q", key)
		}
		d, err := c.Decide(ctx, key, 0)
		require.NoError(t, err, "key %q", key)
		assert.Equal(t, 1, d.Parts[1].Remaining, "key %q: 8 a day less 5 and 2 settled once", key)
		assert.Equal(t, 3, d.Parts[2].Remaining, "key %q: 10 a month less 7", key)
	}
	for _, key := range keys {
		assert.True(t, plans.seen[key], "the PolicyFuncs saw %q as it is", key)
	}
	assert.Len(t, plans.seen, len(keys))
}

func TestCompositeOfOneKeyNeedsNoBracesOnAClusterClientOfMiniredis(t *testing.T) {
	t.Parallel()
	m, _, _ := miniredisClock(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{m.Addr()}})
	t.Cleanup(func() { _ = client.Close() })
	checkCompositeOfOneKeyNeedsNoBraces(t, client, WithClock(ratelimittest.NewClock(epoch)))
}

func TestRealRedisClusterCompositeOfOneKeyNeedsNoBraces(t *testing.T) {
	t.Parallel()
	client := redistest.SharedCluster(t).Client(t)
	checkCompositeOfOneKeyNeedsNoBraces(t, client)
	for i, n := range masterSizes(t, client) {
		assert.Positive(t, n, "master %d holds keys: the keys spread over the slots", i)
	}
}

// checkSettleTokensOfTwoPairsApply: two (key, token) pairs whose token
// keys once had one name (the key and the token joined by ':') are two
// Settles: each applies, once.
func checkSettleTokensOfTwoPairsApply(t *testing.T, client redis.Scripter) {
	ctx := context.Background()
	w, err := NewRedisFixedWindow(client, 100, time.Hour)
	require.NoError(t, err)
	for _, pair := range [][2][2]string{
		{{"{acme}:alice", "x:y"}, {"{acme}:alice:x", "y"}},
		{{"bob", "1:2"}, {"bob:1", "2"}},
	} {
		for _, kt := range pair {
			for range 2 { // the second is a retry, which changes nothing
				_, err := w.Settle(ctx, kt[0], 0, 5, WithToken(kt[1]))
				require.NoError(t, err)
			}
			res, err := w.Allow(ctx, kt[0], 0)
			require.NoError(t, err)
			assert.Equal(t, 95, res.Remaining, "key %q, token %q: settled once", kt[0], kt[1])
		}
	}
}

func TestSettleTokensOfTwoPairsApplyOnMiniredis(t *testing.T) {
	_, client, _ := miniredisClock(t)
	checkSettleTokensOfTwoPairsApply(t, client)
}

func TestRealRedisSettleTokensOfTwoPairsApply(t *testing.T) {
	t.Parallel()
	checkSettleTokensOfTwoPairsApply(t, redistest.Shared(t).Client(t))
}
