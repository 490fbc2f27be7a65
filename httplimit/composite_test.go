package httplimit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// twoPolicyList is RateLimit-Policy for twoPolicies.
const twoPolicyList = `"per-second";q=2;w=1, "per-minute";q=3;w=60`

// Every response lists both policies in RateLimit-Policy. RateLimit lists
// each policy's service limit on an allowed request, the bound one first,
// each with its own r and t (a token's refill: 500 ms for per-second, 20 s
// for per-minute), and the bound one alone on a denial, with the
// Retry-After; the legacy fields are the bound policy's, but for
// RateLimit-Reset, the time until both are full. The bound policy moves
// from one to the other as the keys drain.
func TestCompositeFields(t *testing.T) {
	for _, kind := range composites {
		t.Run(kind.name, func(t *testing.T) {
			l, clock := kind.new(t)
			h, next := limited(t, l)

			steps := []struct {
				advance time.Duration
				code    int
				want    map[string][]string
				problem []string // the violated policies of a denial
			}{
				// per-second: 1 left; per-minute: 2 left, full in 20 s.
				{0, http.StatusOK, map[string][]string{
					"RateLimit-Limit":     {"2"},
					"RateLimit-Remaining": {"1"},
					"RateLimit-Reset":     {"20"},
					"RateLimit-Policy":    {twoPolicyList},
					"RateLimit":           {`"per-second";r=1;t=1, "per-minute";r=2;t=20`},
				}, nil},
				// per-second: 0 left; per-minute: 1 left, full in 40 s.
				{0, http.StatusOK, map[string][]string{
					"RateLimit-Limit":     {"2"},
					"RateLimit-Remaining": {"0"},
					"RateLimit-Reset":     {"40"},
					"RateLimit-Policy":    {twoPolicyList},
					"RateLimit":           {`"per-second";r=0;t=1, "per-minute";r=1;t=20`},
				}, nil},
				// per-second denies for 500 ms; per-minute is not charged.
				{0, http.StatusTooManyRequests, map[string][]string{
					"RateLimit-Limit":     {"2"},
					"RateLimit-Remaining": {"0"},
					"RateLimit-Reset":     {"1"},
					"RateLimit-Policy":    {twoPolicyList},
					"RateLimit":           {`"per-second";r=0;t=1`},
					"Retry-After":         {"1"},
				}, []string{"per-second"}},
				// 1 s later per-second is full again; per-minute binds
				// with 0 left, full in 59 s, its next unit in 19 s.
				{time.Second, http.StatusOK, map[string][]string{
					"RateLimit-Limit":     {"3"},
					"RateLimit-Remaining": {"0"},
					"RateLimit-Reset":     {"59"},
					"RateLimit-Policy":    {twoPolicyList},
					"RateLimit":           {`"per-minute";r=0;t=19, "per-second";r=1;t=1`},
				}, nil},
				// per-second would allow; per-minute denies for 19 s.
				{0, http.StatusTooManyRequests, map[string][]string{
					"RateLimit-Limit":     {"3"},
					"RateLimit-Remaining": {"0"},
					"RateLimit-Reset":     {"19"},
					"RateLimit-Policy":    {twoPolicyList},
					"RateLimit":           {`"per-minute";r=0;t=19`},
					"Retry-After":         {"19"},
				}, []string{"per-minute"}},
			}
			for i, step := range steps {
				clock.Advance(step.advance)
				w := do(h, "alice", "application/json")
				require.Equal(t, step.code, w.Code, "request %d", i)
				if kind.foreign && step.code == http.StatusOK {
					step.want["RateLimit"] = []string{withoutT(step.want["RateLimit"][0])}
				}
				assert.Equal(t, step.want, fields(w.Header()), "request %d", i)
				if step.problem != nil {
					var doc problemDoc
					require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc), "request %d", i)
					assert.Equal(t, step.problem, doc.ViolatedPolicies, "request %d", i)
				}
			}
			assert.Equal(t, int64(3), next.calls.Load())
		})
	}
}

func TestCompositeHeaderStyles(t *testing.T) {
	cases := []struct {
		style httplimit.HeaderStyle
		want  map[string][]string
	}{
		{httplimit.LegacyHeaders, map[string][]string{
			"RateLimit-Limit":     {"2"},
			"RateLimit-Remaining": {"1"},
			"RateLimit-Reset":     {"20"},
		}},
		{httplimit.IETFHeaders, map[string][]string{
			"RateLimit-Policy": {twoPolicyList},
			"RateLimit":        {`"per-second";r=1;t=1, "per-minute";r=2;t=20`},
		}},
	}
	for _, tc := range cases {
		l, _ := realComposite(t)
		h, _ := limited(t, l, httplimit.WithHeaderStyle(tc.style))
		w := do(h, "alice", "")
		require.Equal(t, http.StatusOK, w.Code)
		assert.Equal(t, tc.want, fields(w.Header()), "style %d", tc.style)
	}
}

// A cost above a policy's limit can never succeed: 413, naming that policy.
func TestCompositeCostAboveALimitIs413(t *testing.T) {
	for _, kind := range composites {
		t.Run(kind.name, func(t *testing.T) {
			l, _ := kind.new(t)
			var hooked []error
			h, next := limited(t, l,
				httplimit.WithCost(func(*http.Request) (int, error) { return 3, nil }),
				httplimit.WithOnError(func(_ *http.Request, err error) { hooked = append(hooked, err) }))
			w := do(h, "alice", "application/json")
			assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
			assert.Equal(t, map[string][]string{
				"RateLimit-Limit":  {"2"},
				"RateLimit-Policy": {twoPolicyList},
			}, fields(w.Header()))
			var doc problemDoc
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
			assert.Equal(t, "about:blank", doc.Type)
			assert.Equal(t, "Content Too Large", doc.Title)
			assert.Contains(t, doc.Detail, `policy "per-second"`)
			assert.Equal(t, int64(0), next.calls.Load())
			assert.Empty(t, hooked)
		})
	}
}

func TestCompositeDeniedHandlerGetsTheBoundResult(t *testing.T) {
	l, _ := composites[0].new(t)
	var got ratelimit.Result
	h, _ := limited(t, l, httplimit.WithDeniedHandler(func(w http.ResponseWriter, _ *http.Request, res ratelimit.Result) {
		got = res
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	for range 2 {
		require.Equal(t, http.StatusOK, do(h, "alice", "").Code)
	}
	w := do(h, "alice", "")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	// per-second's Limit and Remaining, the longest wait of the two.
	assert.Equal(t, ratelimit.Result{Limit: 2, RetryAfter: 500 * time.Millisecond, ResetAfter: 40 * time.Second}, got)
	assert.Equal(t, `"per-second";r=0;t=1`, w.Header().Get("RateLimit"))
}

// stubMulti is a ratelimit.Decider that answers fixed policies, Result,
// bound index and error.
type stubMulti struct {
	policies []ratelimit.NamedPolicy
	res      ratelimit.Result
	bound    int
	err      error
}

var _ ratelimit.Decider = (*stubMulti)(nil)

func (s *stubMulti) Policies(context.Context, string) ([]ratelimit.NamedPolicy, error) {
	return s.policies, nil
}

func (s *stubMulti) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	d, err := s.Decide(ctx, key, n)
	return d.Result, err
}

func (s *stubMulti) Decide(context.Context, string, int) (ratelimit.Decision, error) {
	d := ratelimit.Decision{Result: s.res, Policies: s.policies, PolicyIndex: s.bound, Enforced: s.res}
	if s.bound >= 0 && s.bound < len(s.policies) {
		d.Policy = s.policies[s.bound]
	}
	return d, s.err
}

// A limiter that says a policy index it does not have bound a decision has
// failed: the request fails open (or closed), the error goes to the hook.
func TestDecisionBoundOutOfRangeIsALimiterError(t *testing.T) {
	for _, bound := range []int{-1, 2, 7} {
		stub := &stubMulti{
			policies: []ratelimit.NamedPolicy{{Name: "a", Policy: ratelimit.Policy{Limit: 1}}, {Name: "b", Policy: ratelimit.Policy{Limit: 2}}},
			res:      ratelimit.Result{Allowed: true, Limit: 1},
			bound:    bound,
		}
		// A Decision that cannot be sent leaves the limit unknown: the
		// limiter's mistake, of class ErrCaller, answered 503 unless
		// WithPolicyErrorsPass.
		var log errorLog
		h, next := limited(t, stub, httplimit.WithOnError(log.hook))
		w := do(h, "k", "")
		assert.Equal(t, http.StatusServiceUnavailable, w.Code)
		assert.Equal(t, map[string][]string{"Retry-After": {"1"}}, fields(w.Header()))
		assert.Equal(t, int64(0), next.calls.Load())
		require.Len(t, log.errs, 1)
		assert.Contains(t, log.errs[0].Error(), "Decision named policy")
		assert.ErrorIs(t, log.errs[0], ratelimit.ErrInvalidConfig)

		h, next = limited(t, stub, httplimit.WithPolicyErrorsPass())
		w = do(h, "k", "")
		assert.Equal(t, http.StatusOK, w.Code)
		assert.Empty(t, fields(w.Header()))
		assert.Equal(t, int64(1), next.calls.Load())
	}

	// With an error too, the error is kept. The Decision of a call that
	// failed is not read, so a backend failure goes to the hook as it is,
	// and fails open; a cost above the limit, whose Decision names the
	// policy it exceeds, is a limiter error beside the bad index, of the
	// caller's class, so it answers 503.
	stub := &stubMulti{
		policies: []ratelimit.NamedPolicy{{Name: "a", Policy: ratelimit.Policy{Limit: 1}}, {Name: "b", Policy: ratelimit.Policy{Limit: 2}}},
		bound:    5,
		err:      errBackend,
	}
	var log errorLog
	h, _ := limited(t, stub, httplimit.WithOnError(log.hook))
	assert.Equal(t, http.StatusOK, do(h, "k", "").Code)
	require.Len(t, log.errs, 1)
	assert.ErrorIs(t, log.errs[0], errBackend)
	assert.Equal(t, "redis: connection refused", log.errs[0].Error())

	stub.err = fmt.Errorf("fake: %w", ratelimit.ErrCostExceedsLimit)
	w := do(h, "k", "")
	assert.Equal(t, http.StatusServiceUnavailable, w.Code)
	assert.Equal(t, map[string][]string{"Retry-After": {"1"}}, fields(w.Header()))
	require.Len(t, log.errs, 2)
	assert.ErrorIs(t, log.errs[1], ratelimit.ErrCostExceedsLimit)
	assert.Equal(t, "ratelimit: invalid configuration: httplimit: the limiter's Decision named policy 5 of 2, and: fake: ratelimit: cost exceeds limit", log.errs[1].Error())
}

func TestMultiPolicyBackendErrorFailsOpen(t *testing.T) {
	stub := &stubMulti{
		policies: []ratelimit.NamedPolicy{{Name: "a", Policy: ratelimit.Policy{Limit: 1}}, {Name: "b", Policy: ratelimit.Policy{Limit: 2}}},
		err:      errBackend,
	}
	var log errorLog
	h, next := limited(t, stub, httplimit.WithOnError(log.hook))
	w := do(h, "k", "")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Empty(t, fields(w.Header()))
	assert.Equal(t, int64(1), next.calls.Load())
	require.Len(t, log.errs, 1)
	assert.ErrorIs(t, log.errs[0], errBackend)
}

func TestMultiPolicyOptionsAndPolicies(t *testing.T) {
	two := []ratelimit.NamedPolicy{
		{Name: "per-second", Policy: ratelimit.Policy{Limit: 10, Window: time.Second}},
		{Name: "per-hour", Policy: ratelimit.Policy{Limit: 1000, Window: time.Hour}},
	}
	key := httplimit.KeyByHeader(keyHeader)
	bad := []struct {
		name     string
		policies []ratelimit.NamedPolicy
		opts     []httplimit.Option
		want     string
	}{
		{"WithPolicyName", two, []httplimit.Option{httplimit.WithPolicyName("x")}, "WithPolicyName names a limiter's one policy; this limiter (*httplimit_test.stubMulti) has 2"},
		{"WithPolicyWindow", two, []httplimit.Option{httplimit.WithPolicyWindow(time.Minute)}, "WithPolicyWindow sets a limiter's one policy window"},
		{"limit 0", []ratelimit.NamedPolicy{two[0], {Name: "b"}}, nil, `policy 1 ("b") has limit 0`},
		{"empty name", []ratelimit.NamedPolicy{two[0], {Policy: two[1].Policy}}, nil, "empty policy name (the limiter's policy 1)"},
		{"name not ASCII", []ratelimit.NamedPolicy{{Name: "pro-Sekunde\u00a0", Policy: two[0].Policy}, two[1]}, nil, "printable ASCII only (the limiter's policy 0)"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			m, err := httplimit.NewMiddleware(&stubMulti{policies: tc.policies}, key, tc.opts...)
			require.Error(t, err)
			assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, m)
		})
	}

	// Names are escaped as structured-field strings; a policy without a
	// window has no w.
	stub := &stubMulti{
		policies: []ratelimit.NamedPolicy{
			{Name: `a"b\c`, Policy: ratelimit.Policy{Limit: 10, Window: 1500 * time.Millisecond}},
			{Name: "no window", Policy: ratelimit.Policy{Limit: 7}},
			{Name: "per-day", Policy: ratelimit.Policy{Limit: 100000, Window: 24 * time.Hour}},
		},
		res:   ratelimit.Result{Allowed: true, Limit: 7, Remaining: 5, ResetAfter: 2500 * time.Millisecond},
		bound: 1,
	}
	h, _ := limited(t, stub)
	w := do(h, "k", "")
	assert.Equal(t, map[string][]string{
		"RateLimit-Limit":     {"7"},
		"RateLimit-Remaining": {"5"},
		"RateLimit-Reset":     {"3"},
		"RateLimit-Policy":    {`"a\"b\\c";q=10;w=2, "no window";q=7, "per-day";q=100000;w=86400`},
		"RateLimit":           {`"no window";r=5`}, // a Decider of another package tells no t
	}, fields(w.Header()))
}

// A Decider with one policy is a single-policy limiter under that
// policy's name, which WithPolicyName may change.
func TestMultiPolicyOfOnePolicy(t *testing.T) {
	stub := &stubMulti{
		policies: []ratelimit.NamedPolicy{{Name: "per-user", Policy: ratelimit.Policy{Limit: 10, Window: 5 * time.Second}}},
		res:      ratelimit.Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 500 * time.Millisecond},
	}
	cases := []struct {
		opts         []httplimit.Option
		policy, rate string
	}{
		{nil, `"per-user";q=10;w=5`, `"per-user";r=9`},
		{[]httplimit.Option{httplimit.WithPolicyName("renamed")}, `"renamed";q=10;w=5`, `"renamed";r=9`},
		{[]httplimit.Option{httplimit.WithPolicyWindow(time.Minute)}, `"per-user";q=10;w=60`, `"per-user";r=9`},
	}
	for _, tc := range cases {
		h, _ := limited(t, stub, tc.opts...)
		w := do(h, "k", "")
		assert.Equal(t, tc.policy, w.Header().Get("RateLimit-Policy"))
		assert.Equal(t, tc.rate, w.Header().Get("RateLimit"))
	}

	// A policy with no limit is no policy: the limit is learned from each
	// Result, as the middleware learns a foreign limiter's, and there is
	// no w.
	stub.policies[0].Limit = 0
	h, _ := limited(t, stub)
	w := do(h, "k", "")
	assert.Equal(t, `"per-user";q=10`, w.Header().Get("RateLimit-Policy"))

	// So is an empty list, under the default name.
	stub.policies = nil
	h, _ = limited(t, stub)
	w = do(h, "k", "")
	assert.Equal(t, `"default";q=10`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"default";r=9`, w.Header().Get("RateLimit"))
}
