package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The differential test of the concurrency limiters: random Acquires,
// Allows, Releases, Extends and Resets with time moving, made on an exact
// model, on a Concurrency with a fake clock and on a RedisConcurrency on
// miniredis, comparing every Result, Lease and error.

// heldModel is the exact model of a concurrency limiter: each key's
// leases, by index among every lease the run granted; times in µs.
type heldModel struct {
	now    int64
	leases map[string]map[int]modelLease
}

type modelLease struct{ units, expiry int64 }

// acquire decides n for key under limit and ttl (µs); a granted lease is
// number id.
func (m *heldModel) acquire(key string, n, limit, ttl int64, id int) Result {
	ls := m.leases[key]
	var held, latest int64
	for i, l := range ls {
		if l.expiry <= m.now {
			delete(ls, i)
			continue
		}
		held += l.units
		latest = max(latest, l.expiry)
	}
	res := Result{Limit: int(limit)}
	switch {
	case n > 0 && held+n <= limit:
		if ls == nil {
			ls = map[int]modelLease{}
			m.leases[key] = ls
		}
		ls[id] = modelLease{n, m.now + ttl}
		held += n
		latest = max(latest, m.now+ttl)
		res.Allowed = true
	case n == 0:
		res.Allowed = true
	default:
		exps := make([]modelLease, 0, len(ls))
		for _, l := range ls {
			exps = append(exps, l)
		}
		slices.SortFunc(exps, func(a, b modelLease) int { return cmp.Compare(a.expiry, b.expiry) })
		free := limit - held
		for _, l := range exps {
			if free += l.units; free >= n {
				res.RetryAfter = time.Duration(l.expiry-m.now) * time.Microsecond
				break
			}
		}
	}
	res.Remaining = int(max(limit-held, 0))
	if held > 0 {
		res.ResetAfter = time.Duration(latest-m.now) * time.Microsecond
	}
	return res
}

// extend renews lease id of key for ttl µs, and reports whether it held.
func (m *heldModel) extend(key string, id int, ttl int64) bool {
	l, ok := m.leases[key][id]
	if !ok || l.expiry <= m.now {
		delete(m.leases[key], id)
		return false
	}
	m.leases[key][id] = modelLease{l.units, m.now + ttl}
	return true
}

// held returns the units key's leases hold now.
func (m *heldModel) held(key string) int64 {
	var units int64
	for _, l := range m.leases[key] {
		if l.expiry > m.now {
			units += l.units
		}
	}
	return units
}

// heldStep is one step of a run: move the clock, maybe give the key
// another plan, then call.
type heldStep struct {
	advance time.Duration
	change  bool
	plan    Policy
	kind    string // acquire, allow, release, extend, reset
	key     string
	n       int
	lease   int // the index of the lease a release or extend is of
}

func (s heldStep) String() string {
	p := ""
	if s.change {
		p = fmt.Sprintf(" plan %d/%v;", s.plan.Limit, s.plan.Window)
	}
	return fmt.Sprintf("+%v;%s %s(%q, n=%d, lease=%d)", s.advance, p, s.kind, s.key, s.n, s.lease)
}

func TestConcurrencyDecidesAsTheModelInProcessAndOnRedis(t *testing.T) {
	t.Parallel()
	// Plans of 2, 5 and 20 in flight, each with a TTL of its own, and the
	// zero Policy: the limiter's own, 5 with leases of 3 s.
	plans := []Policy{{}, {Limit: 2, Window: 2 * time.Second}, {Limit: 5, Window: 700 * time.Millisecond}, {Limit: 20, Window: 5 * time.Second}}
	for _, tc := range []struct {
		name  string
		plans []Policy
	}{{"one policy", nil}, {"plans", plans}} {
		t.Run(tc.name, func(t *testing.T) {
			// 2 runs of 250 steps (5 of 3000 under -soak).
			for seed := range uint64(sized(2, 5)) {
				t.Run("seed="+strconv.FormatUint(seed, 10), func(t *testing.T) {
					runHeldDifferential(t, rand.New(rand.NewPCG(seed, 23)), sized(250, 3000), tc.plans)
				})
			}
		})
	}
}

// runHeldDifferential makes steps random steps on the model and both
// limiters, with plans (none: the limiters' own policy alone), and
// compares them after each.
func runHeldDifferential(t *testing.T, r *rand.Rand, steps int, plans []Policy) {
	ctx := context.Background()
	own := Policy{Limit: 5, Window: 3 * time.Second}
	table := newPlanMap()
	var opts []Option
	if plans != nil {
		opts = append(opts, WithPolicyFunc(table.f))
	}
	clock := ratelimittest.NewClock(epoch)
	local, err := NewConcurrency(own.Limit, own.Window, append([]Option{WithClock(clock)}, opts...)...)
	require.NoError(t, err)
	m, client, advance := miniredisClock(t)
	remote, err := NewRedisConcurrency(client, own.Limit, own.Window, redisOpts(opts)...)
	require.NoError(t, err)
	model := &heldModel{now: epoch.UnixMicro(), leases: map[string]map[int]modelLease{}}
	keys := []string{"a", "b", "c"}
	policy := func(key string) Policy {
		if p := table.get(key); p != (Policy{}) {
			return p
		}
		return own
	}

	type granted struct {
		key    string
		local  Lease
		remote Lease
	}
	var leases []granted
	for i := range steps {
		st := heldStep{key: keys[r.IntN(len(keys))]}
		switch x := r.IntN(20); {
		case x < 6: // a burst: no time passes
		case x == 6:
			st.advance = time.Duration(r.Int64N(int64(6 * time.Second)))
		default:
			st.advance = time.Duration(r.Int64N(int64(400 * time.Millisecond)))
		}
		st.advance = st.advance.Truncate(time.Microsecond)
		if plans != nil && r.IntN(8) == 0 {
			st.change, st.plan = true, plans[r.IntN(len(plans))]
		}
		switch x := r.IntN(20); {
		case x < 8:
			st.kind, st.n = "acquire", r.IntN(4)
			if r.IntN(10) == 0 {
				st.n = r.IntN(22)
			}
		case x < 10:
			st.kind, st.n = "allow", r.IntN(3)
		case x < 15:
			st.kind = "release"
		case x < 19:
			st.kind = "extend"
		default:
			st.kind = "reset"
		}
		if (st.kind == "release" || st.kind == "extend") && len(leases) == 0 {
			st.kind = "acquire"
		}
		if st.kind == "release" || st.kind == "extend" {
			// Mostly recent leases, which may still hold.
			st.lease = len(leases) - 1 - min(r.IntN(len(leases)), r.IntN(8))
			st.key = leases[st.lease].key
		}
		where := fmt.Sprintf("step %d: %v", i, st)

		clock.Advance(st.advance)
		advance(st.advance)
		model.now += st.advance.Microseconds()
		if st.change {
			table.set(st.key, st.plan)
		}
		p := policy(st.key)
		limit, ttl := int64(p.Limit), p.Window.Microseconds()

		switch st.kind {
		case "acquire", "allow":
			var want Result
			var wantErr error
			if int64(st.n) > limit {
				want, wantErr = Result{Limit: int(limit)}, ErrCostExceedsLimit
			} else {
				want = model.acquire(st.key, int64(st.n), limit, ttl, len(leases))
			}
			var gl, gr Lease
			var dl, dr Decision
			var el, er error
			if st.kind == "acquire" {
				gl, dl, el = local.Acquire(ctx, st.key, st.n)
				gr, dr, er = remote.Acquire(ctx, st.key, st.n)
			} else {
				dl, el = local.Decide(ctx, st.key, st.n)
				dr, er = remote.Decide(ctx, st.key, st.n)
			}
			checkErr(t, wantErr, el, "in process, "+where)
			checkErr(t, wantErr, er, "on Redis, "+where)
			require.Equal(t, want, dl.Result, "in process, %s", where)
			require.Equal(t, want, dr.Result, "on Redis, %s", where)
			require.Equal(t, p, dl.Policy.Policy, where)
			require.Equal(t, p, dr.Policy.Policy, where)
			require.True(t, dr.Policy.InFlight, where)
			leased := st.kind == "acquire" && want.Allowed && st.n > 0
			require.Equal(t, leased, gl.Held(), "in process, %s", where)
			require.Equal(t, leased, gr.Held(), "on Redis, %s", where)
			if want.Allowed && st.n > 0 {
				if leased {
					require.Equal(t, st.key, gr.Key(), where)
					require.Equal(t, st.n, gr.Units(), where)
					require.Equal(t, p.Window, gr.TTL(), where)
					require.Equal(t, gl.TTL(), gr.TTL(), where)
				}
				leases = append(leases, granted{st.key, gl, gr})
			}
		case "release":
			g := leases[st.lease]
			if g.local.Held() { // Allow's units are no one's to release
				delete(model.leases[st.key], st.lease)
			}
			require.NoError(t, g.local.Release(ctx), "in process, %s", where)
			require.NoError(t, g.remote.Release(ctx), "on Redis, %s", where)
		case "extend":
			g := leases[st.lease]
			var wantErr error
			if g.local.Held() && !model.extend(st.key, st.lease, ttl) {
				wantErr = ErrLeaseExpired
			}
			nl, el := g.local.Extend(ctx)
			nr, er := g.remote.Extend(ctx)
			checkErr(t, wantErr, el, "in process, "+where)
			checkErr(t, wantErr, er, "on Redis, "+where)
			if wantErr == nil && g.local.Held() {
				require.Equal(t, p.Window, nl.TTL(), where)
				require.Equal(t, p.Window, nr.TTL(), where)
			}
		case "reset":
			delete(model.leases, st.key)
			require.NoError(t, local.Reset(ctx, st.key), where)
			require.NoError(t, remote.Reset(ctx, st.key), where)
		}
		checkHeldKeys(t, m, remote.KeyPrefix(), keys, model, where)
	}
}

// checkErr checks that err is nil when want is, and wraps want otherwise.
func checkErr(t *testing.T, want, err error, where string) {
	t.Helper()
	if want == nil {
		require.NoError(t, err, where)
		return
	}
	require.ErrorIs(t, err, want, where)
}

// leaseValue reads the value of a lease in its key's HASH: its expiry
// (µs) for one unit, "units:expiry" for more.
func leaseValue(t *testing.T, v string) (units, expiry int64) {
	t.Helper()
	units, text := 1, v
	if a, b, found := strings.Cut(v, ":"); found {
		n, err := strconv.ParseInt(a, 10, 64)
		require.NoError(t, err, v)
		require.Greater(t, n, int64(1), "one unit is written as its expiry alone: %q", v)
		units, text = n, b
	}
	expiry, err := strconv.ParseInt(text, 10, 64)
	require.NoError(t, err, v)
	return units, expiry
}

// checkHeldKeys checks the state of every key on the server: a STRING's
// lease, or a HASH whose fields agree (u the sum of the leases' units, x
// their latest expiry, e at or before every expiry); its leases that hold
// are the model's; its TTL lasts until its latest lease expires and no
// longer than that time's whole ms; and a key that holds nothing is gone
// once its latest lease has expired.
func checkHeldKeys(t *testing.T, m *miniredis.Miniredis, prefix string, keys []string, model *heldModel, where string) {
	t.Helper()
	for _, key := range keys {
		k := storedKey(prefix, key)
		if !m.Exists(k) {
			require.Zero(t, model.held(key), "%s: %q holds leases but its key is gone", where, key)
			continue
		}
		ttl := m.TTL(k)
		require.Positive(t, ttl, "%s: %q has a TTL", where, key)
		if v, err := m.Get(k); err == nil {
			// One lease, "lease:value".
			_, value, found := strings.Cut(v, ":")
			require.True(t, found, "%s: %q: %q", where, key, v)
			units, expiry := leaseValue(t, value)
			if expiry <= model.now {
				units = 0
			}
			assert.Equal(t, model.held(key), units, "%s: %q: its lease is the model's", where, key)
			left := time.Duration(expiry-model.now) * time.Microsecond
			assert.GreaterOrEqual(t, ttl, left, "%s: %q lasts until its lease expires", where, key)
			assert.Less(t, ttl, max(left, 0)+time.Millisecond, "%s: %q lasts no longer than its lease's whole ms", where, key)
			continue
		}
		fields, err := m.HKeys(k)
		require.NoError(t, err)
		var sum, live, lo, hi int64
		lo = 1 << 62
		head := map[string]int64{}
		for _, f := range fields {
			v := m.HGet(k, f)
			if f == "u" || f == "e" || f == "x" {
				n, err := strconv.ParseInt(v, 10, 64)
				require.NoError(t, err, where)
				head[f] = n
				continue
			}
			u, e := leaseValue(t, v)
			sum, lo, hi = sum+u, min(lo, e), max(hi, e)
			if e > model.now {
				live += u
			}
		}
		require.Len(t, head, 3, "%s: %q has u, e and x", where, key)
		assert.Equal(t, sum, head["u"], "%s: %q: u is the sum of its leases", where, key)
		assert.Equal(t, hi, head["x"], "%s: %q: x is the latest expiry", where, key)
		assert.LessOrEqual(t, head["e"], lo, "%s: %q: e is at or before every expiry", where, key)
		assert.Equal(t, model.held(key), live, "%s: %q: its leases that hold are the model's", where, key)
		left := time.Duration(hi-model.now) * time.Microsecond
		assert.GreaterOrEqual(t, ttl, left, "%s: %q lasts until its latest lease expires", where, key)
		assert.Less(t, ttl, max(left, 0)+time.Millisecond, "%s: %q lasts no longer than its latest lease's whole ms", where, key)
	}
}
