package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// keyedPart is one part of a Composite of the tests of per-key policies:
// its name, whether it counts calls, how it derives its key, its
// constructor's policy, the policies its keys may be given, and whether it
// is a fixed window.
type keyedPart struct {
	name     string
	perCall  bool
	key      func(string) string
	own      Policy
	policies []Policy // nil: a part of one policy, built without a PolicyFunc
	window   bool
	gcra     bool // a GCRA rather than a token bucket
}

func tenantOf(key string) string { return "tenant-" + key[:1] }

// keyedSetup is a Composite of keyedParts and what drives it: each part's
// policy table.
type keyedSetup struct {
	parts  []keyedPart
	plans  []*planMap
	prefix string // on Redis, each part's keys are under prefix + its name, when set
}

func newKeyedSetup(parts ...keyedPart) *keyedSetup {
	s := &keyedSetup{parts: parts}
	for range parts {
		s.plans = append(s.plans, newPlanMap())
	}
	return s
}

// partKey returns part i's key for the call's key.
func (s *keyedSetup) partKey(i int, key string) string {
	if s.parts[i].key == nil {
		return key
	}
	return s.parts[i].key(key)
}

// build returns the Composite of s's parts, each built by local (in
// process, opts carrying the clock) or on client.
func (s *keyedSetup) build(t *testing.T, client *redis.Client, opts ...Option) *Composite {
	t.Helper()
	var parts []Part
	for i, p := range s.parts {
		o := append([]Option(nil), opts...)
		if p.policies != nil {
			o = append(o, WithPolicyFunc(s.plans[i].f))
		}
		ro := redisOpts(o)
		if s.prefix != "" {
			ro = append(ro, WithKeyPrefix(s.prefix+p.name+":"))
		}
		var l Limiter
		var err error
		switch {
		case client == nil && p.window:
			l, err = NewFixedWindow(p.own.Limit, p.own.Window, o...)
		case client == nil && p.gcra:
			l, err = NewGCRA(p.own.Limit, p.own.Window, o...)
		case client == nil:
			l, err = NewTokenBucket(rateOf(p.own), p.own.Limit, o...)
		case p.window:
			l, err = NewRedisFixedWindow(client, p.own.Limit, p.own.Window, ro...)
		case p.gcra:
			l, err = NewRedisGCRA(client, p.own.Limit, p.own.Window, ro...)
		default:
			l, err = NewRedisTokenBucket(client, rateOf(p.own), p.own.Limit, ro...)
		}
		require.NoError(t, err, p.name)
		parts = append(parts, Part{Name: p.name, Limiter: l, Key: p.key, PerCall: p.perCall})
	}
	c, err := NewComposite(parts...)
	require.NoError(t, err)
	return c
}

// policies returns the parts' policies for key, as a Decision names them.
func (s *keyedSetup) policies(key string) []NamedPolicy {
	out := make([]NamedPolicy, len(s.parts))
	for i, p := range s.parts {
		pol := s.plans[i].get(s.partKey(i, key))
		if pol == (Policy{}) {
			pol = p.own
		}
		out[i] = NamedPolicy{Name: p.name, Policy: pol, PerCall: p.perCall}
	}
	return out
}

// change gives one part's key a random policy of its own.
func (s *keyedSetup) change(r *rand.Rand, key string) string {
	var keyed []int
	for i, p := range s.parts {
		if p.policies != nil {
			keyed = append(keyed, i)
		}
	}
	i := keyed[r.IntN(len(keyed))]
	p := s.parts[i].policies[r.IntN(len(s.parts[i].policies))]
	s.plans[i].set(s.partKey(i, key), p)
	return fmt.Sprintf("%s[%s]=%s; ", s.parts[i].name, s.partKey(i, key), policyFuncName(p))
}

// keyedModel is the reference of a Composite of keyed parts: one
// policyFuncModel per part, all or nothing. A part that would have allowed
// a denied call is read as a peek (which writes the conversion its
// policy's change makes, and nothing else), and reports that peek's
// Result, not allowed.
type keyedModel struct {
	setup *keyedSetup
	parts []*policyFuncModel
}

func newKeyedModel(s *keyedSetup) *keyedModel {
	m := &keyedModel{setup: s}
	for _, p := range s.parts {
		m.parts = append(m.parts, newPolicyFuncModel(p.own, p.window, DefaultMaxDebt))
	}
	return m
}

func (m *keyedModel) at(now int64) {
	for _, p := range m.parts {
		p.now = now
	}
}

// take decides cost on part i's key k under its key's policy.
func (m *keyedModel) take(i int, k string, cost int64) Result {
	p := m.parts[i]
	limit, param := p.policy(m.setup.plans[i].get(k))
	if p.window {
		return p.windowAllow(k, cost, limit, param)
	}
	return p.bucketAllow(k, cost, limit, param)
}

// allow decides n for key at now: each part's Result, or the error of a
// cost above the smallest limit of the parts that count units.
func (m *keyedModel) allow(key string, n int, now int64) ([]Result, error) {
	m.at(now)
	policies := m.setup.policies(key)
	for _, p := range policies {
		if !p.PerCall && n > p.Limit {
			return nil, ErrCostExceedsLimit
		}
	}
	results := make([]Result, len(m.parts))
	type saved struct {
		tat          policyFuncModelTat
		win          policyFuncModelWindow
		tatOK, winOK bool
	}
	saves := make([]saved, len(m.parts))
	all := true
	for i, p := range m.parts {
		k := m.setup.partKey(i, key)
		var sv saved
		sv.tat, sv.tatOK = p.tats[k]
		sv.win, sv.winOK = p.windows[k]
		saves[i] = sv
		cost := int64(n)
		if m.setup.parts[i].perCall {
			cost = min(cost, 1)
		}
		results[i] = m.take(i, k, cost)
		all = all && results[i].Allowed
	}
	if all {
		return results, nil
	}
	for i, p := range m.parts {
		if !results[i].Allowed {
			continue
		}
		k := m.setup.partKey(i, key)
		delete(p.tats, k)
		delete(p.windows, k)
		if saves[i].tatOK {
			p.tats[k] = saves[i].tat
		}
		if saves[i].winOK {
			p.windows[k] = saves[i].win
		}
		results[i] = m.take(i, k, 0)
		results[i].Allowed = false
	}
	return results, nil
}

// settle settles taken by cost for key at now: each part's Result; or
// ErrInvalidCost, changing nothing, when cost is above DefaultMaxSettle
// limits of a part that counts units, by its key's plan.
func (m *keyedModel) settle(o op, now int64) ([]Result, error) {
	m.at(now)
	taken, cost := o.taken, o.cost
	if o.kind == "refund" {
		taken, cost = o.n, 0
	}
	for i, p := range m.parts {
		limit, _ := p.policy(m.setup.plans[i].get(m.setup.partKey(i, o.key)))
		if !m.setup.parts[i].perCall && cost > taken && int64(cost) > DefaultMaxSettle*limit {
			return nil, ErrInvalidCost
		}
	}
	results := make([]Result, len(m.parts))
	for i, p := range m.parts {
		k := m.setup.partKey(i, o.key)
		d := int64(cost - taken)
		if m.setup.parts[i].perCall {
			d = int64(min(cost, 1) - min(taken, 1))
		}
		limit, param := p.policy(m.setup.plans[i].get(k))
		if p.window {
			po := o
			po.key = k
			results[i] = p.windowSettle(po, d, limit, param)
		} else {
			results[i] = p.bucketSettle(k, d, limit, param)
		}
	}
	return results, nil
}

func (m *keyedModel) reset(key string) {
	for i, p := range m.parts {
		k := m.setup.partKey(i, key)
		delete(p.tats, k)
		delete(p.windows, k)
	}
}

// keyedShapes are the Composites of the tests: requests per minute
// (counting calls, on the tenant) beside tokens per minute (on the key),
// both keyed, with now and then a keyed window on the tenant and a part
// of one policy.
func keyedShapes(rates, windows []Policy, rpmOwn, tpmOwn, winOwn, plainOwn Policy) [][]keyedPart {
	rpm := keyedPart{name: "rpm", perCall: true, key: tenantOf, own: rpmOwn, policies: rates, gcra: true}
	tpm := keyedPart{name: "tpm", own: tpmOwn, policies: rates}
	win := keyedPart{name: "daily", key: tenantOf, own: winOwn, policies: windows, window: true}
	plain := keyedPart{name: "plain", own: plainOwn, gcra: true}
	return [][]keyedPart{
		{rpm, tpm},
		{tpm, win},
		{rpm, tpm, win},
		{plain, rpm, tpm, win},
	}
}

// checkDecision requires d, a Composite's Decision, to hold parts, and
// its policies to be want.
func checkDecision(t *testing.T, want []NamedPolicy, parts []Result, d Decision, msg string) {
	t.Helper()
	require.Equal(t, parts, d.Parts, msg)
	require.Equal(t, want, d.Policies, msg)
	require.Equal(t, d.Policies[d.PolicyIndex], d.Policy, msg)
	require.Equal(t, d.Parts[d.PolicyIndex].Limit, d.Limit, msg)
	requireCombined(t, parts, d.Result, msg)
}

// TestCompositeOfKeyedPartsMatchesTheModelAsPlansChange runs random streams
// of Decide, Refund, Settle and Reset, with plans changing on the parts'
// keys, on in-process Composites whose parts are built WithPolicyFunc, and
// requires every part's Result, every Decision's policies and every error
// to be the model's.
func TestCompositeOfKeyedPartsMatchesTheModelAsPlansChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(41, 42))
	shapes := keyedShapes(modelRatePolicies, modelWindowPolicies,
		Policy{Limit: 12, Window: 3600 * ms}, Policy{Limit: 5, Window: 5 * time.Second},
		Policy{Limit: 5, Window: time.Second}, Policy{Limit: 11, Window: 11 * 777 * time.Microsecond})
	stream := opStream{mix: policyFuncMix, step: modelStep, takenAt: true}
	for s, shape := range shapes {
		t.Run(fmt.Sprint(len(shape), "parts"), func(t *testing.T) {
			for round := range sized(6, 30) {
				setup := newKeyedSetup(shape...)
				clock := ratelimittest.NewClock(epoch)
				c := setup.build(t, nil, WithClock(clock))
				model := newKeyedModel(setup)
				var now int64
				history := ""
				for i, o := range stream.ops(r, 300, "a1", "a2", "b1") {
					clock.Advance(o.advance)
					now += int64(o.advance)
					step := fmt.Sprintf("t=%v ", time.Duration(now))
					if r.IntN(4) == 0 {
						step += setup.change(r, o.key)
					}
					step += o.String()
					history += "\n  " + step
					msg := fmt.Sprintf("shape %d round %d step %d: %s; history:%s", s, round, i, step, history)
					switch o.kind {
					case "allow":
						want, wantErr := model.allow(o.key, o.n, now)
						d, err := c.Decide(ctx, o.key, o.n)
						if wantErr != nil {
							require.ErrorIs(t, err, wantErr, msg)
							continue
						}
						require.NoError(t, err, msg)
						checkDecision(t, setup.policies(o.key), want, d, msg)
					case "refund", "settle":
						want, wantErr := model.settle(o, now)
						got, err := o.apply(ctx, c)
						if wantErr != nil {
							require.ErrorIs(t, err, wantErr, msg)
						} else {
							require.NoError(t, err, msg)
							requireCombined(t, want, got, msg)
						}
						// Every part's state after, by a peek.
						peek, _ := model.allow(o.key, 0, now)
						d, err := c.Decide(ctx, o.key, 0)
						require.NoError(t, err, msg)
						checkDecision(t, setup.policies(o.key), peek, d, msg)
					default:
						model.reset(o.key)
						require.NoError(t, c.Reset(ctx, o.key), msg)
					}
					policies, err := c.Policies(ctx, o.key)
					require.NoError(t, err, msg)
					require.Equal(t, setup.policies(o.key), policies, msg)
				}
			}
		})
	}
}

// diffCompositeShapes are keyedShapes on the differential streams' exact
// policies (see diffConvert).
var diffCompositeShapes = keyedShapes(diffConvert.policies, diffWindow.policies,
	Policy{Limit: 5, Window: 500 * ms}, diffConvertOwn, diffWindowOwn, Policy{Limit: 6, Window: 4800 * ms})

// TestCompositeOfKeyedPartsOnMiniredisDecidesAsInProcess runs the same
// random streams, plan changes included, on an in-process Composite of
// keyed parts and on its Redis equivalent over miniredis, time moving
// alike, and requires every Decision, Result and error to be the same.
func TestCompositeOfKeyedPartsOnMiniredisDecidesAsInProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(43, 44))
	for s, shape := range diffCompositeShapes {
		t.Run(fmt.Sprint(len(shape), "parts"), func(t *testing.T) {
			for round := range sized(1, 8) {
				setup := newKeyedSetup(shape...)
				clock := ratelimittest.NewClock(epoch)
				local := setup.build(t, nil, WithClock(clock))
				_, client, advance := miniredisClock(t)
				remote := setup.build(t, client)
				for i, o := range diffConvert.ops(r, sized(150, 300), "a1", "a2", "b1") {
					clock.Advance(o.advance)
					advance(o.advance)
					step := ""
					if r.IntN(4) == 0 {
						step = setup.change(r, o.key)
					}
					msg := fmt.Sprintf("shape %d round %d step %d: %s%v", s, round, i, step, o)
					if o.kind == "allow" {
						want, wantErr := local.Decide(ctx, o.key, o.n)
						got, err := remote.Decide(ctx, o.key, o.n)
						requireSameError(t, wantErr, err, msg)
						require.Equal(t, want, got, msg)
						continue
					}
					want, wantErr := o.apply(ctx, local)
					got, err := o.apply(ctx, remote)
					requireSameError(t, wantErr, err, msg)
					require.Equal(t, want, got, msg)
				}
			}
		})
	}
}

// TestRealRedisCompositeOfKeyedPartsDecidesAsInProcess runs such streams on
// a real redis-server, whose time the test cannot move: with intervals of
// 20 s and more and windows of minutes, no unit comes back during the
// test, so every part's Allowed, Remaining and Limit, and the Decision's
// policies, must be those of the in-process Composite, whose time stands
// still.
func TestRealRedisCompositeOfKeyedPartsDecidesAsInProcess(t *testing.T) {
	t.Parallel()
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	slow := []Policy{{}, {Limit: 3, Window: time.Minute}, {Limit: 6, Window: 240 * time.Second}, {Limit: 2, Window: 160 * time.Second}, {Limit: 10, Window: 400 * time.Second}}
	slowWindows := []Policy{{}, {Limit: 5, Window: 20 * time.Minute}, {Limit: 2, Window: 10 * time.Minute}, {Limit: 10, Window: time.Hour}}
	shapes := keyedShapes(slow, slowWindows, Policy{Limit: 5, Window: 100 * time.Second}, Policy{Limit: 4, Window: 160 * time.Second},
		Policy{Limit: 4, Window: 10 * time.Minute}, Policy{Limit: 8, Window: 320 * time.Second})
	stream := opStream{mix: policyFuncMix}
	r := rand.New(rand.NewPCG(45, 46))
	for s, shape := range shapes {
		for round := range 3 {
			setup := newKeyedSetup(shape...)
			local := setup.build(t, nil, WithClock(ratelimittest.NewClock(epoch)))
			setup.prefix = fmt.Sprintf("real-keyed-%d-%d-", s, round)
			remote := setup.build(t, client)
			for i, o := range stream.ops(r, 150, "a1", "a2", "b1") {
				step := ""
				if r.IntN(4) == 0 {
					step = setup.change(r, o.key)
				}
				msg := fmt.Sprintf("shape %d round %d step %d: %s%v", s, round, i, step, o)
				if o.kind != "allow" {
					want, wantErr := o.apply(ctx, local)
					got, err := o.apply(ctx, remote)
					requireSameError(t, wantErr, err, msg)
					assert.Equal(t, want.Remaining, got.Remaining, msg)
					assert.Equal(t, want.Limit, got.Limit, msg)
					continue
				}
				want, wantErr := local.Decide(ctx, o.key, o.n)
				got, err := remote.Decide(ctx, o.key, o.n)
				requireSameError(t, wantErr, err, msg)
				assert.Equal(t, want.Policies, got.Policies, msg)
				assert.Equal(t, want.PolicyIndex, got.PolicyIndex, msg)
				assert.Equal(t, want.Allowed, got.Allowed, msg)
				require.Equal(t, len(want.Parts), len(got.Parts), msg)
				for j := range want.Parts {
					assert.Equal(t, want.Parts[j].Allowed, got.Parts[j].Allowed, msg)
					assert.Equal(t, want.Parts[j].Remaining, got.Parts[j].Remaining, msg)
					assert.Equal(t, want.Parts[j].Limit, got.Parts[j].Limit, msg)
				}
			}
		}
	}
}

// keyedSubjects returns an in-process and a miniredis Composite of
// requests and tokens per minute, both keyed, and the setup behind them.
func keyedSubjects(t *testing.T) (*keyedSetup, map[string]*Composite) {
	setup := newKeyedSetup(diffCompositeShapes[0]...)
	_, client, _ := miniredisClock(t)
	return setup, map[string]*Composite{
		"in process": setup.build(t, nil, WithClock(ratelimittest.NewClock(epoch))),
		"miniredis":  setup.build(t, client),
	}
}

// TestCompositeOfKeyedPartsFailsWholeOnAPolicyError: a part's PolicyFunc
// error, or a policy its limiter refuses, fails Allow, Decide, Settle and
// Policies with the error class a keyed limiter uses, naming the part and
// its key, and changes no part.
func TestCompositeOfKeyedPartsFailsWholeOnAPolicyError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup, subjects := keyedSubjects(t)
	for name, c := range subjects {
		_, err := c.Allow(ctx, "a1", 1)
		require.NoError(t, err, name)
		before, err := c.Decide(ctx, "a1", 0)
		require.NoError(t, err, name)

		setup.plans[1].fail(errors.New("plans unreachable"))
		_, err = c.Allow(ctx, "a1", 1)
		require.ErrorIs(t, err, ErrPolicy, name)
		assert.Contains(t, err.Error(), `"tpm"`, name)
		assert.Contains(t, err.Error(), KeyDigest("a1"), name)
		_, err = c.Decide(ctx, "a1", 1)
		require.ErrorIs(t, err, ErrPolicy, name)
		_, err = c.Settle(ctx, "a1", 1, 3)
		require.ErrorIs(t, err, ErrPolicy, name)
		_, err = c.Refund(ctx, "a1", 1)
		require.ErrorIs(t, err, ErrPolicy, name)
		_, err = c.Policies(ctx, "a1")
		require.ErrorIs(t, err, ErrPolicy, name)
		setup.plans[1].fail(nil)

		setup.plans[0].set("tenant-a", Policy{Limit: -1, Window: time.Minute})
		_, err = c.Allow(ctx, "a1", 1)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), `"rpm"`, name)
		assert.Contains(t, err.Error(), KeyDigest("tenant-a"), name)
		_, err = c.Settle(ctx, "a1", 1, 0)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		setup.plans[0].set("tenant-a", Policy{})

		after, err := c.Decide(ctx, "a1", 0)
		require.NoError(t, err, name)
		assert.Equal(t, before.Parts, after.Parts, name)
	}
}

// TestCompositeOfKeyedPartsAppliesARaisedPlanAtOnce: a key that used its
// whole plan is allowed again as soon as its plan is raised, keeping what
// it used, and Settle and Refund apply at the key's plan; the Decision
// names the plan that bound it.
func TestCompositeOfKeyedPartsAppliesARaisedPlanAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup, subjects := keyedSubjects(t)
	for name, c := range subjects {
		key := "b-" + name
		// tpm is 4 per 800 ms by default; rpm 5 per 500 ms.
		d, err := c.Decide(ctx, key, 4)
		require.NoError(t, err, name)
		assert.True(t, d.Allowed, name)
		d, err = c.Decide(ctx, key, 1)
		require.NoError(t, err, name)
		assert.False(t, d.Allowed, name)
		assert.Equal(t, "tpm", d.Policy.Name, name)
		assert.Equal(t, diffConvertOwn, d.Policy.Policy, name)

		setup.plans[1].set(key, Policy{Limit: 10, Window: 4 * time.Second}) // same interval, 10 units
		d, err = c.Decide(ctx, key, 5)
		require.NoError(t, err, name)
		assert.True(t, d.Allowed, name)
		assert.Equal(t, 10, d.Parts[1].Limit, name)
		assert.Equal(t, 1, d.Parts[1].Remaining, name)
		assert.Equal(t, Policy{Limit: 10, Window: 4 * time.Second}, d.Policies[1].Policy, name)

		// A Settle of a call that took 5 and cost 2 gives 3 back; a
		// Refund of 4 more leaves the key with 8 of 10.
		res, err := c.Settle(ctx, key, 5, 2)
		require.NoError(t, err, name)
		assert.Equal(t, 4, res.Remaining, name) // tpm binds: 4 of 10 left, against rpm's 3 of 5
		d, err = c.Decide(ctx, key, 0)
		require.NoError(t, err, name)
		assert.Equal(t, 4, d.Parts[1].Remaining, name)
		_, err = c.Refund(ctx, key, 4)
		require.NoError(t, err, name)
		d, err = c.Decide(ctx, key, 0)
		require.NoError(t, err, name)
		assert.Equal(t, 8, d.Parts[1].Remaining, name)

		// Lowered to 2: the key is in debt and denied; the Decision
		// names tpm's new plan.
		setup.plans[1].set(key, Policy{Limit: 2, Window: 1600 * ms})
		d, err = c.Decide(ctx, key, 1)
		require.NoError(t, err, name)
		assert.False(t, d.Allowed, name)
		assert.Equal(t, NamedPolicy{Name: "tpm", Policy: Policy{Limit: 2, Window: 1600 * ms}}, d.Policy, name)
		_, err = c.Allow(ctx, key, 3)
		require.ErrorIs(t, err, ErrCostExceedsLimit, name)

		require.NoError(t, c.Reset(ctx, key), name)
		d, err = c.Decide(ctx, key, 2)
		require.NoError(t, err, name)
		assert.True(t, d.Allowed, name)
	}
}

// TestCompositeOfKeyedPartsNeverAllowsMoreThanThePlansWhileTheyChange:
// goroutines take from one key while its plan switches between 10 and 20
// units an hour; with the clock standing still, a key keeps what it used
// across every change, so no more than 20 units are ever allowed.
func TestCompositeOfKeyedPartsNeverAllowsMoreThanThePlansWhileTheyChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	plans := newPlanMap()
	clock := ratelimittest.NewClock(epoch)
	tokens, err := NewTokenBucket(PerHour(10), 10, WithClock(clock), WithPolicyFunc(plans.f))
	require.NoError(t, err)
	requests, err := NewGCRA(1000, time.Hour, WithClock(clock), WithPolicyFunc(plans.f))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "requests", Limiter: requests, PerCall: true}, Part{Name: "tokens", Limiter: tokens})
	require.NoError(t, err)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if g == 0 && i%10 == 0 {
					plans.set("k", Policy{Limit: 10 + 10*(i/10%2), Window: time.Hour * time.Duration(1+i/10%2)})
				}
				res, err := c.Allow(ctx, "k", 1+i%2)
				if err == nil && res.Allowed {
					allowed.Add(int64(1 + i%2))
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, allowed.Load(), int64(20))
	assert.GreaterOrEqual(t, allowed.Load(), int64(10))
}

// TestCompositeOfKeyedPartsDeniedStillConvertsOnRedis: a request denied
// right after a part's plan changed writes that part's conversion, on Redis
// as in process, so that time then pays off what the key owes at the new
// rate, not the old one.
func TestCompositeOfKeyedPartsDeniedStillConvertsOnRedis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := newKeyedSetup(diffCompositeShapes[0]...)
	clock := ratelimittest.NewClock(epoch)
	local := setup.build(t, nil, WithClock(clock))
	_, client, advance := miniredisClock(t)
	remote := setup.build(t, client)
	const key = "b1"
	setup.plans[1].set(key, Policy{Limit: 10, Window: 4 * time.Second}) // 400 ms a unit
	for name, c := range map[string]*Composite{"in process": local, "miniredis": remote} {
		d, err := c.Decide(ctx, key, 5)
		require.NoError(t, err, name)
		require.True(t, d.Allowed, name)
	}
	// 5 owed become 1 s at 200 ms a unit: 2 in debt on a limit of 3.
	setup.plans[1].set(key, Policy{Limit: 3, Window: 600 * ms})
	for name, c := range map[string]*Composite{"in process": local, "miniredis": remote} {
		d, err := c.Decide(ctx, key, 2)
		require.NoError(t, err, name)
		assert.False(t, d.Allowed, name)
		assert.Equal(t, time.Second, d.Parts[1].ResetAfter, name)
	}
	clock.Advance(800 * ms)
	advance(800 * ms)
	want, err := local.Decide(ctx, key, 0)
	require.NoError(t, err)
	got, err := remote.Decide(ctx, key, 0)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 200 * ms}, want.Parts[1])
	assert.Equal(t, want, got)
}
