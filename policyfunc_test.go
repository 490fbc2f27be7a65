package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// policyFuncSubject is one of the six limiters built WithPolicyFunc. newLimiter
// returns one whose constructor's policy is own, deciding by f, with opts
// added, and a function that moves the time it sees.
type policyFuncSubject struct {
	name       string
	window     bool // a fixed window; otherwise a token bucket or GCRA
	redis      bool
	newLimiter func(t *testing.T, own Policy, f PolicyFunc, opts ...Option) (Adjuster, func(time.Duration))
}

// rateOf is the refill rate of a token bucket whose policy is p.
func rateOf(p Policy) Rate { return Per(p.Limit, p.Window) }

// inProcessPolicyFunc makes a policyFuncSubject of an in-process limiter on a
// ratelimittest.Clock.
func inProcessPolicyFunc(name string, window bool, build func(own Policy, opts ...Option) (Adjuster, error)) policyFuncSubject {
	return policyFuncSubject{name, window, false, func(t *testing.T, own Policy, f PolicyFunc, opts ...Option) (Adjuster, func(time.Duration)) {
		clock := ratelimittest.NewClock(epoch)
		l, err := build(own, append([]Option{WithClock(clock), WithPolicyFunc(f)}, opts...)...)
		require.NoError(t, err)
		return l, clock.Advance
	}}
}

// miniredisPolicyFunc makes a policyFuncSubject of a Redis limiter on a miniredis whose
// time the test moves.
func miniredisPolicyFunc(name string, window bool, build func(client *redis.Client, own Policy, opts ...Option) (Adjuster, error)) policyFuncSubject {
	return policyFuncSubject{name + "/miniredis", window, true, func(t *testing.T, own Policy, f PolicyFunc, opts ...Option) (Adjuster, func(time.Duration)) {
		_, client, advance := miniredisClock(t)
		l, err := build(client, own, append([]Option{WithPolicyFunc(f)}, opts...)...)
		require.NoError(t, err)
		return l, advance
	}}
}

var (
	buildTokenBucket = func(own Policy, opts ...Option) (Adjuster, error) {
		return NewTokenBucket(rateOf(own), own.Limit, opts...)
	}
	buildGCRA = func(own Policy, opts ...Option) (Adjuster, error) {
		return NewGCRA(own.Limit, own.Window, opts...)
	}
	buildFixedWindow = func(own Policy, opts ...Option) (Adjuster, error) {
		return NewFixedWindow(own.Limit, own.Window, opts...)
	}
	buildRedisTokenBucket = func(client *redis.Client, own Policy, opts ...Option) (Adjuster, error) {
		return NewRedisTokenBucket(client, rateOf(own), own.Limit, redisOpts(opts)...)
	}
	buildRedisGCRA = func(client *redis.Client, own Policy, opts ...Option) (Adjuster, error) {
		return NewRedisGCRA(client, own.Limit, own.Window, redisOpts(opts)...)
	}
	buildRedisFixedWindow = func(client *redis.Client, own Policy, opts ...Option) (Adjuster, error) {
		return NewRedisFixedWindow(client, own.Limit, own.Window, redisOpts(opts)...)
	}
)

// policyFuncRateSubjects are the token buckets and GCRAs built WithPolicyFunc.
var policyFuncRateSubjects = []policyFuncSubject{
	inProcessPolicyFunc("TokenBucket", false, buildTokenBucket),
	inProcessPolicyFunc("GCRA", false, buildGCRA),
	miniredisPolicyFunc("RedisTokenBucket", false, buildRedisTokenBucket),
	miniredisPolicyFunc("RedisGCRA", false, buildRedisGCRA),
}

// policyFuncWindowSubjects are the fixed windows built WithPolicyFunc.
var policyFuncWindowSubjects = []policyFuncSubject{
	inProcessPolicyFunc("FixedWindow", true, buildFixedWindow),
	miniredisPolicyFunc("RedisFixedWindow", true, buildRedisFixedWindow),
}

// policyFuncSubjects are all six.
var policyFuncSubjects = append(append([]policyFuncSubject(nil), policyFuncRateSubjects...), policyFuncWindowSubjects...)

// ownPolicy is the constructor's policy of the limiters below, which no
// key uses unless it says so: 3 per hour.
var ownPolicy = Policy{Limit: 3, Window: time.Hour}

// perMinute is a policy of limit per minute.
func perMinute(limit int) Policy { return Policy{Limit: limit, Window: time.Minute} }

// policyFuncCalls makes calls on l that must not fail, and returns their Results.
type policyFuncCalls struct {
	t *testing.T
	l Adjuster
}

func (c policyFuncCalls) allow(key string, n int) Result {
	c.t.Helper()
	res, err := c.l.Allow(context.Background(), key, n)
	require.NoError(c.t, err, "Allow(%q, %d)", key, n)
	return res
}

func (c policyFuncCalls) settle(key string, taken, cost int) Result {
	c.t.Helper()
	res, err := c.l.Settle(context.Background(), key, taken, cost)
	require.NoError(c.t, err, "Settle(%q, %d, %d)", key, taken, cost)
	return res
}

// TestRaisedLimitGivesTheNewUnitsAtOnce: a key that used all 10 of 10 per
// minute and is raised to 100 per minute has 90 at once, since what it used
// (10 units) is kept; 90 more calls are allowed, the 91st denied. From that
// call on, the key refills at the new rate.
func TestRaisedLimitGivesTheNewUnitsAtOnce(t *testing.T) {
	t.Parallel()
	for _, sub := range policyFuncRateSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			l, advance := sub.newLimiter(t, ownPolicy, plans.f)
			c := policyFuncCalls{t, l}

			plans.set("k", perMinute(10))
			assert.Equal(t, ok(10, 0, time.Minute), c.allow("k", 10))
			assert.Equal(t, no(10, 0, 6*time.Second, time.Minute), c.allow("k", 1))

			plans.set("k", perMinute(100))
			assert.Equal(t, ok(100, 90, 6*time.Second), c.allow("k", 0), "10 units used of 100")
			for i := 1; i <= 90; i++ {
				want := ok(100, 90-i, 6*time.Second+time.Duration(i)*600*ms)
				if !assert.Equal(t, want, c.allow("k", 1), "call %d after the raise", i) {
					return
				}
			}
			assert.Equal(t, no(100, 0, 600*ms, time.Minute), c.allow("k", 1), "the 91st")

			// Another key, raised the same way: its next call (a peek) is
			// where the new policy takes hold, so 3 s later it has refilled
			// 5 units at 100 per minute, not half a unit at 10 per minute.
			plans.set("p", perMinute(10))
			assert.Equal(t, ok(10, 0, time.Minute), c.allow("p", 10))
			plans.set("p", perMinute(100))
			assert.Equal(t, ok(100, 90, 6*time.Second), c.allow("p", 0))
			advance(3 * time.Second)
			assert.Equal(t, ok(100, 95, 3*time.Second), c.allow("p", 0), "3 s after the raise, at 100 per minute")
			advance(3 * time.Second)
			assert.Equal(t, ok(100, 100, 0), c.allow("p", 0), "full 6 s after the raise")
		})
	}
}

// TestLoweredLimitLeavesADebtThatTimePaysOff: a key that used 50 of 100 per
// minute and is lowered to 10 per minute owes 40 units beyond its new
// limit: it is denied until time has paid them off at the new rate (240 s),
// and the first denial's RetryAfter says when the next unit comes (246 s).
// A key that used less than the new limit keeps the rest.
func TestLoweredLimitLeavesADebtThatTimePaysOff(t *testing.T) {
	for _, sub := range policyFuncRateSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			l, advance := sub.newLimiter(t, ownPolicy, plans.f)
			c := policyFuncCalls{t, l}

			plans.set("k", perMinute(100))
			plans.set("few", perMinute(100))
			assert.Equal(t, ok(100, 50, 30*time.Second), c.allow("k", 50))
			assert.Equal(t, ok(100, 95, 3*time.Second), c.allow("few", 5))

			plans.set("k", perMinute(10))
			plans.set("few", perMinute(10))
			assert.Equal(t, ok(10, 5, 30*time.Second), c.allow("few", 0), "5 used of 10")
			assert.Equal(t, no(10, 0, 246*time.Second, 300*time.Second), c.allow("k", 1), "50 used of 10: 40 in debt")
			assert.Equal(t, ok(10, 0, 300*time.Second), c.allow("k", 0), "a peek is allowed in debt")

			// Past the time the key would have refilled at 100 per minute,
			// it is still in debt at 10 per minute.
			advance(30 * time.Second)
			assert.Equal(t, no(10, 0, 216*time.Second, 270*time.Second), c.allow("k", 1), "30 s after the change")
			advance(210 * time.Second)
			assert.Equal(t, no(10, 0, 6*time.Second, time.Minute), c.allow("k", 1), "debt paid, no unit yet")
			advance(6 * time.Second)
			assert.Equal(t, ok(10, 0, time.Minute), c.allow("k", 1), "RetryAfter after the first denial")
		})
	}
}

// TestFullKeyIsUnaffectedByAPolicyChange: a key that was never used, or has
// refilled (its window ended), gets all of its new policy.
func TestFullKeyIsUnaffectedByAPolicyChange(t *testing.T) {
	for _, sub := range policyFuncSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			l, advance := sub.newLimiter(t, ownPolicy, plans.f)
			c := policyFuncCalls{t, l}

			plans.set("used", perMinute(100))
			assert.Equal(t, ok(100, 0, time.Minute), c.allow("used", 100))
			if sub.window {
				assert.Equal(t, ok(3, 2, time.Hour), c.allow("own", 1), "the zero Policy is the constructor's")
			} else {
				assert.Equal(t, ok(3, 2, 20*time.Minute), c.allow("own", 1), "the zero Policy is the constructor's")
			}
			advance(time.Minute)

			for _, key := range []string{"used", "never", "own"} {
				plans.set(key, perMinute(10))
			}
			want := ok(10, 9, 6*time.Second)
			if sub.window {
				want = ok(10, 9, time.Minute)
			}
			assert.Equal(t, want, c.allow("used", 1), "refilled under 100 per minute")
			assert.Equal(t, want, c.allow("never", 1), "never used")
			if sub.window {
				// The constructor's window of an hour is still open, with 1
				// counted.
				assert.Equal(t, ok(10, 8, 59*time.Minute), c.allow("own", 1))
			} else {
				// Not full: 1 of 3 per hour used a minute ago owes 19 min
				// at 20 min per unit, which is 5.7 s at 6 s per unit.
				assert.Equal(t, ok(10, 8, 11700*ms), c.allow("own", 1))
			}
		})
	}
}

// TestFixedWindowChecksItsCountAgainstTheLimitInForce: a window keeps its
// count when its key's policy changes: a lowered limit denies at once (a
// peek still passes), a raised one allows at once, and a new length only
// applies from the key's next window, the open one ending when it was to
// end.
func TestFixedWindowChecksItsCountAgainstTheLimitInForce(t *testing.T) {
	for _, sub := range policyFuncWindowSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			l, advance := sub.newLimiter(t, ownPolicy, plans.f)
			c := policyFuncCalls{t, l}

			plans.set("k", perMinute(10))
			assert.Equal(t, ok(10, 2, time.Minute), c.allow("k", 8))

			plans.set("k", perMinute(5))
			assert.Equal(t, no(5, 0, time.Minute, time.Minute), c.allow("k", 1), "8 counted of 5")
			assert.Equal(t, ok(5, 0, time.Minute), c.allow("k", 0))

			advance(20 * time.Second)
			plans.set("k", perMinute(20))
			assert.Equal(t, ok(20, 11, 40*time.Second), c.allow("k", 1), "8 counted of 20")

			plans.set("k", Policy{Limit: 20, Window: 2 * time.Minute})
			assert.Equal(t, ok(20, 10, 40*time.Second), c.allow("k", 1), "the open window ends when it was to")
			plans.set("k", Policy{Limit: 4, Window: 2 * time.Minute})
			assert.Equal(t, no(4, 0, 40*time.Second, 40*time.Second), c.allow("k", 1))

			advance(40 * time.Second)
			assert.Equal(t, ok(4, 3, 2*time.Minute), c.allow("k", 1), "the next window is 2 min long")
			advance(119 * time.Second)
			assert.Equal(t, ok(4, 0, time.Second), c.allow("k", 3))
			plans.set("k", Policy{Limit: 4, Window: 10 * time.Second})
			advance(time.Second)
			assert.Equal(t, ok(4, 3, 10*time.Second), c.allow("k", 1), "and the one after 10 s")

			// Settles count against the limit in force: past it, the
			// window is in debt, at most one limit in force (WithMaxDebt);
			// given back, below it again.
			plans.set("s", perMinute(10))
			assert.Equal(t, ok(10, 4, time.Minute), c.allow("s", 6))
			plans.set("s", perMinute(3))
			assert.Equal(t, ok(3, 0, time.Minute), c.settle("s", 3, 5), "6 counted of 3: 8, bounded")
			assert.Equal(t, no(3, 0, time.Minute, time.Minute), c.allow("s", 1))
			assert.Equal(t, ok(3, 0, time.Minute), c.settle("s", 2, 0), "4 counted of 3")
			assert.Equal(t, ok(3, 1, time.Minute), c.settle("s", 2, 0), "2 counted of 3")
			assert.Equal(t, ok(3, 0, time.Minute), c.allow("s", 1))
		})
	}
}

// TestFixedWindowLongerThanTheConstructorsLastsToItsEnd: a key whose policy
// gives it a window longer than the constructor's keeps its count for the
// whole of its own window, however often it is looked at.
func TestFixedWindowLongerThanTheConstructorsLastsToItsEnd(t *testing.T) {
	for _, sub := range policyFuncWindowSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			l, advance := sub.newLimiter(t, Policy{Limit: 5, Window: time.Second}, plans.f)
			c := policyFuncCalls{t, l}
			plans.set("k", Policy{Limit: 5, Window: time.Hour})
			assert.Equal(t, ok(5, 0, time.Hour), c.allow("k", 5))
			for i := 1; i <= 4; i++ {
				advance(1500 * ms)
				assert.Equal(t, ok(5, 0, time.Hour-time.Duration(i)*1500*ms), c.allow("k", 0), "%v later", time.Duration(i)*1500*ms)
			}
			assert.Equal(t, no(5, 0, time.Hour-6*time.Second, time.Hour-6*time.Second), c.allow("k", 1))
		})
	}
}

// errPlanStore is a PolicyFunc's own failure.
var errPlanStore = errors.New("plan store unavailable")

// TestPolicyFuncErrorFailsTheCallAndChangesNothing: an error of the
// PolicyFunc is wrapped by the call's error, which names the key, and the
// key is left as it was.
func TestPolicyFuncErrorFailsTheCallAndChangesNothing(t *testing.T) {
	ctx := context.Background()
	for _, sub := range policyFuncSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			l, _ := sub.newLimiter(t, ownPolicy, plans.f)
			c := policyFuncCalls{t, l}
			plans.set("k", Policy{Limit: 4, Window: 4 * time.Second})
			before := c.allow("k", 1)
			require.Equal(t, 3, before.Remaining)

			plans.fail(errPlanStore)
			res, err := l.Allow(ctx, "k", 1)
			require.ErrorIs(t, err, errPlanStore)
			assert.Contains(t, err.Error(), KeyDigest("k"))
			assert.False(t, res.Allowed)
			_, err = l.Settle(ctx, "k", 0, 2)
			require.ErrorIs(t, err, errPlanStore)
			_, err = l.Refund(ctx, "k", 1)
			require.ErrorIs(t, err, errPlanStore)

			plans.fail(nil)
			assert.Equal(t, before, c.allow("k", 0), "unchanged")
		})
	}
}

// TestInvalidPolicyIsAnInvalidConfigErrorNamingTheKey: a policy the
// constructor would refuse fails the call with an error wrapping
// ErrInvalidConfig that names the key, and changes nothing.
func TestInvalidPolicyIsAnInvalidConfigErrorNamingTheKey(t *testing.T) {
	ctx := context.Background()
	for _, sub := range policyFuncSubjects {
		t.Run(sub.name, func(t *testing.T) {
			invalid := []Policy{
				{Limit: 0, Window: time.Second},
				{Limit: -1, Window: time.Second},
				{Limit: 4, Window: 0},
				{Limit: 4, Window: -time.Second},
			}
			switch {
			case sub.window && sub.redis:
				// Redis expiry counts whole ms.
				invalid = append(invalid, Policy{Limit: 4, Window: 1500 * time.Microsecond}, Policy{Limit: 4, Window: time.Microsecond})
			case sub.redis:
				// Less than 1 µs per unit.
				invalid = append(invalid, Policy{Limit: 10, Window: 9 * time.Microsecond})
			case !sub.window:
				// Less than 1 ns per unit.
				invalid = append(invalid, Policy{Limit: 10, Window: 9 * time.Nanosecond})
			}
			plans := newPlanMap()
			l, _ := sub.newLimiter(t, ownPolicy, plans.f)
			c := policyFuncCalls{t, l}
			valid := Policy{Limit: 4, Window: 4 * time.Second}
			plans.set("user-7", valid)
			before := c.allow("user-7", 1)
			for _, p := range invalid {
				plans.set("user-7", p)
				res, err := l.Allow(ctx, "user-7", 1)
				require.ErrorIs(t, err, ErrInvalidConfig, "%+v", p)
				assert.Contains(t, err.Error(), KeyDigest("user-7"), "%+v", p)
				assert.False(t, res.Allowed, "%+v", p)
				_, err = l.Settle(ctx, "user-7", 0, 1)
				require.ErrorIs(t, err, ErrInvalidConfig, "%+v", p)
				_, err = l.Allow(ctx, "user-7", 0)
				require.ErrorIs(t, err, ErrInvalidConfig, "%+v", p)
			}
			plans.set("user-7", valid)
			assert.Equal(t, before, c.allow("user-7", 0), "unchanged")
		})
	}
}

// TestCostAboveTheKeysLimitExceedsIt: n above the key's limit, even within
// the constructor's, can never succeed: ErrCostExceedsLimit, with the key's
// limit in the Result, and nothing changes.
func TestCostAboveTheKeysLimitExceedsIt(t *testing.T) {
	ctx := context.Background()
	for _, sub := range policyFuncSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			l, _ := sub.newLimiter(t, Policy{Limit: 20, Window: time.Hour}, plans.f)
			c := policyFuncCalls{t, l}
			plans.set("k", Policy{Limit: 3, Window: 3 * time.Second})

			res, err := l.Allow(ctx, "k", 4)
			require.ErrorIs(t, err, ErrCostExceedsLimit)
			assert.Equal(t, Result{Limit: 3}, res)
			// A Settle may give back units taken under a larger policy: only
			// more than any call takes is refused.
			res, err = l.Settle(ctx, "k", 1<<52+1, 0)
			require.ErrorIs(t, err, ErrCostExceedsLimit)
			assert.Equal(t, Result{Limit: 3}, res)
			assert.Equal(t, ok(3, 3, 0), c.allow("k", 0), "nothing taken")

			res = c.allow("other", 4)
			assert.True(t, res.Allowed, "a key without a policy of its own has the constructor's limit")
			assert.Equal(t, 20, res.Limit)
		})
	}
}

// TestWithPolicyFuncNilIsInvalidConfig: every constructor refuses a nil
// PolicyFunc.
func TestWithPolicyFuncNilIsInvalidConfig(t *testing.T) {
	_, client, _ := miniredisClock(t)
	constructors := map[string]func() (Limiter, error){
		"TokenBucket": func() (Limiter, error) { return NewTokenBucket(PerSecond(1), 3, WithPolicyFunc(nil)) },
		"GCRA":        func() (Limiter, error) { return NewGCRA(3, time.Second, WithPolicyFunc(nil)) },
		"FixedWindow": func() (Limiter, error) { return NewFixedWindow(3, time.Second, WithPolicyFunc(nil)) },
		"RedisTokenBucket": func() (Limiter, error) {
			return NewRedisTokenBucket(client, PerSecond(1), 3, WithPolicyFunc(nil))
		},
		"RedisGCRA": func() (Limiter, error) { return NewRedisGCRA(client, 3, time.Second, WithPolicyFunc(nil)) },
		"RedisFixedWindow": func() (Limiter, error) {
			return NewRedisFixedWindow(client, 3, time.Second, WithPolicyFunc(nil))
		},
	}
	for name, build := range constructors {
		t.Run(name, func(t *testing.T) {
			_, err := build()
			require.ErrorIs(t, err, ErrInvalidConfig)
		})
	}
}

// TestPoliciesAnswerEachKeysPolicy: Policies answers the constructor's
// policy, named "default", for every key of a limiter with one policy for
// every key; for one built WithPolicyFunc it answers a key's policy, the
// limiter's own for the zero Policy, and an error wrapping ErrInvalidConfig
// for a policy the limiter refuses (ErrPolicy beside the function's own
// error when it fails); a decorator answers its backend's.
func TestPoliciesAnswerEachKeysPolicy(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	plainTB, err := NewTokenBucket(PerSecond(1), 3)
	require.NoError(t, err)
	plainGCRA, err := NewGCRA(3, time.Second)
	require.NoError(t, err)
	plainFW, err := NewFixedWindow(3, time.Second)
	require.NoError(t, err)
	plainRTB, err := NewRedisTokenBucket(client, PerSecond(1), 3)
	require.NoError(t, err)
	plainRGCRA, err := NewRedisGCRA(client, 3, time.Second)
	require.NoError(t, err)
	plainRFW, err := NewRedisFixedWindow(client, 3, time.Second)
	require.NoError(t, err)
	for _, l := range []Decider{plainTB, plainGCRA, plainFW, plainRTB, plainRGCRA, plainRFW} {
		own := policyOf(l)
		require.Equal(t, 3, own.Limit, "%T", l)
		for _, key := range []string{"gold", "anyone"} {
			policies, err := l.Policies(ctx, key)
			require.NoError(t, err, "%T", l)
			assert.Equal(t, []NamedPolicy{{Name: "default", Policy: own}}, policies, "%T: one policy for every key", l)
		}
	}
	_, err = decideAny(ctx, nil, "k", 1)
	require.ErrorIs(t, err, ErrInvalidConfig)
	policies, err := (*GCRA)(nil).Policies(ctx, "k")
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Nil(t, policies)

	for _, sub := range policyFuncSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			gold := Policy{Limit: 100, Window: time.Minute}
			plans.set("gold", gold)
			plans.set("bad", Policy{Limit: 0, Window: time.Minute})
			l, _ := sub.newLimiter(t, ownPolicy, plans.f)
			require.Implements(t, (*Decider)(nil), l)

			guard, err := NewGuard(l, GuardConfig{})
			require.NoError(t, err)
			for _, who := range []Decider{l.(Decider), guard} {
				p, err := who.Policies(ctx, "gold")
				require.NoError(t, err)
				assert.Equal(t, []NamedPolicy{{Name: "default", Policy: gold}}, p, "%T", who)
				p, err = who.Policies(ctx, "anyone")
				require.NoError(t, err)
				assert.Equal(t, []NamedPolicy{{Name: "default", Policy: ownPolicy}}, p, "%T: the zero Policy is the limiter's own", who)
				_, err = who.Policies(ctx, "bad")
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.Contains(t, err.Error(), KeyDigest("bad"))
				plans.fail(errPlanStore)
				_, err = who.Policies(ctx, "gold")
				require.ErrorIs(t, err, errPlanStore)
				require.ErrorIs(t, err, ErrPolicy)
				plans.fail(nil)
			}
		})
	}
}

// TestHooksSeeTheKeysPolicy: a limiter built WithHooks reports each call
// with the policy in force for its key.
func TestHooksSeeTheKeysPolicy(t *testing.T) {
	for _, sub := range policyFuncSubjects {
		t.Run(sub.name, func(t *testing.T) {
			plans := newPlanMap()
			hooks := &recordingHooks{}
			l, _ := sub.newLimiter(t, ownPolicy, plans.f, WithHooks(hooks))
			c := policyFuncCalls{t, l}
			small := Policy{Limit: 4, Window: 4 * time.Second}
			plans.set("k", small)

			res := c.allow("k", 1)
			require.Equal(t, 1, decided(hooks), "one decision per call")
			d := hooks.last()
			assert.Equal(t, NamedPolicy{Name: "default", Policy: small}, d.Policy)
			assert.Equal(t, []NamedPolicy{d.Policy}, d.Policies)
			assert.Equal(t, KeyDigest("k"), d.Key)
			assert.Equal(t, res, d.Result)

			c.allow("other", 1)
			require.Equal(t, 2, decided(hooks))
			assert.Equal(t, ownPolicy, hooks.last().Policy.Policy, "the limiter's own for the zero Policy")

			plans.set("k", perMinute(10))
			c.allow("k", 1)
			require.Equal(t, 3, decided(hooks))
			assert.Equal(t, perMinute(10), hooks.last().Policy.Policy, "the policy in force for the call")

			_, err := l.Allow(context.Background(), "k", 11)
			require.ErrorIs(t, err, ErrCostExceedsLimit)
			require.Equal(t, 4, decided(hooks))
			d = hooks.last()
			assert.Equal(t, perMinute(10), d.Policy.Policy)
			assert.ErrorIs(t, d.Err, ErrCostExceedsLimit)

			// 3 per second: a token bucket's or GCRA's interval rounds, to
			// 333.333333 ms in process and to 333.333 ms on Redis (whole
			// µs), as the Result shows; the policy is reported as the
			// PolicyFunc gave it, on every limiter, not rebuilt from the
			// rounded interval.
			thirds := Policy{Limit: 3, Window: time.Second}
			plans.set("r", thirds)
			res = c.allow("r", 1)
			switch {
			case sub.window:
				assert.Equal(t, ok(3, 2, time.Second), res)
			case sub.redis:
				assert.Equal(t, ok(3, 2, 333_333*time.Microsecond), res)
			default:
				assert.Equal(t, ok(3, 2, 333_333_333*time.Nanosecond), res)
			}
			require.Equal(t, 5, decided(hooks))
			d = hooks.last()
			assert.Equal(t, thirds, d.Policy.Policy, "not the rounded 3 × the interval")
			assert.Equal(t, res, d.Result)
		})
	}
}

// decided returns how many decisions h has recorded.
func decided(h *recordingHooks) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// manyPolicies is the PolicyFunc of the memory tests: key "k<i>" gets a
// policy of its own, 1+i%10 units with one every i+1 ms (a window of i+1
// ms for a fixed window), and, in phase 1, twice the interval and 3 more
// units.
func manyPolicies(window bool, phase *atomic.Int32) PolicyFunc {
	return func(_ context.Context, key string) (Policy, error) {
		i, err := strconv.Atoi(key[1:])
		if err != nil {
			return Policy{}, err
		}
		limit, interval := 1+i%10, time.Duration(i+1)*time.Millisecond
		if phase.Load() == 1 {
			limit, interval = limit+3, 2*interval
		}
		if window {
			return Policy{Limit: limit, Window: interval}, nil
		}
		return Policy{Limit: limit, Window: time.Duration(limit) * interval}, nil
	}
}

// TestManyPoliciesHoldNoStateOnceEveryKeyIsFull: 20,000 keys (100,000
// under -soak), each with a policy of its own, are held while they are not
// full, and not at all once time has passed every one's fill time (or
// window): nothing is kept per policy.
func TestManyPoliciesHoldNoStateOnceEveryKeyIsFull(t *testing.T) {
	t.Parallel()
	keys := sized(20_000, 100_000)
	ctx := context.Background()
	longest := time.Duration(13*2*keys) * time.Millisecond // phase 1's longest fill time
	for _, tc := range []struct {
		name   string
		window bool
		build  func(clock Clock, f PolicyFunc) (Limiter, func() int, error)
	}{
		{"TokenBucket", false, func(clock Clock, f PolicyFunc) (Limiter, func() int, error) {
			l, err := NewTokenBucket(PerSecond(3), 3, WithClock(clock), WithPolicyFunc(f))
			if err != nil {
				return nil, nil, err
			}
			return l, l.policyFunc.tats.len, nil
		}},
		{"GCRA", false, func(clock Clock, f PolicyFunc) (Limiter, func() int, error) {
			l, err := NewGCRA(3, time.Second, WithClock(clock), WithPolicyFunc(f))
			if err != nil {
				return nil, nil, err
			}
			return l, l.policyFunc.tats.len, nil
		}},
		{"FixedWindow", true, func(clock Clock, f PolicyFunc) (Limiter, func() int, error) {
			l, err := NewFixedWindow(3, time.Second, WithClock(clock), WithPolicyFunc(f))
			if err != nil {
				return nil, nil, err
			}
			return l, l.windows.len, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := ratelimittest.NewClock(epoch)
			var phase atomic.Int32
			l, held, err := tc.build(clock, manyPolicies(tc.window, &phase))
			require.NoError(t, err)
			for i := range keys {
				res, err := l.Allow(ctx, "k"+strconv.Itoa(i), 1)
				require.NoError(t, err)
				require.True(t, res.Allowed)
			}
			assert.Equal(t, keys, held(), "every key is held while not full")

			// Every key's policy changes: its next call converts it. A
			// millisecond on, k0 is full; every other key ki still owes i
			// ms of its 1 unit, which a token bucket or GCRA converts to
			// 2i ms at twice the interval, and a window keeps until its
			// end. Either way the key has 1 unit used of its phase-1 limit.
			phase.Store(1)
			clock.Advance(time.Millisecond)
			for i := range keys {
				res, err := l.Allow(ctx, "k"+strconv.Itoa(i), 0)
				require.NoError(t, err)
				limit, owed := 1+i%10+3, time.Duration(i)*time.Millisecond
				want := ok(limit, limit-1, owed)
				switch {
				case i == 0:
					want = ok(limit, limit, 0)
				case !tc.window:
					want.ResetAfter = 2 * owed
				}
				if !assert.Equal(t, want, res, "k%d under its phase-1 policy", i) {
					return
				}
			}

			clock.Advance(longest + time.Second)
			// A peek on a handful of keys touches every shard, which then
			// drops what has refilled.
			for i := range 1000 {
				_, err := l.Allow(ctx, "k"+strconv.Itoa(i), 0)
				require.NoError(t, err)
			}
			assert.Equal(t, 0, held(), "nothing held once every key is full")
		})
	}
}

// TestManyPoliciesOnRedisWriteOnlyKeysWithATTL: on Redis, every key a
// limiter with a policy per key writes has a TTL, whatever the call (Allow,
// a denial or peek after a policy change, Settle into debt, Refund), so
// that every key goes once full.
func TestManyPoliciesOnRedisWriteOnlyKeysWithATTL(t *testing.T) {
	t.Parallel()
	// Every pair of a policy (i%10) and a call (i%4) six times; 30 times
	// under -soak.
	keys := sized(120, 600)
	ctx := context.Background()
	for _, sub := range []struct {
		name   string
		window bool
		build  func(client *redis.Client, f PolicyFunc) (Adjuster, error)
	}{
		{"RedisTokenBucket", false, func(client *redis.Client, f PolicyFunc) (Adjuster, error) {
			return NewRedisTokenBucket(client, PerSecond(3), 3, WithPolicyFunc(f))
		}},
		{"RedisGCRA", false, func(client *redis.Client, f PolicyFunc) (Adjuster, error) {
			return NewRedisGCRA(client, 3, time.Second, WithPolicyFunc(f))
		}},
		{"RedisFixedWindow", true, func(client *redis.Client, f PolicyFunc) (Adjuster, error) {
			return NewRedisFixedWindow(client, 3, time.Second, WithPolicyFunc(f))
		}},
	} {
		t.Run(sub.name, func(t *testing.T) {
			t.Parallel()
			m, client, advance := miniredisClock(t)
			var phase atomic.Int32
			l, err := sub.build(client, manyPolicies(sub.window, &phase))
			require.NoError(t, err)
			key := func(i int) string { return "k" + strconv.Itoa(i) }
			for i := range keys {
				_, err := l.Allow(ctx, key(i), 1+i%10)
				require.NoError(t, err)
			}
			phase.Store(1)
			advance(time.Millisecond)
			for i := range keys {
				var err error
				switch i % 4 {
				case 0:
					_, err = l.Allow(ctx, key(i), 0)
				case 1:
					_, err = l.Allow(ctx, key(i), 1+i%10+3)
				case 2:
					_, err = l.Settle(ctx, key(i), 1, 20)
				default:
					_, err = l.Refund(ctx, key(i), 1)
				}
				require.NoError(t, err)
			}
			stored := m.Keys()
			assert.NotEmpty(t, stored)
			for _, k := range stored {
				ttl, err := client.PTTL(ctx, k).Result()
				require.NoError(t, err)
				if !assert.Positive(t, ttl, "key %q has a TTL", k) {
					return
				}
			}
			advance(time.Duration(13*2*keys+20*2*keys)*time.Millisecond + time.Second)
			assert.Empty(t, m.Keys(), "every key expired once full")
			for i := range keys {
				res, err := l.Allow(ctx, key(i), 0)
				require.NoError(t, err)
				require.Equal(t, res.Limit, res.Remaining, "key %d is full", i)
			}
		})
	}
}

// policyFuncName formats a policy for messages.
func policyFuncName(p Policy) string {
	if p == (Policy{}) {
		return "own"
	}
	return fmt.Sprintf("%d/%v", p.Limit, p.Window)
}

// TestSlidingCountersAcrossAChangeOfWindowDecideAlike changes the policy a
// PolicyFunc gives every key, its window among it, at random times of one
// schedule: the in-process and Redis counters decide alike (the in-process
// RetryAfter rounded up to a whole µs), each key counting apart in each
// window, and keeping its state in a window it comes back to until that
// state's expiry.
func TestSlidingCountersAcrossAChangeOfWindowDecideAlike(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 9))
	ctx := context.Background()
	for round := 0; round < sized(3, 30); round++ {
		policy := Policy{Limit: 5, Window: time.Second}
		byKey := PolicyFunc(func(context.Context, string) (Policy, error) { return policy, nil })
		clock := ratelimittest.NewClock(epoch)
		local, err := NewSlidingCounter(3, time.Hour, WithClock(clock), WithPolicyFunc(byKey))
		require.NoError(t, err)
		_, client, advance := miniredisClock(t)
		remote, err := NewRedisSlidingCounter(client, 3, time.Hour, WithPolicyFunc(byKey))
		require.NoError(t, err)
		for i, c := range randomSchedule(r, 300, 5, 200*time.Millisecond, false, "a", "b") {
			if r.IntN(10) == 0 {
				policy = Policy{Limit: 1 + r.IntN(8), Window: time.Duration(1+r.IntN(3000)) * time.Millisecond}
			}
			c.advance = c.advance.Truncate(time.Microsecond)
			clock.Advance(c.advance)
			advance(c.advance)
			n := min(c.n, policy.Limit)
			want, err := local.Allow(ctx, c.key, n)
			require.NoError(t, err)
			got, err := remote.Allow(ctx, c.key, n)
			require.NoError(t, err)
			want.RetryAfter = (want.RetryAfter + time.Microsecond - 1).Truncate(time.Microsecond)
			require.Equal(t, want, got, "round %d step %d: %+v under %+v", round, i, c, policy)
		}
	}
}

// TestSlidingCounterCountsApartInEachWindow: a key's counts are of windows
// of one length, so a key whose policy gives it another window counts
// apart in it, and finds its counts of a window it comes back to, until
// they expire; in process and on Redis alike.
func TestSlidingCounterCountsApartInEachWindow(t *testing.T) {
	ctx := context.Background()
	policy := Policy{Limit: 4, Window: 10 * time.Second}
	byKey := PolicyFunc(func(context.Context, string) (Policy, error) { return policy, nil })
	for _, x := range counterAdjusters(t, 3, time.Hour, WithPolicyFunc(byKey)) {
		t.Run(x.name, func(t *testing.T) {
			policy = Policy{Limit: 4, Window: 10 * time.Second}
			_, err := x.a.Allow(ctx, "k", 4)
			require.NoError(t, err)
			x.advance(5 * time.Second)
			policy.Window = 20 * time.Second
			res, err := x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 4, 0), res, "in windows of 20 s the key has counted nothing")
			_, err = x.a.Allow(ctx, "k", 1)
			require.NoError(t, err)
			policy.Window = 10 * time.Second
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 0, 15*time.Second), res, "back in windows of 10 s: its 4, until 2 windows after they opened")
			x.advance(15 * time.Second)
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 4, 0), res, "two windows of 10 s have passed: it holds nothing in them")
			policy.Window = 20 * time.Second
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 3, 25*time.Second), res, "its unit in windows of 20 s, counted 15 s ago, weighs until 40 s after")
			require.NoError(t, x.a.Reset(ctx, "k"))
			res, err = x.a.Allow(ctx, "k", 0)
			require.NoError(t, err)
			assert.Equal(t, ok(4, 4, 0), res, "a Reset forgets the key in the window of its policy now")
		})
	}
}
