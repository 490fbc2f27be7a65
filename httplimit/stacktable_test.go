package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// recorder is a Decider that passes every call to its limiter and keeps
// the last Decision and error, for comparing what the middleware sent with
// what the decision said.
type recorder struct {
	ratelimit.Decider
	last ratelimit.Decision
	err  error
}

// Decide decides through the limiter and records the answer.
func (r *recorder) Decide(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	r.last, r.err = r.Decider.Decide(ctx, key, n)
	return r.last, r.err
}

// Allow decides through Decide.
func (r *recorder) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	d, err := r.Decide(ctx, key, n)
	return d.Result, err
}

// stackRow is one limiter of the production-stack table, on a miniredis.
type stackRow struct {
	name  string
	build func(t *testing.T, client redis.Scripter) ratelimit.Decider
	// corrupt returns the Redis key to fill with foreign data for key.
	corrupt func(l ratelimit.Decider, key string) string
}

// prefixOf returns the Redis key prefix of one of the Redis limiters.
func prefixOf(l any) string {
	return l.(interface{ KeyPrefix() string }).KeyPrefix()
}

// stackRows are the limiters of the table: the six algorithms, a
// Composite with a PerCall part, a Composite of a sliding log and a
// calendar day, and a limiter built WithPolicyFunc (which fails for the
// key "broken").
func stackRows() []stackRow {
	own := func(l ratelimit.Decider, key string) string { return redisbatch.StoredKey(prefixOf(l), "", key) }
	return []stackRow{
		{"TokenBucket", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			l, err := ratelimit.NewRedisTokenBucket(c, ratelimit.PerSecond(1), 5)
			require.NoError(t, err)
			return l
		}, own},
		{"GCRA", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			l, err := ratelimit.NewRedisGCRA(c, 5, 10*time.Second)
			require.NoError(t, err)
			return l
		}, own},
		{"FixedWindow", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			l, err := ratelimit.NewRedisFixedWindow(c, 5, 10*time.Second)
			require.NoError(t, err)
			return l
		}, own},
		{"Composite", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			requests, err := ratelimit.NewRedisGCRA(c, 3, time.Minute)
			require.NoError(t, err)
			tokens, err := ratelimit.NewRedisTokenBucket(c, ratelimit.PerSecond(1), 5)
			require.NoError(t, err)
			l, err := ratelimit.NewComposite(
				ratelimit.Part{Name: "requests", Limiter: requests, PerCall: true},
				ratelimit.Part{Name: "tokens", Limiter: tokens},
			)
			require.NoError(t, err)
			return l
		}, func(_ ratelimit.Decider, key string) string {
			return redisbatch.StoredKey(ratelimit.DefaultKeyPrefix+"tb:5:1000000:", "", key)
		}},
		{"SlidingLog", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			l, err := ratelimit.NewRedisSlidingLog(c, 5, 10*time.Second)
			require.NoError(t, err)
			return l
		}, own},
		{"SlidingCounter", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			l, err := ratelimit.NewRedisSlidingCounter(c, 5, 10*time.Second)
			require.NoError(t, err)
			return l
		}, own},
		{"CalendarWindow", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			return redisCalendarDay(t, c, 5)
		}, own},
		{"Composite of a sliding log and a calendar day", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			perUser, err := ratelimit.NewRedisSlidingLog(c, 3, time.Minute)
			require.NoError(t, err)
			l, err := ratelimit.NewComposite(
				ratelimit.Part{Name: "per-user", Limiter: perUser, PerCall: true},
				ratelimit.Part{Name: "day", Limiter: redisCalendarDay(t, c, 5)},
			)
			require.NoError(t, err)
			return l
		}, func(_ ratelimit.Decider, key string) string {
			return redisbatch.StoredKey(ratelimit.DefaultKeyPrefix+"cal:5:day:UTC:", "", key)
		}},
		{"PolicyFunc", func(t *testing.T, c redis.Scripter) ratelimit.Decider {
			plans := func(_ context.Context, key string) (ratelimit.Policy, error) {
				if key == "broken" {
					return ratelimit.Policy{}, errors.New("plan store unreachable")
				}
				return ratelimit.Policy{Limit: 4, Window: 8 * time.Second}, nil
			}
			l, err := ratelimit.NewRedisGCRA(c, 5, 10*time.Second, ratelimit.WithPolicyFunc(plans))
			require.NoError(t, err)
			return l
		}, own},
	}
}

// stackEpoch is the miniredis time of the table, 22:13:20 UTC: a
// calendar day there ends in 6400 s.
var stackEpoch = time.Unix(1_700_000_000, 0)

// redisCalendarDay returns a RedisCalendarWindow of limit a UTC day, whose
// bounds come from a clock at the miniredis time of the table, so that the
// window the client sends is the one the server's time is in.
func redisCalendarDay(t *testing.T, c redis.Scripter, limit int) *ratelimit.RedisCalendarWindow {
	t.Helper()
	l, err := ratelimit.NewRedisCalendarWindow(c, limit, ratelimit.Calendar{Period: ratelimit.CalendarDay},
		ratelimit.WithClock(ratelimittest.NewClock(stackEpoch)))
	require.NoError(t, err)
	return l
}

// stackWrap is one way the table puts a limiter in production.
type stackWrap struct {
	name string
	wrap func(t *testing.T, l ratelimit.Decider) ratelimit.Decider
}

// compositeFallback returns an in-process Composite for a Guard's FailOver.
func compositeFallback(t *testing.T) ratelimit.Limiter {
	requests, err := ratelimit.NewGCRA(2, time.Minute)
	require.NoError(t, err)
	tokens, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 3)
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "requests", Limiter: requests, PerCall: true},
		ratelimit.Part{Name: "tokens", Limiter: tokens},
	)
	require.NoError(t, err)
	return c
}

// partFailure wraps the table's Composite of "requests" and "tokens" in a
// Guard that fails over but for the parts policies names; it skips the
// other rows.
func partFailure(policies map[string]ratelimit.FailurePolicy) func(*testing.T, ratelimit.Decider) ratelimit.Decider {
	return func(t *testing.T, l ratelimit.Decider) ratelimit.Decider {
		ps, err := l.Policies(context.Background(), "")
		if err != nil || len(ps) != 2 || ps[0].Name != "requests" {
			t.Skip("a failure policy per part is for the Composite of requests and tokens")
		}
		g, err := ratelimit.NewGuard(l, ratelimit.GuardConfig{OnFailure: ratelimit.FailOver, PartFailure: policies, Fallback: compositeFallback(t)})
		require.NoError(t, err)
		return g
	}
}

// stackWraps are the wrappings of the table.
func stackWraps() []stackWrap {
	guard := func(cfg func(t *testing.T) ratelimit.GuardConfig) func(*testing.T, ratelimit.Decider) ratelimit.Decider {
		return func(t *testing.T, l ratelimit.Decider) ratelimit.Decider {
			g, err := ratelimit.NewGuard(l, cfg(t))
			require.NoError(t, err)
			return g
		}
	}
	denyCache := func(t *testing.T, l ratelimit.Decider) ratelimit.Decider {
		c, err := ratelimit.NewDenyCache(l, ratelimit.DenyCacheConfig{})
		require.NoError(t, err)
		return c
	}
	// prefetch leases every key from its first call, in blocks of 2 (a
	// Prefetch takes only a token bucket, GCRA or fixed window).
	prefetch := func(t *testing.T, l ratelimit.Decider) ratelimit.Decider {
		switch l.(type) {
		case *ratelimit.RedisTokenBucket, *ratelimit.RedisGCRA, *ratelimit.RedisFixedWindow:
		default:
			t.Skipf("a Prefetch does not take a %T", l)
		}
		c, err := ratelimit.NewPrefetch(l, ratelimit.PrefetchConfig{HotCalls: 1, MinBlock: 2, MaxShare: 2})
		require.NoError(t, err)
		return c
	}
	return []stackWrap{
		{"bare", func(_ *testing.T, l ratelimit.Decider) ratelimit.Decider { return l }},
		{"Guard(FailOpen)", guard(func(*testing.T) ratelimit.GuardConfig { return ratelimit.GuardConfig{} })},
		{"Guard(FailClosed)", guard(func(*testing.T) ratelimit.GuardConfig {
			return ratelimit.GuardConfig{OnFailure: ratelimit.FailClosed}
		})},
		{"Guard(FailOver)", guard(func(t *testing.T) ratelimit.GuardConfig {
			return ratelimit.GuardConfig{OnFailure: ratelimit.FailOver, Fallback: compositeFallback(t)}
		})},
		// A failure policy per part, for the Composite of "requests" and
		// "tokens": one part fails over, the other closed or open.
		{"Guard(PartFailure closed)", partFailure(map[string]ratelimit.FailurePolicy{"tokens": ratelimit.FailClosed})},
		{"Guard(PartFailure open)", partFailure(map[string]ratelimit.FailurePolicy{"requests": ratelimit.FailOpen})},
		{"DenyCache", denyCache},
		{"Shadow", func(t *testing.T, l ratelimit.Decider) ratelimit.Decider {
			s, err := ratelimit.NewShadow(l, ratelimit.ShadowConfig{})
			require.NoError(t, err)
			return s
		}},
		{"Guard(DenyCache)", func(t *testing.T, l ratelimit.Decider) ratelimit.Decider {
			g, err := ratelimit.NewGuard(denyCache(t, l), ratelimit.GuardConfig{OnFailure: ratelimit.FailClosed})
			require.NoError(t, err)
			return g
		}},
		{"Prefetch", prefetch},
		{"Guard(Prefetch)", func(t *testing.T, l ratelimit.Decider) ratelimit.Decider {
			g, err := ratelimit.NewGuard(prefetch(t, l), ratelimit.GuardConfig{OnFailure: ratelimit.FailClosed})
			require.NoError(t, err)
			return g
		}},
	}
}

// stackColumn is the state of the backend for a column of the table, and
// the calls made in it: the key and cost of each.
type stackColumn struct {
	name  string
	setup func(t *testing.T, m *miniredis.Miniredis, row stackRow, l ratelimit.Decider)
	key   string
	costs []int
}

// stackColumns are the columns: the backend up (allowed, denied, a cost
// above the limit), down, and answering with an error of each class.
func stackColumns() []stackColumn {
	return []stackColumn{
		{"up", func(*testing.T, *miniredis.Miniredis, stackRow, ratelimit.Decider) {}, "alice", []int{1, 2, 1, 4, 3, 1, 9}},
		{"down (ErrBackend)", func(_ *testing.T, m *miniredis.Miniredis, _ stackRow, _ ratelimit.Decider) { m.Close() }, "alice", []int{1, 1, 1}},
		{"a key's data (ErrCorruptState)", func(t *testing.T, m *miniredis.Miniredis, row stackRow, l ratelimit.Decider) {
			require.NoError(t, m.Set(row.corrupt(l, "mallory"), "not a bucket"))
		}, "mallory", []int{1}},
		{"the caller's mistake (ErrCaller)", func(*testing.T, *miniredis.Miniredis, stackRow, ratelimit.Decider) {}, "broken", []int{1, 100}},
	}
}

// TestWhatTheMiddlewareSendsIsWhatTheDecisionSays: for every limiter of the
// table in every wrapping, with the backend up, down and failing with each
// class of error, the response's status and fields are those the Decision
// of the call says, and name only policies that applied to it.
func TestWhatTheMiddlewareSendsIsWhatTheDecisionSays(t *testing.T) {
	for _, row := range stackRows() {
		for _, wrap := range stackWraps() {
			for _, col := range stackColumns() {
				t.Run(row.name+"/"+wrap.name+"/"+col.name, func(t *testing.T) {
					m := miniredis.RunT(t)
					m.SetTime(stackEpoch)
					client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
					t.Cleanup(func() { _ = client.Close() })
					backend := row.build(t, client)
					col.setup(t, m, row, backend)
					rec := &recorder{Decider: wrap.wrap(t, backend)}
					cost := 0
					mw, err := httplimit.NewMiddleware(rec, func(*http.Request) (string, error) { return col.key, nil },
						httplimit.WithCost(func(*http.Request) (int, error) { return cost, nil }),
						httplimit.WithShadowHeader())
					require.NoError(t, err)
					h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
					for i, n := range col.costs {
						cost = n
						w := httptest.NewRecorder()
						h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
						checkSent(t, rec.last, rec.err, w, "call %d of cost %d", i, n)
						if col.key == "mallory" {
							assert.ErrorIs(t, rec.err, ratelimit.ErrCorruptState, "the key filled is the limiter's")
						}
					}
				})
			}
		}
	}
}

// checkSent asserts that the response w is the one the Decision d (and
// err) of its call calls for.
func checkSent(t *testing.T, d ratelimit.Decision, err error, w *httptest.ResponseRecorder, msgAndArgs ...any) {
	t.Helper()
	h := w.Header()
	switch {
	case errors.Is(err, ratelimit.ErrCostExceedsLimit):
		assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code, msgAndArgs...)
		assert.Equal(t, strconv.Itoa(d.Policy.Limit), h.Get("RateLimit-Limit"), msgAndArgs...)
		assert.Equal(t, names(d.Policies), listNames(h.Get("RateLimit-Policy")), msgAndArgs...)
		return
	case err != nil && d.Source == ratelimit.FromShadow:
		assert.Equal(t, http.StatusOK, w.Code, "a Shadow that does not enforce denies no one: %v", err)
		assert.Empty(t, h.Get("RateLimit"), msgAndArgs...)
		return
	case err != nil && errors.Is(err, ratelimit.ErrBackend):
		assert.Equal(t, http.StatusOK, w.Code, "a backend failure fails open: %v", err)
		assert.Empty(t, h.Get("RateLimit"), msgAndArgs...)
		return
	case err != nil:
		assert.Equal(t, http.StatusServiceUnavailable, w.Code, "an unknown limit is not lifted: %v", err)
		assert.Empty(t, h.Get("RateLimit"), msgAndArgs...)
		return
	}
	require.NotEmpty(t, d.Policies, msgAndArgs...)
	assert.Equal(t, d.Policies[d.PolicyIndex], d.Policy, msgAndArgs...)
	assert.Equal(t, d.Policy.Limit, d.Limit, "the limit shown is the bound policy's")
	assert.Equal(t, strconv.Itoa(d.Limit), h.Get("RateLimit-Limit"), msgAndArgs...)
	assert.Equal(t, strconv.Itoa(d.Remaining), h.Get("RateLimit-Remaining"), msgAndArgs...)
	assert.Equal(t, names(d.Policies), listNames(h.Get("RateLimit-Policy")), msgAndArgs...)
	assert.Equal(t, windows(d.Policies), listParam(h.Get("RateLimit-Policy"), "w"), "w of each policy is its Window in whole seconds: %v", msgAndArgs)
	item := h.Get("RateLimit")
	if d.Allowed {
		assert.Equal(t, http.StatusOK, w.Code, msgAndArgs...)
		assert.Equal(t, d.WouldDeny, h.Get("RateLimit-Shadow") != "", msgAndArgs...)
		assert.Equal(t, strconv.FormatInt(ceilSeconds(d.ResetAfter), 10), h.Get("RateLimit-Reset"), "RateLimit-Reset is ResetAfter in whole seconds, rounded up: %v", msgAndArgs)
		// Every policy whose Result the Decision holds, the bound one
		// first, each with its own r and its effective window as t.
		order := []int{d.PolicyIndex}
		if len(d.Parts) == len(d.Policies) {
			for i := range d.Policies {
				if i != d.PolicyIndex {
					order = append(order, i)
				}
			}
		}
		var wantNames, wantR, wantT []string
		for _, i := range order {
			wantNames = append(wantNames, strconv.Quote(d.Policies[i].Name))
			r := d.Remaining
			if i != d.PolicyIndex {
				r = d.Parts[i].Remaining
			}
			wantR = append(wantR, strconv.Itoa(r))
			tv := ""
			if next, ok := d.NextUnit(i); ok {
				tv = strconv.FormatInt(max(ceilSeconds(next), 1), 10)
			}
			wantT = append(wantT, tv)
		}
		assert.Equal(t, wantNames, listNames(item), msgAndArgs...)
		assert.Equal(t, wantR, listParam(item, "r"), msgAndArgs...)
		assert.Equal(t, wantT, listParam(item, "t"), "t is each policy's NextUnit in whole seconds, rounded up: %v", msgAndArgs)
		return
	}
	assert.Equal(t, []string{strconv.Quote(d.Policy.Name)}, listNames(item), msgAndArgs...)
	assert.Equal(t, []string{strconv.Itoa(d.Remaining)}, listParam(item, "r"), msgAndArgs...)
	assert.Equal(t, http.StatusTooManyRequests, w.Code, msgAndArgs...)
	retry := strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10)
	assert.Equal(t, retry, h.Get("Retry-After"), msgAndArgs...)
	assert.Equal(t, retry, h.Get("RateLimit-Reset"), msgAndArgs...)
	assert.Equal(t, []string{retry}, listParam(item, "t"), "t is Retry-After: %v", msgAndArgs)
}

// ceilSeconds returns d in whole seconds, rounded up; 0 for d <= 0.
func ceilSeconds(d time.Duration) int64 {
	return int64((max(d, 0) + time.Second - 1) / time.Second)
}

// windows returns, for each policy, the w RateLimit-Policy must give it:
// its Window in whole seconds, rounded up, or "" for a policy without one
// (no window, or units in flight).
func windows(policies []ratelimit.NamedPolicy) []string {
	out := make([]string, len(policies))
	for i, p := range policies {
		if p.Window > 0 && !p.InFlight {
			out[i] = strconv.FormatInt(ceilSeconds(p.Window), 10)
		}
	}
	return out
}

// listParam returns the value of the parameter param of each member of a
// RateLimit or RateLimit-Policy value, "" for a member without it.
func listParam(v, param string) []string {
	var out []string
	for _, item := range strings.Split(v, ", ") {
		if item == "" {
			continue
		}
		value := ""
		for _, p := range strings.Split(item, ";")[1:] {
			if k, val, ok := strings.Cut(p, "="); ok && k == param {
				value = val
			}
		}
		out = append(out, value)
	}
	return out
}

// names returns the quoted names of policies.
func names(policies []ratelimit.NamedPolicy) []string {
	out := make([]string, len(policies))
	for i, p := range policies {
		out[i] = strconv.Quote(p.Name)
	}
	return out
}

// listNames returns the names of the members of a RateLimit or
// RateLimit-Policy value.
func listNames(v string) []string {
	var out []string
	for _, item := range strings.Split(v, ", ") {
		if item == "" {
			continue
		}
		name, _, _ := strings.Cut(item, ";")
		out = append(out, name)
	}
	return out
}
