package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// policyFuncMix is the mix of the streams on limiters built
// WithPolicyFunc: costs up to 11, against limits of 1 to 12.
var policyFuncMix = opMix{allow: 12, refund: 5, taken: 5, cost: 13}

// policyFuncModel is the reference of the limiters built WithPolicyFunc: plain
// integer arithmetic on a map, written from WithPolicyFunc's contract and
// the package's semantics, sharing no code with the limiters. Time is in
// ns since the epoch and only moves forward.
//
// A token bucket or GCRA key is its tat (when it is full again) and the
// interval it was computed at. A call under another interval, while the
// key is not full, first converts the time the key owes to the new
// interval, rounded up, ceil((tat-now)·Tnew/Told): the new policy holds
// from that call on, whatever the call decides.
//
// A fixed window key is its end and its count, checked against the limit in
// force; a window opens with the length in force.
//
// A Settle takes a key at most debt limits of its policy in force into
// debt (see WithMaxDebt; below 0, without bound), and leaves one further
// in debt already where it is. A Settle whose cost is above settle limits
// of the policy in force is refused and changes nothing (see
// WithMaxSettle; below 0, without bound).
type policyFuncModel struct {
	own     Policy // the constructor's: the policy of the zero Policy
	window  bool
	debt    int64
	settle  int64
	now     int64
	tats    map[string]policyFuncModelTat
	windows map[string]policyFuncModelWindow
}

type policyFuncModelTat struct{ tat, interval int64 }

type policyFuncModelWindow struct{ end, count int64 }

func newPolicyFuncModel(own Policy, window bool, debt int) *policyFuncModel {
	return &policyFuncModel{own: own, window: window, debt: int64(debt), settle: DefaultMaxSettle, tats: map[string]policyFuncModelTat{}, windows: map[string]policyFuncModelWindow{}}
}

// policy returns the limit and the interval (a window's length for a fixed
// window) of p; every policy of these tests has a whole interval.
func (m *policyFuncModel) policy(p Policy) (limit, param int64) {
	if p == (Policy{}) {
		p = m.own
	}
	if m.window {
		return int64(p.Limit), int64(p.Window)
	}
	if int64(p.Window)%int64(p.Limit) != 0 {
		panic("model: interval not a whole number of ns: " + policyFuncName(p))
	}
	return int64(p.Limit), int64(p.Window) / int64(p.Limit)
}

// apply makes op's call on the model, under policy p.
func (m *policyFuncModel) apply(op op, p Policy) (Result, error) {
	m.now += int64(op.advance)
	limit, param := m.policy(p)
	switch op.kind {
	case "allow":
		if int64(op.n) > limit {
			return Result{Limit: int(limit)}, ErrCostExceedsLimit
		}
		if m.window {
			return m.windowAllow(op.key, int64(op.n), limit, param), nil
		}
		return m.bucketAllow(op.key, int64(op.n), limit, param), nil
	case "refund", "settle":
		taken, cost := op.taken, op.cost
		if op.kind == "refund" {
			taken, cost = op.n, 0
		}
		// Units may have been taken under a larger policy: only more
		// than any call takes is refused.
		if int64(taken) > maxSettleCost {
			return Result{Limit: int(limit)}, ErrCostExceedsLimit
		}
		if m.settle >= 0 && cost > taken && int64(cost) > m.settle*limit {
			return Result{Limit: int(limit)}, ErrInvalidCost
		}
		if m.window {
			return m.windowSettle(op, int64(cost-taken), limit, param), nil
		}
		return m.bucketSettle(op.key, int64(cost-taken), limit, param), nil
	default:
		delete(m.tats, op.key)
		delete(m.windows, op.key)
		return Result{}, nil
	}
}

// carry returns key's tat at interval: now when it is full, its tat when it
// was computed at interval, and otherwise now plus the time it owes
// converted to interval, rounded up.
func (m *policyFuncModel) carry(key string, interval int64) int64 {
	st, held := m.tats[key]
	if !held || st.tat <= m.now {
		return m.now
	}
	if st.interval == interval {
		return st.tat
	}
	owed := new(big.Int).Mul(big.NewInt(st.tat-m.now), big.NewInt(interval))
	q, rem := new(big.Int).QuoRem(owed, big.NewInt(st.interval), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return m.now + q.Int64()
}

// keep stores key's tat at interval, or forgets a full key.
func (m *policyFuncModel) keep(key string, tat, interval int64) {
	if tat <= m.now {
		delete(m.tats, key)
		return
	}
	m.tats[key] = policyFuncModelTat{tat: tat, interval: interval}
}

// bucketResult describes a key whose tat is tat: what is left of limit,
// none in debt, and the time until it is full.
func (m *policyFuncModel) bucketResult(allowed bool, tat, limit, interval int64) Result {
	ahead := tat - m.now
	return Result{
		Allowed:    allowed,
		Limit:      int(limit),
		Remaining:  int(max(limit*interval-ahead, 0) / interval),
		ResetAfter: time.Duration(ahead),
	}
}

func (m *policyFuncModel) bucketAllow(key string, n, limit, interval int64) Result {
	tat := m.carry(key, interval)
	next := tat + n*interval
	if n == 0 || next-m.now <= limit*interval {
		m.keep(key, next, interval)
		return m.bucketResult(true, next, limit, interval)
	}
	m.keep(key, tat, interval) // what a conversion gave, if any
	res := m.bucketResult(false, tat, limit, interval)
	res.RetryAfter = time.Duration(next - limit*interval - m.now)
	return res
}

func (m *policyFuncModel) bucketSettle(key string, d, limit, interval int64) Result {
	tat := max(m.carry(key, interval)+d*interval, m.now)
	if most := m.now + (1+m.debt)*limit*interval; d > 0 && m.debt >= 0 && tat > most {
		tat = max(m.carry(key, interval), most)
	}
	m.keep(key, tat, interval)
	return m.bucketResult(true, tat, limit, interval)
}

// open returns key's window open now, the zero policyFuncModelWindow if none is.
func (m *policyFuncModel) open(key string) policyFuncModelWindow {
	w := m.windows[key]
	if w.end <= m.now || w.count <= 0 {
		return policyFuncModelWindow{}
	}
	return w
}

func (m *policyFuncModel) windowResult(allowed bool, w policyFuncModelWindow, limit int64) Result {
	res := Result{Allowed: allowed, Limit: int(limit), Remaining: int(max(limit-w.count, 0))}
	if w.count > 0 {
		res.ResetAfter = time.Duration(w.end - m.now)
	}
	return res
}

func (m *policyFuncModel) windowAllow(key string, n, limit, length int64) Result {
	w := m.open(key)
	if n > 0 && w.count+n > limit {
		res := m.windowResult(false, w, limit)
		res.RetryAfter = res.ResetAfter
		return res
	}
	if n > 0 {
		if w.count == 0 {
			w.end = m.now + length
		}
		w.count += n
		m.windows[key] = w
	}
	return m.windowResult(true, w, limit)
}

func (m *policyFuncModel) windowSettle(op op, d, limit, length int64) Result {
	w := m.open(op.key)
	switch {
	case d > 0:
		if w.count == 0 {
			w.end = m.now + length
		}
		if most := (1 + m.debt) * limit; m.debt >= 0 && w.count+d > most {
			w.count = max(w.count, most)
		} else {
			w.count += d
		}
		m.windows[op.key] = w
	case d < 0 && w.count > 0 && (!op.hasTakenAt || int64(op.takenAt) >= w.end-length):
		w.count += d
		if w.count <= 0 {
			w = policyFuncModelWindow{}
			delete(m.windows, op.key)
		} else {
			m.windows[op.key] = w
		}
	}
	return m.windowResult(true, w, limit)
}

// modelPolicies are the policies of the model test: whole µs per unit, and
// intervals that do not divide each other, so that conversions round.
var modelRatePolicies = []Policy{
	{},
	{Limit: 5, Window: 5 * time.Second}, // 1 s
	{Limit: 12, Window: 3600 * ms},      // 300 ms
	{Limit: 3, Window: 21 * ms},         // 7 ms
	{Limit: 8, Window: 1352 * time.Microsecond},      // 169 µs
	{Limit: 1, Window: 2 * time.Second},              // 2 s
	{Limit: 11, Window: 11 * 777 * time.Microsecond}, // 777 µs
}

var modelWindowPolicies = []Policy{
	{},
	{Limit: 5, Window: time.Second},
	{Limit: 2, Window: 300 * ms},
	{Limit: 10, Window: 7 * time.Second},
	{Limit: 1, Window: 50 * ms},
	{Limit: 3, Window: 1500 * ms},
}

// modelStep moves time by 0 (a burst), by up to 800 ms in ns, or now and
// then by up to 10 s.
func modelStep(r *rand.Rand) time.Duration {
	switch x := r.IntN(10); {
	case x < 3:
		return 0
	case x == 3:
		return time.Duration(r.Int64N(int64(10 * time.Second)))
	default:
		return time.Duration(r.Int64N(int64(800 * ms)))
	}
}

// TestPolicyFuncLimitersMatchTheModelAcrossPolicyChanges runs random streams of
// Allow, Refund, Settle and Reset with random policy changes on the
// in-process limiters built WithPolicyFunc, and requires every Result and
// error to be the model's.
func TestPolicyFuncLimitersMatchTheModelAcrossPolicyChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(31, 32))
	for _, sub := range []struct {
		policyFuncSubject
		stream opStream
	}{
		{inProcessPolicyFunc("TokenBucket", false, buildTokenBucket), opStream{mix: policyFuncMix, step: modelStep, policies: modelRatePolicies}},
		{inProcessPolicyFunc("GCRA", false, buildGCRA), opStream{mix: policyFuncMix, step: modelStep, policies: modelRatePolicies}},
		{inProcessPolicyFunc("FixedWindow", true, buildFixedWindow), opStream{mix: policyFuncMix, step: modelStep, policies: modelWindowPolicies, takenAt: true}},
	} {
		t.Run(sub.name, func(t *testing.T) {
			for round := range sized(10, 40) {
				// The constructor's policy is one of the others, so that
				// the zero Policy and an explicit one meet.
				own := sub.stream.policies[1+r.IntN(len(sub.stream.policies)-1)]
				plans := newPlanMap()
				debt, opts := randomDebt(r)
				most, settleOpts := randomSettleCap(r)
				l, advance := sub.newLimiter(t, own, plans.f, append(opts, settleOpts...)...)
				model := newPolicyFuncModel(own, sub.window, debt)
				model.settle = int64(most)
				// The calls on each key so far, in the message of a
				// mismatch.
				history := map[string]string{}
				for i, op := range sub.stream.ops(r, 400, "a", "b", "c") {
					advance(op.advance)
					if op.change {
						plans.set(op.key, op.set)
					}
					want, wantErr := model.apply(op, plans.get(op.key))
					got, err := op.apply(ctx, l)
					history[op.key] += fmt.Sprintf("\n  t=%v %v [%s]: %+v", time.Duration(model.now), op, policyFuncName(plans.get(op.key)), got)
					msg := fmt.Sprintf("round %d (own %s) step %d: %v; the key's calls:%s", round, policyFuncName(own), i, op, history[op.key])
					if wantErr != nil {
						require.ErrorIs(t, err, wantErr, msg)
					} else {
						require.NoError(t, err, msg)
					}
					require.Equal(t, want, got, msg)
				}
			}
		})
	}
}

// The streams of the differential tests keep the in-process (ns) and Redis
// (µs) engines on exactly the same arithmetic:
//   - diffConvert: intervals of 100, 200, 400 and 800 ms, and time moving by
//     whole multiples of 800 ms, so that a key's debt is always a whole
//     number of its interval and every conversion is exact;
//   - diffLimits: one interval (100 ms), limits that change, and time
//     moving by whole µs;
//   - diffWindow: windows of whole ms, time moving by whole ms.
var (
	diffConvert = opStream{
		mix:      policyFuncMix,
		policies: []Policy{{}, {Limit: 5, Window: 500 * ms}, {Limit: 3, Window: 600 * ms}, {Limit: 10, Window: 4 * time.Second}, {Limit: 2, Window: 1600 * ms}},
		step: func(r *rand.Rand) time.Duration {
			if r.IntN(5) < 3 {
				return 0
			}
			return time.Duration(1+r.IntN(3)) * 800 * ms
		},
	}
	diffConvertOwn = Policy{Limit: 4, Window: 800 * ms}
	diffLimits     = opStream{
		mix:      policyFuncMix,
		policies: []Policy{{}, {Limit: 3, Window: 300 * ms}, {Limit: 10, Window: time.Second}, {Limit: 1, Window: 100 * ms}, {Limit: 7, Window: 700 * ms}},
		step: func(r *rand.Rand) time.Duration {
			if r.IntN(10) < 3 {
				return 0
			}
			return time.Duration(r.Int64N(250_000)) * time.Microsecond
		},
	}
	diffLimitsOwn = Policy{Limit: 5, Window: 500 * ms}
	diffWindow    = opStream{
		mix:      policyFuncMix,
		policies: modelWindowPolicies,
		step: func(r *rand.Rand) time.Duration {
			if r.IntN(10) < 3 {
				return 0
			}
			return time.Duration(r.IntN(1500)) * ms
		},
	}
	diffWindowOwn = Policy{Limit: 4, Window: 2 * time.Second}
)

// policyFuncPair is an in-process limiter and its Redis equivalent.
type policyFuncPair struct {
	name         string
	local, redis policyFuncSubject
	stream       opStream
	own          Policy
}

var policyFuncPairs = []policyFuncPair{
	{"TokenBucket/conversions", inProcessPolicyFunc("TokenBucket", false, buildTokenBucket), miniredisPolicyFunc("RedisTokenBucket", false, buildRedisTokenBucket), diffConvert, diffConvertOwn},
	{"GCRA/conversions", inProcessPolicyFunc("GCRA", false, buildGCRA), miniredisPolicyFunc("RedisGCRA", false, buildRedisGCRA), diffConvert, diffConvertOwn},
	{"TokenBucket/limits", inProcessPolicyFunc("TokenBucket", false, buildTokenBucket), miniredisPolicyFunc("RedisTokenBucket", false, buildRedisTokenBucket), diffLimits, diffLimitsOwn},
	{"GCRA/limits", inProcessPolicyFunc("GCRA", false, buildGCRA), miniredisPolicyFunc("RedisGCRA", false, buildRedisGCRA), diffLimits, diffLimitsOwn},
	{"FixedWindow", inProcessPolicyFunc("FixedWindow", true, buildFixedWindow), miniredisPolicyFunc("RedisFixedWindow", true, buildRedisFixedWindow), diffWindow, diffWindowOwn},
}

// diffSentinels are the errors a call of a differential stream may fail
// with (only ErrCostExceedsLimit occurs in the streams as they are: an
// Allow of more than the key's limit).
var diffSentinels = []error{ErrCostExceedsLimit, ErrInvalidConfig, ErrInvalidCost}

// requireSameError requires err, a Redis limiter's, to be nil where want,
// the in-process limiter's, is, and otherwise to match the sentinel want
// matches.
func requireSameError(t *testing.T, want, err error, msg string) {
	t.Helper()
	if want == nil {
		require.NoError(t, err, msg)
		return
	}
	for _, sentinel := range diffSentinels {
		if errors.Is(want, sentinel) {
			require.ErrorIs(t, err, sentinel, "%s: in process: %v", msg, want)
			return
		}
	}
	require.Failf(t, "an in-process error of no expected kind", "%s: %v (Redis: %v)", msg, want, err)
}

// TestPolicyFuncRedisLimitersDecideAsInProcessOnMiniredis runs the same random
// streams, policy changes included, on each in-process limiter built
// WithPolicyFunc and on its Redis equivalent over miniredis, time moving
// alike, and requires every Result to be the same.
func TestPolicyFuncRedisLimitersDecideAsInProcessOnMiniredis(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(33, 34))
	for _, pair := range policyFuncPairs {
		t.Run(pair.name, func(t *testing.T) {
			for round := range sized(2, 8) {
				plans := newPlanMap()
				_, opts := randomDebt(r)
				_, settleOpts := randomSettleCap(r)
				opts = append(opts, settleOpts...)
				local, advanceLocal := pair.local.newLimiter(t, pair.own, plans.f, opts...)
				remote, advanceRemote := pair.redis.newLimiter(t, pair.own, plans.f, opts...)
				for i, op := range pair.stream.ops(r, sized(150, 300), "a", "b", "c") {
					advanceLocal(op.advance)
					advanceRemote(op.advance)
					if op.change {
						plans.set(op.key, op.set)
					}
					want, wantErr := op.apply(ctx, local)
					got, err := op.apply(ctx, remote)
					msg := fmt.Sprintf("round %d step %d: %v", round, i, op)
					requireSameError(t, wantErr, err, msg)
					require.Equal(t, want, got, msg)
				}
			}
		})
	}
}

// TestRealRedisPolicyFuncLimitersDecideAsInProcess runs such streams on a real
// redis-server, whose time the test cannot move: with intervals of 20, 40
// and 80 s (whose products stay below 2^53 µs², where the script's
// conversion is exact) and windows of minutes, no unit comes back during
// the test, so Allowed and Remaining must be those of the in-process
// limiter, whose time stands still.
func TestRealRedisPolicyFuncLimitersDecideAsInProcess(t *testing.T) {
	t.Parallel()
	client := redistest.Shared(t).Client(t)
	ctx := context.Background()
	slow := opStream{
		mix:      policyFuncMix,
		policies: []Policy{{}, {Limit: 3, Window: time.Minute}, {Limit: 6, Window: 240 * time.Second}, {Limit: 2, Window: 160 * time.Second}, {Limit: 10, Window: 400 * time.Second}, {Limit: 5, Window: 100 * time.Second}},
		step:     func(*rand.Rand) time.Duration { return 0 },
	}
	slowOwn := Policy{Limit: 4, Window: 160 * time.Second}
	slowWindows := opStream{
		mix:      policyFuncMix,
		policies: []Policy{{}, {Limit: 5, Window: 20 * time.Minute}, {Limit: 2, Window: 10 * time.Minute}, {Limit: 10, Window: time.Hour}, {Limit: 1, Window: 30 * time.Minute}},
		step:     func(*rand.Rand) time.Duration { return 0 },
	}
	slowWindowOwn := Policy{Limit: 4, Window: 10 * time.Minute}
	onServer := func(build func(client *redis.Client, own Policy, opts ...Option) (Adjuster, error)) func(t *testing.T, own Policy, f PolicyFunc, opts ...Option) Adjuster {
		return func(t *testing.T, own Policy, f PolicyFunc, opts ...Option) Adjuster {
			l, err := build(client, own, append(opts, WithPolicyFunc(f))...)
			require.NoError(t, err)
			return l
		}
	}
	r := rand.New(rand.NewPCG(35, 36))
	for _, pair := range []struct {
		name   string
		local  policyFuncSubject
		redis  func(t *testing.T, own Policy, f PolicyFunc, opts ...Option) Adjuster
		stream opStream
		own    Policy
	}{
		{"TokenBucket", inProcessPolicyFunc("TokenBucket", false, buildTokenBucket), onServer(buildRedisTokenBucket), slow, slowOwn},
		{"GCRA", inProcessPolicyFunc("GCRA", false, buildGCRA), onServer(buildRedisGCRA), slow, slowOwn},
		{"FixedWindow", inProcessPolicyFunc("FixedWindow", true, buildFixedWindow), onServer(buildRedisFixedWindow), slowWindows, slowWindowOwn},
	} {
		t.Run(pair.name, func(t *testing.T) {
			for round := range 6 {
				plans := newPlanMap()
				_, opts := randomDebt(r)
				_, settleOpts := randomSettleCap(r)
				opts = append(opts, settleOpts...)
				local, _ := pair.local.newLimiter(t, pair.own, plans.f, opts...)
				remote := pair.redis(t, pair.own, plans.f, opts...)
				keys := []string{fmt.Sprint(round, "a"), fmt.Sprint(round, "b"), fmt.Sprint(round, "c")}
				for i, op := range pair.stream.ops(r, 200, keys...) {
					if op.change {
						plans.set(op.key, op.set)
					}
					want, wantErr := op.apply(ctx, local)
					got, err := op.apply(ctx, remote)
					msg := fmt.Sprintf("round %d step %d: %v", round, i, op)
					requireSameError(t, wantErr, err, msg)
					assert.Equal(t, want.Allowed, got.Allowed, msg)
					assert.Equal(t, want.Remaining, got.Remaining, msg)
					assert.Equal(t, want.Limit, got.Limit, msg)
				}
			}
		})
	}
}
