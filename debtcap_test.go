package ratelimit

import (
	"context"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

func TestWithMaxDebtRefusesNegativeBoundsOtherThanUnbounded(t *testing.T) {
	_, client, _ := miniredisClock(t)
	builds := map[string]func(opts ...Option) (Limiter, error){
		"TokenBucket": func(opts ...Option) (Limiter, error) { return NewTokenBucket(PerSecond(1), 10, opts...) },
		"GCRA":        func(opts ...Option) (Limiter, error) { return NewGCRA(10, time.Minute, opts...) },
		"FixedWindow": func(opts ...Option) (Limiter, error) { return NewFixedWindow(10, time.Minute, opts...) },
		"RedisTokenBucket": func(opts ...Option) (Limiter, error) {
			return NewRedisTokenBucket(client, PerSecond(1), 10, redisOpts(opts)...)
		},
		"RedisGCRA": func(opts ...Option) (Limiter, error) {
			return NewRedisGCRA(client, 10, time.Minute, redisOpts(opts)...)
		},
		"RedisFixedWindow": func(opts ...Option) (Limiter, error) {
			return NewRedisFixedWindow(client, 10, time.Minute, redisOpts(opts)...)
		},
	}
	for name, build := range builds {
		for _, limits := range []int{-2, math.MinInt} {
			_, err := build(WithMaxDebt(limits))
			require.ErrorIs(t, err, ErrInvalidConfig, "%s: WithMaxDebt(%d)", name, limits)
			assert.Contains(t, err.Error(), "WithMaxDebt", name)
		}
		for _, limits := range []int{UnboundedDebt, 0, 1, 7, math.MaxInt} {
			_, err := build(WithMaxDebt(limits))
			require.NoError(t, err, "%s: WithMaxDebt(%d)", name, limits)
		}
	}
}

func TestDebtCapArithmeticSaturatesWithoutOverflow(t *testing.T) {
	for _, c := range []struct {
		cap                 debtCap
		limit, units, count int64
	}{
		{0, 10, 0, 10},
		{1, 10, 10, 20},
		{3, 10, 30, 40},
		{UnboundedDebt, 10, maxSettleCost, maxSettleCost},
		{math.MaxInt64, 10, maxSettleCost, maxSettleCost},
		{1, maxSettleCost - 1, maxSettleCost - 1, maxSettleCost},
		{2, 1 << 51, maxSettleCost, maxSettleCost},
		// A limit of 2^52 or more never counts past itself.
		{1, maxSettleCost, maxSettleCost, maxSettleCost},
		{1, math.MaxInt64, maxSettleCost, math.MaxInt64},
		{UnboundedDebt, 1 << 60, maxSettleCost, 1 << 60},
	} {
		assert.Equal(t, c.units, c.cap.units(c.limit), "units: cap %d, limit %d", c.cap, c.limit)
		assert.Equal(t, c.count, c.cap.count(c.limit), "count: cap %d, limit %d", c.cap, c.limit)
	}
	for _, c := range []struct {
		cap       debtCap
		tau, span int64
	}{
		{0, int64(time.Minute), int64(time.Minute)},
		{1, int64(time.Minute), int64(2 * time.Minute)},
		{UnboundedDebt, int64(time.Minute), maxSpan},
		{math.MaxInt64, 1, maxSpan},
		{1, maxSpan, maxSpan},
		{0, maxSpan, maxSpan},
		{1, maxSpan / 2, maxSpan / 2 * 2},
		{1, maxSpan/2 + 1, maxSpan},
		{math.MaxInt64 / 2, 3, maxSpan},
	} {
		assert.Equal(t, c.span, c.cap.span(c.tau), "span: cap %d, tau %d", c.cap, c.tau)
	}
}

// TestAHugeDebtBoundIsUnbounded: a bound beyond what a store keeps is the
// same as none, in process and on Redis.
func TestAHugeDebtBoundIsUnbounded(t *testing.T) {
	ctx := context.Background()
	for _, sub := range append(append([]subject(nil), bucketSubjects...), windowSubjects...) {
		t.Run(sub.name, func(t *testing.T) {
			var got [2]Result
			for i, limits := range []int{math.MaxInt, UnboundedDebt} {
				l, _ := sub.newLimiter(t, 4, time.Second, WithMaxDebt(limits), WithMaxSettle(UnboundedSettle))
				res, err := l.(Adjuster).Settle(ctx, "k", 0, maxSettleCost)
				require.NoError(t, err)
				got[i] = res
			}
			assert.Equal(t, got[1], got[0])
		})
	}
}

// TestTheDebtBoundFollowsTheKeysPolicy: built WithPolicyFunc, the bound is
// in the key's limits, as its policy changes; a key already further in
// debt (its policy lowered) keeps its debt, and a Refund pays it down.
func TestTheDebtBoundFollowsTheKeysPolicy(t *testing.T) {
	ctx := context.Background()
	for _, sub := range policyFuncRateSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			plans.set("k", Policy{Limit: 10, Window: 10 * time.Second}) // 1 s a unit
			l, _ := sub.newLimiter(t, ownPolicy, plans.f)
			res, err := l.Settle(ctx, "k", 0, 100) // ten limits: the most one Settle may charge
			require.NoError(t, err)
			assert.Equal(t, ok(10, 0, 20*time.Second), res, "one limit of the key's policy in debt")
			// 20 units owed, at 2 s each now: 40 s, beyond the new bound
			// of 5 + 5 units (20 s), and kept.
			plans.set("k", Policy{Limit: 5, Window: 10 * time.Second})
			res, err = l.Settle(ctx, "k", 0, 3)
			require.NoError(t, err)
			assert.Equal(t, ok(5, 0, 40*time.Second), res, "a settle never lowers a debt")
			res, err = l.Refund(ctx, "k", 5)
			require.NoError(t, err)
			assert.Equal(t, ok(5, 0, 30*time.Second), res)
			res, err = l.Settle(ctx, "k", 0, 3)
			require.NoError(t, err)
			assert.Equal(t, ok(5, 0, 30*time.Second), res)
		})
	}
	for _, sub := range policyFuncWindowSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			plans.set("k", Policy{Limit: 3, Window: 10 * time.Second})
			l, _ := sub.newLimiter(t, ownPolicy, plans.f)
			res, err := l.Settle(ctx, "k", 0, 30)
			require.NoError(t, err)
			assert.Equal(t, ok(3, 0, 10*time.Second), res) // 6 counted
			plans.set("k", Policy{Limit: 2, Window: 10 * time.Second})
			res, err = l.Settle(ctx, "k", 0, 3) // beyond 2 + 2: stays at 6
			require.NoError(t, err)
			assert.Equal(t, ok(2, 0, 10*time.Second), res)
			res, err = l.Refund(ctx, "k", 2) // 4
			require.NoError(t, err)
			assert.Equal(t, ok(2, 0, 10*time.Second), res)
			res, err = l.Refund(ctx, "k", 2) // 2
			require.NoError(t, err)
			assert.Equal(t, ok(2, 0, 10*time.Second), res)
			res, err = l.Refund(ctx, "k", 1) // 1
			require.NoError(t, err)
			assert.Equal(t, ok(2, 1, 10*time.Second), res)
		})
	}
}

// TestRealRedisABogusUsageCostsAMinuteNotDays: on a real server, a Settle
// of a usage of 10^9 on a key of 100 a minute once answered Retry-After:
// 1199941 (13.9 days). By default it is refused (above ten limits) and
// the key is as it was. Without that bound, the bound on debt (one limit
// by default) keeps the key full within two minutes, allowing again
// within about one, and its Redis state says so; with UnboundedDebt too,
// it owes what it used to.
func TestRealRedisABogusUsageCostsAMinuteNotDays(t *testing.T) {
	t.Parallel()
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	builds := map[string]func(opts ...Option) (Adjuster, error){
		"RedisTokenBucket": func(opts ...Option) (Adjuster, error) {
			return NewRedisTokenBucket(client, PerMinute(100), 100, redisOpts(opts)...)
		},
		"RedisGCRA": func(opts ...Option) (Adjuster, error) {
			return NewRedisGCRA(client, 100, time.Minute, redisOpts(opts)...)
		},
		"RedisGCRA/PolicyFunc": func(opts ...Option) (Adjuster, error) {
			return NewRedisGCRA(client, 3, time.Hour, append(redisOpts(opts), WithPolicyFunc(everyKey(100, time.Minute)))...)
		},
		"RedisFixedWindow": func(opts ...Option) (Adjuster, error) {
			return NewRedisFixedWindow(client, 100, time.Minute, redisOpts(opts)...)
		},
	}
	// Waits measured on the server's clock, which moves on between calls.
	const slack = 2 * time.Second
	for name, build := range builds {
		t.Run(name, func(t *testing.T) {
			refusing, err := build()
			require.NoError(t, err)
			key := "tenant-" + name
			_, err = refusing.Allow(ctx, key+"-refused", 1)
			require.NoError(t, err)
			_, err = refusing.Settle(ctx, key+"-refused", 1, 1_000_000_000)
			require.ErrorIs(t, err, ErrInvalidCost)
			require.ErrorIs(t, err, ErrCaller)
			after, err := refusing.Allow(ctx, key+"-refused", 1)
			require.NoError(t, err)
			assert.True(t, after.Allowed)
			assert.Equal(t, 98, after.Remaining, "the refused Settle charged nothing")

			l, err := build(WithMaxSettle(UnboundedSettle))
			require.NoError(t, err)
			_, err = l.Allow(ctx, key, 1)
			require.NoError(t, err)
			res, err := l.Settle(ctx, key, 1, 1_000_000_000)
			require.NoError(t, err)
			// Full in two minutes, the next unit in one and its 600 ms;
			// a window's debt ends with it, in a minute.
			wantReset, wantRetry := 2*time.Minute, time.Minute+600*ms
			if name == "RedisFixedWindow" {
				wantReset, wantRetry = time.Minute, time.Minute
			}
			assert.True(t, res.Allowed)
			assert.Equal(t, 0, res.Remaining)
			assert.LessOrEqual(t, res.ResetAfter, wantReset)
			assert.Greater(t, res.ResetAfter, wantReset-slack)
			denied, err := l.Allow(ctx, key, 1)
			require.NoError(t, err)
			require.False(t, denied.Allowed)
			assert.LessOrEqual(t, denied.RetryAfter, wantRetry, "Retry-After about a minute, not days")
			assert.Greater(t, denied.RetryAfter, wantRetry-slack)

			// What Redis holds: a window's count of two limits, or a time
			// at most two minutes ahead of the server's.
			prefix := l.(interface{ KeyPrefix() string }).KeyPrefix()
			if name == "RedisFixedWindow" {
				count, err := client.Get(ctx, storedKey(prefix, key)).Int64()
				require.NoError(t, err)
				assert.Equal(t, int64(200), count)
			} else {
				assert.LessOrEqual(t, serverTatAhead(t, client, storedKey(prefix, key)), 2*time.Minute)
			}

			unbounded, err := build(WithMaxDebt(UnboundedDebt), WithMaxSettle(UnboundedSettle))
			require.NoError(t, err)
			_, err = unbounded.Settle(ctx, key+"-unbounded", 0, 1_000_000_000)
			require.NoError(t, err)
			denied, err = unbounded.Allow(ctx, key+"-unbounded", 1)
			require.NoError(t, err)
			if name == "RedisFixedWindow" {
				assert.LessOrEqual(t, denied.RetryAfter, time.Minute, "a window's debt ends with it")
			} else {
				assert.Greater(t, denied.RetryAfter, 13*24*time.Hour, "unbounded: the old lock-out")
			}
		})
	}
}

// serverTatAhead returns how far ahead of the server's TIME the tat stored
// under key is: a HASH's tat field, or a STRING's "tat" or "tat:interval".
func serverTatAhead(t *testing.T, client *redis.Client, key string) time.Duration {
	t.Helper()
	ctx := context.Background()
	var raw string
	if typ := client.Type(ctx, key).Val(); typ == "hash" {
		raw = client.HGet(ctx, key, "tat").Val()
	} else {
		raw = client.Get(ctx, key).Val()
		for i := range raw {
			if raw[i] == ':' {
				raw = raw[:i]
				break
			}
		}
	}
	tat, err := strconv.ParseInt(raw, 10, 64)
	require.NoError(t, err, "%s holds %q", key, raw)
	now, err := client.Time(ctx).Result()
	require.NoError(t, err)
	return time.Duration(tat-now.UnixMicro()) * time.Microsecond
}

// BenchmarkSettleIntoDebt settles bogus costs on keys of an in-process
// GCRA, the debt bounded by default and unbounded: the bound costs
// nothing measurable.
func BenchmarkSettleIntoDebt(b *testing.B) {
	for _, c := range []struct {
		name string
		opts []Option
	}{{"bounded", []Option{WithMaxSettle(UnboundedSettle)}}, {"unbounded", []Option{WithMaxDebt(UnboundedDebt), WithMaxSettle(UnboundedSettle)}}} {
		b.Run(c.name, func(b *testing.B) {
			g, err := NewGCRA(100, time.Minute, c.opts...)
			require.NoError(b, err)
			ctx := context.Background()
			var id atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				key := "tenant-" + strconv.FormatInt(id.Add(1), 10)
				for pb.Next() {
					if _, err := g.Settle(ctx, key, 1, 1_000_000_000); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
