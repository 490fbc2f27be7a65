package httplimit_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// problemDoc is the problem document a denial carries.
type problemDoc struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail"`
	ViolatedPolicies []string `json:"violated-policies"`
}

// exhausted returns a handler whose limiter, a token bucket of 2 refilling 1
// per 4 s, has no token left for key "k", and its wrapped handler.
func exhausted(t *testing.T, opts ...httplimit.Option) (http.Handler, *counter) {
	t.Helper()
	l, _ := tokenBucket(t, ratelimit.Every(4*time.Second), 2)
	h, next := limited(t, l, opts...)
	for range 2 {
		require.Equal(t, http.StatusOK, do(h, "k", "").Code)
	}
	return h, next
}

func TestDenialAsProblemJSON(t *testing.T) {
	for _, accept := range []string{
		"", // no Accept field
		"*/*",
		"application/json",
		"application/problem+json",
		"application/*",
		"text/html, application/json;q=0.9",
		"text/plain;q=0.5, application/json",
		"text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", // a browser
	} {
		t.Run(accept, func(t *testing.T) {
			h, next := exhausted(t)
			w := do(h, "k", accept)

			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "4", w.Header().Get("Retry-After"))
			assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			assert.Equal(t, "nosniff", w.Header().Get("X-Content-Type-Options"))
			var doc problemDoc
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
			assert.Equal(t, problemDoc{
				Type:             "https://iana.org/assignments/http-problem-types#quota-exceeded",
				Title:            "Quota Exceeded",
				Status:           429,
				Detail:           "The request exceeds the rate limit; retry after the number of seconds in Retry-After.",
				ViolatedPolicies: []string{"default"},
			}, doc)
			assert.Equal(t, int64(2), next.calls.Load(), "the handler is not called on a denial")
		})
	}
}

func TestDenialAsText(t *testing.T) {
	for _, accept := range []string{
		"text/plain",
		"text/*",
		"text/html",                          // neither type: text anyway
		"image/png",                          // neither type
		"application/json;q=0, */*",          // JSON refused
		"application/json;q=0.4, text/plain", // text preferred
		"TEXT/PLAIN",
	} {
		t.Run(accept, func(t *testing.T) {
			h, next := exhausted(t)
			w := do(h, "k", accept)

			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "4", w.Header().Get("Retry-After"))
			assert.Equal(t, "text/plain; charset=utf-8", w.Header().Get("Content-Type"))
			assert.Equal(t, "Quota Exceeded: The request exceeds the rate limit; retry after the number of seconds in Retry-After.\n", w.Body.String())
			assert.Equal(t, int64(2), next.calls.Load())
		})
	}
}

func TestDenialOverARealConnection(t *testing.T) {
	h, next := exhausted(t)
	srv := httptest.NewServer(h)
	defer srv.Close()

	get := func(accept string) (*http.Response, string) {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set(keyHeader, "k")
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}

	resp, body := get("")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "4", resp.Header.Get("Retry-After"))
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.Equal(t, `"default";r=0;t=4`, resp.Header.Get("RateLimit"))
	assert.Contains(t, body, `"type":"https://iana.org/assignments/http-problem-types#quota-exceeded"`)

	resp, body = get("text/plain")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.True(t, strings.HasPrefix(body, "Quota Exceeded: "), body)
	assert.Equal(t, int64(2), next.calls.Load())
}

func TestRetryAfterRoundsUp(t *testing.T) {
	cases := []struct {
		retry time.Duration
		want  string
	}{
		{0, "1"}, // a denial never says "retry now"
		{time.Nanosecond, "1"},
		{time.Second, "1"},
		{time.Second + time.Nanosecond, "2"},
		{1500 * time.Millisecond, "2"},
		{time.Hour, "3600"},
	}
	for _, tc := range cases {
		t.Run(tc.retry.String(), func(t *testing.T) {
			stub := &stubLimiter{res: ratelimit.Result{Limit: 5, RetryAfter: tc.retry, ResetAfter: tc.retry}}
			h, _ := limited(t, stub)
			w := do(h, "k", "")
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, tc.want, w.Header().Get("Retry-After"))
		})
	}
}

func TestPolicyNameInProblem(t *testing.T) {
	h, _ := exhausted(t, httplimit.WithPolicyName(`per "user"`))
	w := do(h, "k", "application/json")
	var doc problemDoc
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
	assert.Equal(t, []string{`per "user"`}, doc.ViolatedPolicies)
	assert.Equal(t, `"per \"user\"";q=2;w=8`, w.Header().Get("RateLimit-Policy"))
}

func TestDeniedHandlerGetsResultAndFields(t *testing.T) {
	var got ratelimit.Result
	custom := func(w http.ResponseWriter, _ *http.Request, res ratelimit.Result) {
		got = res
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, "<p>slow down</p>")
	}
	h, next := exhausted(t, httplimit.WithDeniedHandler(custom))
	w := do(h, "k", "")

	assert.Equal(t, ratelimit.Result{Allowed: false, Limit: 2, Remaining: 0, RetryAfter: 4 * time.Second, ResetAfter: 8 * time.Second}, got)
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "<p>slow down</p>", w.Body.String())
	assert.Equal(t, "text/html", w.Header().Get("Content-Type"))
	assert.Equal(t, map[string][]string{
		"RateLimit-Limit":     {"2"},
		"RateLimit-Remaining": {"0"},
		"RateLimit-Reset":     {"4"},
		"RateLimit-Policy":    {`"default";q=2;w=8`},
		"RateLimit":           {`"default";r=0;t=4`},
		"Retry-After":         {"4"},
	}, fields(w.Header()))
	assert.Equal(t, int64(2), next.calls.Load())
}

func TestCostAboveTheLimitIs413(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(2), 10)
	var hooked []error
	h, next := limited(t, l,
		httplimit.WithCost(func(*http.Request) (int, error) { return 11, nil }),
		httplimit.WithOnError(func(_ *http.Request, err error) { hooked = append(hooked, err) }),
		httplimit.WithFailClosed(0))
	for _, tc := range []struct{ accept, contentType string }{
		{"", "application/problem+json"},
		{"text/plain", "text/plain; charset=utf-8"},
	} {
		w := do(h, "k", tc.accept)
		assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
		assert.Equal(t, tc.contentType, w.Header().Get("Content-Type"))
		assert.Equal(t, map[string][]string{
			"RateLimit-Limit":  {"10"},
			"RateLimit-Policy": {`"default";q=10;w=5`},
		}, fields(w.Header()), "no Retry-After: waiting cannot help")
	}
	w := do(h, "k", "application/json")
	var doc problemDoc
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
	// The draft's quota-exceeded is registered for 429; a 413 is of type
	// about:blank, and names its policy in its detail.
	assert.Equal(t, "about:blank", doc.Type)
	assert.Equal(t, "Content Too Large", doc.Title)
	assert.Equal(t, 413, doc.Status)
	assert.Contains(t, doc.Detail, `policy "default"`)
	assert.Empty(t, doc.ViolatedPolicies)

	assert.Equal(t, int64(0), next.calls.Load())
	assert.Empty(t, hooked, "a cost above the limit is not a limiter failure")

	// Nothing was taken.
	res, err := l.Allow(context.Background(), "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 10, res.Remaining)
}
