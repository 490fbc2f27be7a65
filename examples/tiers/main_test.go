package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// logLines collects what the service logs.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// with returns the lines that start with prefix.
func (l *logLines) with(prefix string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.HasPrefix(line, prefix) {
			out = append(out, line)
		}
	}
	return out
}

// testService is the service on a clock that stands still until the test
// moves it, with the built-in plans.
type testService struct {
	*service
	clock *ratelimittest.Clock
	log   *logLines
}

func newTestService(t *testing.T) *testService {
	t.Helper()
	st, _, err := loadPlans("")
	require.NoError(t, err)
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	log := &logLines{}
	svc, err := newService(config{store: st, clock: clock, logf: log.logf})
	require.NoError(t, err)
	return &testService{service: svc, clock: clock, log: log}
}

// get sends GET /v1/hello with apiKey as its bearer token (none when empty)
// from the client address ip.
func get(t *testing.T, h http.Handler, apiKey, ip string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "/v1/hello", nil)
	r.RemoteAddr = ip + ":40000"
	if apiKey != "" {
		r.Header.Set("Authorization", "Bearer "+apiKey)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// setPlan sends the admin request that moves the customer key with body.
func setPlan(t *testing.T, h http.Handler, key, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/admin/customers/"+key+"/plan", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// allowedInARow sends requests for apiKey, each from an address of its own
// so that the shadow limit logs nothing, until one is denied, and returns
// how many were allowed, and the denial.
func allowedInARow(t *testing.T, h http.Handler, apiKey string) (int, *httptest.ResponseRecorder) {
	t.Helper()
	for i := 0; ; i++ {
		w := get(t, h, apiKey, fmt.Sprintf("10.0.%d.%d", i/256, i%256))
		if w.Code != http.StatusOK {
			require.Equal(t, http.StatusTooManyRequests, w.Code, w.Body.String())
			return i, w
		}
		require.Less(t, i, 5000, "never denied")
	}
}

// remaining returns RateLimit-Remaining of a response.
func remaining(t *testing.T, w *httptest.ResponseRecorder) int {
	t.Helper()
	n, err := strconv.Atoi(w.Header().Get("RateLimit-Remaining"))
	require.NoError(t, err, "RateLimit-Remaining %q", w.Header().Get("RateLimit-Remaining"))
	return n
}

// detail returns the detail of a problem document.
func detail(t *testing.T, w *httptest.ResponseRecorder) string {
	t.Helper()
	var p struct {
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), w.Body.String())
	assert.Equal(t, w.Code, p.Status)
	return p.Detail
}

// Each customer gets its plan's limit in a burst, then 429 with the wait
// for one more request: a sixtieth of a minute per plan's limit.
func TestPlanLimits(t *testing.T) {
	s := newTestService(t)
	for _, c := range []struct {
		key        string
		limit      int
		retryAfter string
	}{
		{"key-alice", 10, "6"},   // free: one every 6 s
		{"key-bob", 100, "1"},    // pro: one every 0.6 s, rounded up
		{"key-carol", 1000, "1"}, // enterprise: one every 60 ms
		{"key-dave", 10, "6"},    // free too, with a limit of its own
	} {
		n, w := allowedInARow(t, s, c.key)
		assert.Equal(t, c.limit, n, c.key)
		assert.Equal(t, c.retryAfter, w.Header().Get("Retry-After"), c.key)
		assert.Equal(t, 0, remaining(t, w), c.key)
		// The fields show the customer's own plan.
		assert.Equal(t, strconv.Itoa(c.limit), w.Header().Get("RateLimit-Limit"), c.key)
		assert.Equal(t, fmt.Sprintf(`"default";q=%d;w=60`, c.limit), w.Header().Get("RateLimit-Policy"), c.key)
		assert.Equal(t, `"default";r=0;t=`+c.retryAfter, w.Header().Get("RateLimit"), c.key)
	}
	assert.Empty(t, s.log.with("shadow:"), "one request per address")

	// Time refills each by its plan: in 6 s, free gets 1, pro 10.
	s.clock.Advance(6 * time.Second)
	n, _ := allowedInARow(t, s, "key-alice")
	assert.Equal(t, 1, n)
	n, _ = allowedInARow(t, s, "key-bob")
	assert.Equal(t, 10, n)
}

func TestHelloAnswersThePlan(t *testing.T) {
	s := newTestService(t)
	w := get(t, s, "key-bob", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.JSONEq(t, `{"plan":"pro","limit":100,"window":"1m0s","message":"hello from the API"}`, w.Body.String())
	assert.Equal(t, 99, remaining(t, w))

	// X-API-Key works as well as a bearer token.
	r := httptest.NewRequest(http.MethodGet, "/v1/hello", nil)
	r.Header.Set("X-API-Key", "key-bob")
	w = httptest.NewRecorder()
	s.ServeHTTP(w, r)
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, 98, remaining(t, w))
}

// A request without a customer's API key is answered 401, without asking
// the limiter.
func TestUnauthorized(t *testing.T) {
	s := newTestService(t)
	for _, key := range []string{"", "key-zed", strings.Repeat("k", maxAPIKey+1)} {
		w := get(t, s, key, "192.0.2.1")
		require.Equal(t, http.StatusUnauthorized, w.Code, key)
		assert.Equal(t, `Bearer realm="tiers"`, w.Header().Get("WWW-Authenticate"))
		assert.Empty(t, w.Header().Get("RateLimit-Remaining"))
		want := errUnknownAPIKey.Error()
		if key == "" || len(key) > maxAPIKey {
			want = "an API key is required: send Authorization: Bearer <key> or X-API-Key: <key>"
		}
		assert.Equal(t, want, detail(t, w))
	}
}

// A free customer that has used all of its 10, moved to pro, has 90 left at
// once: what it used is kept, under the new limit.
func TestUpgradeKeepsWhatWasUsed(t *testing.T) {
	s := newTestService(t)
	n, _ := allowedInARow(t, s, "key-alice")
	require.Equal(t, 10, n)

	w := setPlan(t, s, "key-alice", `{"plan":"pro"}`)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.JSONEq(t, `{"customer":"key-alice","plan":"pro","previous":"free","limit":100,"window":"1m0s"}`, w.Body.String())
	assert.Equal(t, []string{"admin: customer key-alice moved from plan free to pro (100 per 1m0s)"}, s.log.with("admin:"))

	w = get(t, s, "key-alice", "192.0.2.1")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, 89, remaining(t, w), "90 left before this request")
	assert.Equal(t, "100", w.Header().Get("RateLimit-Limit"))
	assert.Equal(t, `"default";q=100;w=60`, w.Header().Get("RateLimit-Policy"))
	n, w = allowedInARow(t, s, "key-alice")
	assert.Equal(t, 89, n)
	assert.Equal(t, "1", w.Header().Get("Retry-After"), "one every 0.6 s")

	// Another customer on free is unaffected.
	n, _ = allowedInARow(t, s, "key-dave")
	assert.Equal(t, 10, n)
}

// A pro customer that has used 50, moved to free, is in debt by 40: denied,
// told to wait 41 × 6 s for its next request. Moved back to pro, it has the
// 50 it had left.
func TestDowngradeKeepsWhatWasUsed(t *testing.T) {
	s := newTestService(t)
	for i := range 50 {
		require.Equal(t, http.StatusOK, get(t, s, "key-bob", fmt.Sprintf("10.1.0.%d", i)).Code)
	}
	require.Equal(t, http.StatusOK, setPlan(t, s, "key-bob", `{"plan":"free"}`).Code)

	w := get(t, s, "key-bob", "192.0.2.1")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "246", w.Header().Get("Retry-After"))
	assert.Equal(t, 0, remaining(t, w))
	assert.Equal(t, `"default";q=10;w=60`, w.Header().Get("RateLimit-Policy"))

	require.Equal(t, http.StatusOK, setPlan(t, s, "key-bob", `{"plan":"pro"}`).Code)
	n, _ := allowedInARow(t, s, "key-bob")
	assert.Equal(t, 50, n)
}

// The per-IP burst limit never denies: every request from one address is
// allowed by it, and each one past its burst is logged once.
func TestShadowLimitLogsAndNeverDenies(t *testing.T) {
	s := newTestService(t)
	for range 30 {
		w := get(t, s, "key-carol", "203.0.113.7")
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	}
	lines := s.log.with("shadow:")
	require.Len(t, lines, 30-ipBurst)
	for _, line := range lines {
		assert.Equal(t, "shadow: would deny 203.0.113.7: per-ip limit of 20 per 4s exhausted, retry in 200ms", line)
	}

	// Requests without an API key count too, and are answered 401 by the
	// plan limit, not by the shadow limit.
	w := get(t, s, "", "203.0.113.7")
	assert.Equal(t, http.StatusUnauthorized, w.Code)
	assert.Len(t, s.log.with("shadow:"), 30-ipBurst+1)

	// Another address has a burst of its own; time refills the first.
	for range ipBurst {
		require.Equal(t, http.StatusOK, get(t, s, "key-carol", "203.0.113.8").Code)
	}
	s.clock.Advance(time.Second)
	for range 5 {
		require.Equal(t, http.StatusOK, get(t, s, "key-carol", "203.0.113.7").Code)
	}
	assert.Len(t, s.log.with("shadow:"), 30-ipBurst+1)
	assert.False(t, s.perIP.Enforcing(), "never enforced")
}

// The plan limit's denials are the only 429s, whatever the shadow limit
// would have said.
func TestShadowLimitUnderThePlanLimit(t *testing.T) {
	s := newTestService(t)
	codes := map[int]int{}
	for range 15 {
		codes[get(t, s, "key-alice", "203.0.113.9").Code]++
	}
	assert.Equal(t, map[int]int{http.StatusOK: 10, http.StatusTooManyRequests: 5}, codes)
	assert.Empty(t, s.log.with("shadow:"), "15 of a burst of 20")
}

// Bad admin requests are answered 400 (404 for an unknown customer, 413
// for a large body) with a message that says what is wrong, and change
// nothing.
func TestAdminBadInput(t *testing.T) {
	s := newTestService(t)
	for _, c := range []struct {
		key, body string
		status    int
		detail    string
	}{
		{"key-alice", `{"plan":"platinum"}`, 400, `unknown plan "platinum": the plans are enterprise, free, pro`},
		{"key-alice", `{"plan":""}`, 400, `the body names no plan: send {"plan": "<name>"}, one of enterprise, free, pro`},
		{"key-alice", `{}`, 400, `the body names no plan: send {"plan": "<name>"}, one of enterprise, free, pro`},
		{"key-alice", ``, 400, `the body is empty: send {"plan": "<name>"}, one of enterprise, free, pro`},
		{"key-alice", `pro`, 400, `the body must be one JSON object such as {"plan": "pro"}: invalid character 'p' looking for beginning of value`},
		{"key-alice", `{"plan":"pro","seats":3}`, 400, `the body must be one JSON object such as {"plan": "pro"}: json: unknown field "seats"`},
		{"key-alice", `{"plan":"pro"} {"plan":"free"}`, 400, `the body must be one JSON object such as {"plan": "pro"}: more than one JSON value`},
		{"key-alice", `{"plan":7}`, 400, ``},
		{"key-zed", `{"plan":"pro"}`, 404, `unknown customer: no customer has the API key "key-zed"`},
		{"key-alice", `{"plan":"` + strings.Repeat("p", maxAdminBody) + `"}`, 413, `the body must be at most 1024 bytes`},
	} {
		w := setPlan(t, s, c.key, c.body)
		require.Equal(t, c.status, w.Code, "%s: %s", c.body, w.Body.String())
		assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
		got := detail(t, w)
		if c.detail != "" {
			assert.Equal(t, c.detail, got, c.body)
		} else {
			assert.Contains(t, got, "the body must be one JSON object")
		}
	}
	plan, _ := s.store.planOf("key-alice")
	assert.Equal(t, "free", plan)
	assert.Empty(t, s.log.with("admin:"))

	// Only POST changes a plan.
	r := httptest.NewRequest(http.MethodGet, "/admin/customers/key-alice/plan", nil)
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)
}

// Plans change while requests are decided, from many goroutines: the race
// detector checks the store. Every writer's last write (i = 199) is "pro",
// so that is the plan left, whichever writer finishes last.
func TestConcurrentPlanChanges(t *testing.T) {
	s := newTestService(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				if g%2 == 0 {
					plan := []string{"free", "pro", "enterprise"}[i%3]
					assert.Equal(t, http.StatusOK, setPlan(t, s, "key-bob", `{"plan":"`+plan+`"}`).Code)
					continue
				}
				code := get(t, s, "key-bob", fmt.Sprintf("10.2.%d.%d", g, i)).Code
				assert.Contains(t, []int{http.StatusOK, http.StatusTooManyRequests}, code)
			}
		})
	}
	wg.Wait()
	plan, ok := s.store.planOf("key-bob")
	require.True(t, ok)
	assert.Equal(t, "pro", plan)
	p, err := s.store.policy(t.Context(), "key-bob")
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Policy{Limit: 100, Window: time.Minute}, p)
}

// With REDIS_ADDR set the limiters keep their state in Redis: the same
// plans, and the same upgrade keeping what was used.
func TestRedisUpgradeKeepsWhatWasUsed(t *testing.T) {
	t.Setenv("REDIS_ADDR", "") // the embedded server
	rdb, err := demoredis.Open()
	require.NoError(t, err)
	t.Cleanup(rdb.Close)
	rdb.FreezeClock()
	st, _, err := loadPlans("")
	require.NoError(t, err)
	log := &logLines{}
	svc, err := newService(config{store: st, redis: rdb.Client, logf: log.logf})
	require.NoError(t, err)

	n, w := allowedInARow(t, svc, "key-alice")
	require.Equal(t, 10, n)
	assert.Equal(t, "6", w.Header().Get("Retry-After"))
	require.Equal(t, http.StatusOK, setPlan(t, svc, "key-alice", `{"plan":"pro"}`).Code)
	n, _ = allowedInARow(t, svc, "key-alice")
	assert.Equal(t, 90, n)

	for range 25 {
		require.Equal(t, http.StatusOK, get(t, svc, "key-carol", "203.0.113.7").Code)
	}
	assert.Len(t, log.with("shadow: would deny 203.0.113.7"), 25-ipBurst)
	assert.Empty(t, log.with("plan limit failed"))
}

func TestLoadPlans(t *testing.T) {
	st, source, err := loadPlans("")
	require.NoError(t, err)
	assert.Equal(t, "the built-in plans.json", source)
	assert.Equal(t, "enterprise 1000/1m0s, free 10/1m0s, pro 100/1m0s", st.describe())
	assert.Equal(t, ratelimit.Policy{Limit: 10, Window: time.Minute}, st.defaultPolicy())

	// PLANS names a file of one's own.
	path := filepath.Join(t.TempDir(), "plans.json")
	require.NoError(t, os.WriteFile(path, []byte(`{
		"default_plan": "trial",
		"plans": {"trial": {"limit": 3, "window": "10s"}, "team": {"limit": 50, "window": "1h"}},
		"customers": {"k1": "team"}
	}`), 0o600))
	st, source, err = loadPlans(path)
	require.NoError(t, err)
	assert.Equal(t, path, source)
	plan, ok := st.planOf("k1")
	assert.True(t, ok)
	assert.Equal(t, "team", plan)
	svc, err := newService(config{store: st, clock: ratelimittest.NewClock(time.Unix(0, 0)), logf: t.Logf})
	require.NoError(t, err)
	n, _ := allowedInARow(t, svc, "k1")
	assert.Equal(t, 50, n)

	_, _, err = loadPlans(filepath.Join(t.TempDir(), "missing.json"))
	require.ErrorIs(t, err, fs.ErrNotExist)
}

func TestParsePlansRefusesBadFiles(t *testing.T) {
	for _, c := range []struct{ file, err string }{
		{`{`, "plans: unexpected EOF"},
		{`{"default_plan":"free","plans":{}}`, "plans: no plans"},
		{`{"default_plan":"gold","plans":{"free":{"limit":1,"window":"1m"}}}`, `plans: default_plan "gold" is not one of the plans (free)`},
		{`{"default_plan":"free","plans":{"free":{"limit":0,"window":"1m"}}}`, `plans: plan "free": `},
		{`{"default_plan":"free","plans":{"free":{"limit":1,"window":"soon"}}}`, `plans: plan "free": window: `},
		{`{"default_plan":"free","plans":{"free":{"limit":1,"window":"-1m"}}}`, `plans: plan "free": `},
		{`{"default_plan":"free","plans":{"free":{"limit":1,"window":"1m"}},"customers":{"k":"pro"}}`, `plans: customer "k": unknown plan "pro" (the plans are free)`},
		{`{"default_plan":"free","plans":{"free":{"limit":1,"window":"1m"}},"customers":{"a b":"free"}}`, `plans: customer "a b": an API key must not hold spaces`},
		{`{"default_plan":"free","plans":{"free":{"limit":1,"window":"1m"}},"tiers":{}}`, `plans: json: unknown field "tiers"`},
	} {
		_, err := parsePlans([]byte(c.file))
		require.Error(t, err, c.file)
		assert.Contains(t, err.Error(), c.err, c.file)
	}
}
