package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// fields returns the rate-limit fields of h that are set, each with all its
// values joined.
func fields(h http.Header) map[string][]string {
	got := map[string][]string{}
	for _, name := range rateLimitFields {
		if v := h.Values(name); v != nil {
			got[name] = v
		}
	}
	return got
}

func TestFieldsOnATokenBucketDrainingAndRefilling(t *testing.T) {
	l, clock := tokenBucket(t, ratelimit.PerSecond(2), 10) // full again 0.5 s after each token taken
	h, next := limited(t, l)

	for i := 1; i <= 10; i++ {
		w := do(h, "alice", "")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i)
		remaining := strconv.Itoa(10 - i)
		reset := strconv.Itoa((i + 1) / 2) // i × 0.5 s, rounded up
		assert.Equal(t, map[string][]string{
			"RateLimit-Limit":     {"10"},
			"RateLimit-Remaining": {remaining},
			"RateLimit-Reset":     {reset}, // until full, as the legacy field always meant
			"RateLimit-Policy":    {`"default";q=10;w=5`},
			"RateLimit":           {`"default";r=` + remaining + ";t=1"}, // the next token in 0.5 s, rounded up
		}, fields(w.Header()), "request %d", i)
	}

	w := do(h, "alice", "")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, map[string][]string{
		"RateLimit-Limit":     {"10"},
		"RateLimit-Remaining": {"0"},
		"RateLimit-Reset":     {"1"}, // on a denial, the Retry-After
		"RateLimit-Policy":    {`"default";q=10;w=5`},
		"RateLimit":           {`"default";r=0;t=1`},
		"Retry-After":         {"1"}, // 0.5 s, rounded up
	}, fields(w.Header()))

	// 1.25 s later: 2.5 tokens back, 1.5 once one is taken, 4.25 s to
	// full and 0.25 s to the next.
	clock.Advance(1250 * time.Millisecond)
	w = do(h, "alice", "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"default";r=1;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, "1", w.Header().Get("RateLimit-Remaining"))
	assert.Equal(t, "5", w.Header().Get("RateLimit-Reset"))

	// Another key has its own bucket.
	w = do(h, "bob", "")
	assert.Equal(t, `"default";r=9;t=1`, w.Header().Get("RateLimit"))
	assert.Equal(t, int64(12), next.calls.Load())
}

func TestPolicyWindowFromEachLimiter(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	gcra, err := ratelimit.NewGCRA(10, 5*time.Second, ratelimit.WithClock(clock))
	require.NoError(t, err)
	window, err := ratelimit.NewFixedWindow(100, time.Minute, ratelimit.WithClock(clock))
	require.NoError(t, err)
	slowBucket, err := ratelimit.NewTokenBucket(ratelimit.PerMinute(24), 3, ratelimit.WithClock(clock)) // 7.5 s to fill
	require.NoError(t, err)
	fastBucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1000), 1, ratelimit.WithClock(clock)) // 1 ms to fill
	require.NoError(t, err)
	big, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e9), 1_000_000_000, ratelimit.WithClock(clock))
	require.NoError(t, err)
	stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 7, Remaining: 6, ResetAfter: 1500 * time.Millisecond}}
	timed := &fillTimeStub{stubLimiter: stubLimiter{res: stub.res}}

	cases := []struct {
		name              string
		limiter           ratelimit.Limiter
		opts              []httplimit.Option
		policy, ratelimit string
	}{
		{"GCRA", gcra, nil, `"default";q=10;w=5`, `"default";r=9;t=1`},
		{"fixed window", window, nil, `"default";q=100;w=60`, `"default";r=99;t=60`},
		{"fill time rounded up", slowBucket, nil, `"default";q=3;w=8`, `"default";r=2;t=3`},
		{"sub-second fill time is 1", fastBucket, nil, `"default";q=1;w=1`, `"default";r=0;t=1`},
		{"large numbers", big, nil, `"default";q=1000000000;w=1`, `"default";r=999999999;t=1`},
		// A limiter of another package tells no effective window: no t.
		{"limiter of another package: no w", stub, nil, `"default";q=7`, `"default";r=6`},
		{"its FillTime and Window are not read", timed, nil, `"default";q=7`, `"default";r=6`},
		{"WithPolicyWindow sets w", stub, []httplimit.Option{httplimit.WithPolicyWindow(90 * time.Second)}, `"default";q=7;w=90`, `"default";r=6`},
		{"WithPolicyWindow overrides", gcra, []httplimit.Option{httplimit.WithPolicyWindow(1500 * time.Millisecond)}, `"default";q=10;w=2`, `"default";r=9;t=1`},
		{"WithPolicyWindow(0) leaves w out", gcra, []httplimit.Option{httplimit.WithPolicyWindow(0)}, `"default";q=10`, `"default";r=9;t=1`},
		{"policy name", gcra, []httplimit.Option{httplimit.WithPolicyName("per-user")}, `"per-user";q=10;w=5`, `"per-user";r=9;t=1`},
		{"policy name escaped", gcra, []httplimit.Option{httplimit.WithPolicyName(`a"b\c`)}, `"a\"b\\c";q=10;w=5`, `"a\"b\\c";r=9;t=1`},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := limited(t, tc.limiter, tc.opts...)
			w := do(h, "key"+strconv.Itoa(i), "")
			require.Equal(t, http.StatusOK, w.Code)
			assert.Equal(t, []string{tc.policy}, w.Header().Values("RateLimit-Policy"))
			assert.Equal(t, []string{tc.ratelimit}, w.Header().Values("RateLimit"))
		})
	}
}

// fillTimeStub is a limiter of another package with FillTime and Window
// methods, which the middleware does not read: it sends the policy its
// Decision tells, the Result's limit alone.
type fillTimeStub struct{ stubLimiter }

func (*fillTimeStub) FillTime() time.Duration { return 5 * time.Second }

func (*fillTimeStub) Window() time.Duration { return time.Minute }

func TestHeaderStyles(t *testing.T) {
	cases := []struct {
		style httplimit.HeaderStyle
		want  []string
	}{
		{httplimit.BothHeaders, []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "RateLimit-Policy", "RateLimit"}},
		{httplimit.LegacyHeaders, []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}},
		{httplimit.IETFHeaders, []string{"RateLimit-Policy", "RateLimit"}},
	}
	for _, tc := range cases {
		t.Run(strconv.Itoa(int(tc.style)), func(t *testing.T) {
			l, _ := tokenBucket(t, ratelimit.Every(2*time.Second), 1)
			h, _ := limited(t, l, httplimit.WithHeaderStyle(tc.style))

			w := do(h, "k", "")
			require.Equal(t, http.StatusOK, w.Code)
			assert.ElementsMatch(t, tc.want, keys(fields(w.Header())))

			w = do(h, "k", "")
			require.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.ElementsMatch(t, append(tc.want, "Retry-After"), keys(fields(w.Header())))
			assert.Equal(t, "2", w.Header().Get("Retry-After"))
		})
	}
}

func TestLegacyOnlyValues(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(1), 120) // 2 minutes to fill
	h, _ := limited(t, l, httplimit.WithHeaderStyle(httplimit.LegacyHeaders))
	w := do(h, "k", "")
	assert.Equal(t, map[string][]string{
		"RateLimit-Limit":     {"120"},
		"RateLimit-Remaining": {"119"},
		"RateLimit-Reset":     {"1"},
	}, fields(w.Header()))
}

func TestOutOfRangeResultsAreClamped(t *testing.T) {
	stub := &stubLimiter{res: ratelimit.Result{Allowed: false, Limit: -1, Remaining: -5, RetryAfter: -time.Second, ResetAfter: -time.Hour}}
	h, next := limited(t, stub)
	w := do(h, "k", "")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, map[string][]string{
		// An unknown limit is not sent; the reset agrees with Retry-After.
		"RateLimit-Remaining": {"0"},
		"RateLimit-Reset":     {"1"},
		"RateLimit":           {`"default";r=0;t=1`},
		"Retry-After":         {"1"},
	}, fields(w.Header()))
	assert.Equal(t, int64(0), next.calls.Load())
}

// The fields' values share one backing array; a handler appending to one
// must not change another.
func TestHandlerAppendingToFieldsChangesNoOther(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(2), 10)
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader))
	require.NoError(t, err)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for _, name := range rateLimitFields[:5] {
			w.Header().Add(name, "extra")
		}
	}))
	w := do(h, "k", "")
	assert.Equal(t, map[string][]string{
		"RateLimit-Limit":     {"10", "extra"},
		"RateLimit-Remaining": {"9", "extra"},
		"RateLimit-Reset":     {"1", "extra"},
		"RateLimit-Policy":    {`"default";q=10;w=5`, "extra"},
		"RateLimit":           {`"default";r=9;t=1`, "extra"},
	}, fields(w.Header()))
}

func TestFieldsOverARealConnection(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(2), 10)
	h, _ := limited(t, l)
	srv := httptest.NewServer(h)
	defer srv.Close()

	for range 3 {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set(keyHeader, "alice")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set(keyHeader, "alice")
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()

	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, map[string][]string{
		"RateLimit-Limit":     {"10"},
		"RateLimit-Remaining": {"6"},
		"RateLimit-Reset":     {"2"},
		"RateLimit-Policy":    {`"default";q=10;w=5`},
		"RateLimit":           {`"default";r=6;t=1`},
	}, fields(resp.Header))
}

// keys returns m's keys.
func keys(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A long policy name does not fit the middleware's usual buffer; the values
// must come out the same.
func TestLongPolicyName(t *testing.T) {
	name := strings.Repeat("per-tenant-", 12)
	stub := &stubLimiter{res: ratelimit.Result{Limit: 1_000_000_000, Remaining: 999_999_999, RetryAfter: 90 * time.Second, ResetAfter: 100 * time.Hour}}
	h, _ := limited(t, stub, httplimit.WithPolicyName(name), httplimit.WithPolicyWindow(1000*time.Hour))
	w := do(h, "k", "")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, map[string][]string{
		"RateLimit-Limit":     {"1000000000"},
		"RateLimit-Remaining": {"999999999"},
		"RateLimit-Reset":     {"90"},
		"RateLimit-Policy":    {`"` + name + `";q=1000000000;w=3600000`},
		"RateLimit":           {`"` + name + `";r=999999999;t=90`},
		"Retry-After":         {"90"},
	}, fields(w.Header()))
}

// The values that depend on the limit only are remembered for the first
// limit seen; a limiter whose limit differs by key (tiers) must still get
// each response's own.
func TestLimitThatVariesByKey(t *testing.T) {
	stub := &stubLimiter{}
	h, _ := limited(t, stub, httplimit.WithPolicyWindow(time.Minute))
	for _, limit := range []int{10, 1000, 10, 7, 1000} {
		stub.mu.Lock()
		stub.res = ratelimit.Result{Allowed: true, Limit: limit, Remaining: limit - 1, ResetAfter: time.Second}
		stub.mu.Unlock()
		q, r := strconv.Itoa(limit), strconv.Itoa(limit-1)
		w := do(h, "k", "")
		require.Equal(t, http.StatusOK, w.Code, "limit %d", limit)
		assert.Equal(t, map[string][]string{
			"RateLimit-Limit":     {q},
			"RateLimit-Remaining": {r},
			"RateLimit-Reset":     {"1"},
			"RateLimit-Policy":    {`"default";q=` + q + ";w=60"},
			"RateLimit":           {`"default";r=` + r}, // a limiter of another package tells no t
		}, fields(w.Header()), "limit %d", limit)
	}
}
