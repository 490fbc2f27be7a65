package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
)

// bothPolicies is the RateLimit-Policy of every decided response.
const bothPolicies = `"requests";q=5;w=60, "tokens";q=2000;w=60`

// tokensPerMinute is the free plan's tokens a minute.
const tokensPerMinute = 2000

// newTestGateway returns one replica's handler on an embedded Redis whose
// clock stands still until the test moves it, and that Redis.
func newTestGateway(t *testing.T) (http.Handler, *demoredis.Redis) {
	t.Helper()
	t.Setenv("REDIS_ADDR", "") // always the embedded server
	rdb, err := demoredis.Open()
	require.NoError(t, err)
	t.Cleanup(rdb.Close)
	rdb.FreezeClock()
	r, err := newReplica(rdb.Client, replicaConfig{ID: "replica-0", Replicas: 1, Logf: t.Logf})
	require.NoError(t, err)
	require.NoError(t, r.start(context.Background()))
	return r.handler, rdb
}

// chat returns the JSON body of a request to model with one user message
// of content and the given max_tokens.
func chat(model, content string, maxTokens int) string {
	b, _ := json.Marshal(map[string]any{
		"model":      model,
		"max_tokens": maxTokens,
		"messages":   []map[string]string{{"role": "user", "content": content}},
	})
	return string(b)
}

// post sends body to the gateway with apiKey as its bearer token (none
// when apiKey is empty) and returns the response.
func post(t *testing.T, h http.Handler, apiKey, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		r.Header.Set("Authorization", "Bearer "+apiKey)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// usageOf returns the usage block of a completion response.
func usageOf(t *testing.T, w *httptest.ResponseRecorder) usage {
	t.Helper()
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var c completion
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &c))
	require.Len(t, c.Choices, 1)
	return c.Usage
}

// boundItem returns the first item of a response's RateLimit field: the
// policy that bound the decision, its units left and its effective window
// (an allowed response lists the other policy after it).
func boundItem(w *httptest.ResponseRecorder) string {
	first, _, _ := strings.Cut(w.Header().Get("RateLimit"), ", ")
	return first
}

// boundLeft returns the first item of a response's RateLimit field without
// its t: the policy that bound the decision and its units left.
func boundLeft(w *httptest.ResponseRecorder) string {
	before, _, _ := strings.Cut(boundItem(w), ";t=")
	return before
}

// violated returns the violated-policies of a problem document.
func violated(t *testing.T, w *httptest.ResponseRecorder) []string {
	t.Helper()
	var p struct {
		Policies []string `json:"violated-policies"`
	}
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &p), w.Body.String())
	return p.Policies
}

func TestCompletionUsage(t *testing.T) {
	h, _ := newTestGateway(t)
	w := post(t, h, "key-1", chat("demo", strings.Repeat("abcd", 10)+"a", 100)) // 41 characters
	u := usageOf(t, w)
	assert.Equal(t, 11, u.PromptTokens)
	assert.Equal(t, u.PromptTokens+u.CompletionTokens, u.TotalTokens)
	assert.Positive(t, u.CompletionTokens)
	assert.Equal(t, "application/json", w.Header().Get("Content-Type"))

	// A max_tokens smaller than the reply cuts it.
	w = post(t, h, "key-2", chat("demo", "hi", 3))
	u = usageOf(t, w)
	assert.Equal(t, 1, u.PromptTokens)
	assert.Equal(t, 3, u.CompletionTokens)
	assert.Contains(t, w.Body.String(), `"finish_reason":"length"`)
}

// A request is admitted on its estimate and settled to its usage, which
// the next response shows: once tokens are the scarcer share, RateLimit
// names them, and their Remaining is what the usage of the requests before
// left, not their estimates. A request whose estimate does not fit is
// denied by the tokens policy and takes nothing.
func TestAdmittedOnEstimateSettledToUsage(t *testing.T) {
	h, _ := newTestGateway(t)

	// An estimate of 3 + 100: 1897 of 2000 tokens (95%) are left after it,
	// 4 of 5 requests (80%), so requests bind.
	w := post(t, h, "key-1", chat("demo", "Say hello", 100))
	first := usageOf(t, w)
	assert.Equal(t, bothPolicies, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"requests";r=4;t=12, "tokens";r=1897;t=1`, w.Header().Get("RateLimit"), "each policy's next unit: a request's 12 s, a token's 30 ms")
	assert.Less(t, first.TotalTokens, 103, "the reply is shorter than max_tokens")

	// 1500 prompt tokens and max_tokens 200: an estimate of 1700. Tokens
	// (under 14% left) are now scarcer than requests (3 of 5), and their
	// Remaining counts the first request at its usage, not its estimate.
	w = post(t, h, "key-1", chat("demo", strings.Repeat("lorem ipsum ", 500), 200))
	second := usageOf(t, w)
	assert.Equal(t, 1500, second.PromptTokens)
	left := tokensPerMinute - first.TotalTokens - 1700
	assert.Equal(t, 278, left)
	assert.Equal(t, fmt.Sprintf(`"tokens";r=%d;t=1`, left), boundItem(w), "the next token in 30 ms")
	assert.Equal(t, "52", w.Header().Get("RateLimit-Reset"), "(2000-278) tokens refill in 51.7 s")
	assert.Equal(t, "2000", w.Header().Get("RateLimit-Limit"))

	// The second request was settled too: an estimate of 1004 does not fit
	// in what the usage of the first two left, and nothing of it is taken.
	left = tokensPerMinute - first.TotalTokens - second.TotalTokens
	assert.Equal(t, 459, left)
	for range 2 {
		w = post(t, h, "key-1", chat("demo", "Write a story", 1000))
		require.Equal(t, http.StatusTooManyRequests, w.Code, w.Body.String())
		assert.Equal(t, fmt.Sprintf(`"tokens";r=%d;t=%s`, left, w.Header().Get("Retry-After")), w.Header().Get("RateLimit"))
		assert.Equal(t, []string{"tokens"}, violated(t, w))
		// The missing tokens refill at 2000 a minute.
		wait := time.Duration(1004-left) * time.Minute / tokensPerMinute
		assert.Equal(t, strconv.Itoa(int((wait+time.Second-1)/time.Second)), w.Header().Get("Retry-After"))
	}
}

// RateLimit names the policy with the smaller share of its limit left, not
// the one with fewer units: requests while their share is no larger than
// that of tokens, tokens as soon as fewer than 400 are left per request.
func TestBoundPolicyIsTheScarcerShare(t *testing.T) {
	h, _ := newTestGateway(t)
	// An estimate of 3 + 397: 1600 of 2000 tokens left, 4 of 5 requests,
	// 80% of each. A tie goes to the first policy, requests.
	w := post(t, h, "key-1", chat("demo", "Say hello", 397))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, `"requests";r=4;t=12`, boundItem(w))

	// One token more: 1599 tokens left is less than 80% of 2000, so tokens
	// bind though far more of them than requests are left.
	w = post(t, h, "key-2", chat("demo", "Say hello", 398))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, `"tokens";r=1599;t=1, "requests";r=4;t=12`, w.Header().Get("RateLimit"))
	assert.Equal(t, "1599", w.Header().Get("RateLimit-Remaining"))
	assert.Equal(t, "2000", w.Header().Get("RateLimit-Limit"))

	// That request was settled to its usage (22): a small one after it
	// leaves 1965 tokens (98%) and 3 requests (60%), and requests bind again.
	w = post(t, h, "key-2", chat("demo", "Say hello", 10))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, `"requests";r=3`, boundLeft(w))

	// An estimate that leaves 1 token binds whatever requests are left.
	first := usageOf(t, post(t, h, "key-3", chat("demo", "Say hello", 1000)))
	prompt := tokensPerMinute - first.TotalTokens - 1 - 1000
	w = post(t, h, "key-3", chat("demo", strings.Repeat("abcd", prompt), 1000))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, `"tokens";r=1`, boundLeft(w))
}

// Each call takes one request, whatever its tokens: the sixth small request
// in a minute is denied by the requests policy, and one more is allowed
// every 12 s.
func TestRequestsLimit(t *testing.T) {
	h, rdb := newTestGateway(t)
	for i := 4; i >= 0; i-- {
		w := post(t, h, "key-1", chat("demo", "Say hello", 10))
		require.Equal(t, http.StatusOK, w.Code, w.Body.String())
		assert.Equal(t, fmt.Sprintf(`"requests";r=%d;t=12`, i), boundItem(w), "the next request in 12 s")
		assert.Equal(t, strconv.Itoa(60-12*i), w.Header().Get("RateLimit-Reset"), "full again once every request is back")
	}
	w := post(t, h, "key-1", chat("demo", "Say hello", 10))
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, `"requests";r=0;t=12`, w.Header().Get("RateLimit"))
	assert.Equal(t, "12", w.Header().Get("Retry-After"))
	assert.Equal(t, []string{"requests"}, violated(t, w))

	// Another API key has limits of its own.
	assert.Equal(t, http.StatusOK, post(t, h, "key-2", chat("demo", "Say hello", 10)).Code)

	rdb.Wait(12 * time.Second)
	assert.Equal(t, http.StatusOK, post(t, h, "key-1", chat("demo", "Say hello", 10)).Code)
}

// A 5xx answer gives back the call and the tokens it took: the call shows
// in the requests Remaining of a small request after it, the tokens in the
// tokens Remaining of a large one.
func TestRefundOnServerError(t *testing.T) {
	h, _ := newTestGateway(t)
	w := post(t, h, "key-1", chat("demo", "Say hello", 10))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, 13, usageOf(t, w).TotalTokens, "settled to its estimate: nothing changes")
	assert.Equal(t, `"requests";r=4;t=12`, boundItem(w))

	// An estimate of 900 + 1000 tokens, failing upstream. Its fields, set
	// before the handler ran, show the tokens taken: 87 of 2000 left.
	big := strings.Repeat("abcd", 900)
	w = post(t, h, "key-1", chat(failModel, big, 1000))
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	assert.Equal(t, `"tokens";r=87;t=1`, boundItem(w), "taken while the request ran")

	// The call was given back: a small request leaves 3 requests, not 2.
	w = post(t, h, "key-1", chat("demo", "Say hello", 10))
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"requests";r=3;t=12`, boundItem(w))

	// The tokens were given back: the same estimate fits again, and leaves
	// 2000 - 13 - 13 - 1900 = 74; without the refund 74 would be left
	// before it, and it would be denied.
	w = post(t, h, "key-1", chat(failModel, big, 1000))
	require.Equal(t, http.StatusServiceUnavailable, w.Code, w.Body.String())
	assert.Equal(t, `"tokens";r=74;t=1`, boundItem(w))

	// So were that one's: 3 requests and 2000 - 13 - 13 tokens are left
	// before an estimate of 870 + 1000, which leaves 104.
	w = post(t, h, "key-1", chat("demo", strings.Repeat("abcd", 870), 1000))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, `"tokens";r=104`, boundLeft(w))
}

func TestRejectsBadRequests(t *testing.T) {
	h, _ := newTestGateway(t)
	for _, c := range []struct {
		name, apiKey, body string
		status             int
		detail             string
	}{
		{"no API key", "", chat("demo", "hi", 10), http.StatusUnauthorized, "API key is required"},
		{"too large", "key-1", chat("demo", strings.Repeat("a", maxBody), 10), http.StatusRequestEntityTooLarge, "over 8192 bytes"},
		{"not JSON", "key-1", "hello", http.StatusBadRequest, "not a JSON chat completion request"},
		{"content not a string", "key-1", `{"model":"demo","messages":[{"role":"user","content":7}]}`, http.StatusBadRequest, "not a JSON chat completion request"},
		{"no model", "key-1", chat("", "hi", 10), http.StatusBadRequest, "model must be"},
		{"no messages", "key-1", `{"model":"demo","messages":[]}`, http.StatusBadRequest, "messages must hold 1 to 64 messages, not 0"},
		{"bad role", "key-1", `{"model":"demo","messages":[{"role":"robot","content":"hi"}]}`, http.StatusBadRequest, `messages[0].role must be`},
		{"max_tokens 0", "key-1", chat("demo", "hi", 0), http.StatusBadRequest, "max_tokens must be 1 to 1024, not 0"},
		{"max_tokens too large", "key-1", chat("demo", "hi", 5000), http.StatusBadRequest, "max_tokens must be 1 to 1024, not 5000"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := post(t, h, c.apiKey, c.body)
			assert.Equal(t, c.status, w.Code)
			assert.Equal(t, "application/problem+json", w.Header().Get("Content-Type"))
			assert.Contains(t, w.Body.String(), c.detail)
			assert.Empty(t, w.Header().Get("RateLimit"), "the limiter is not asked")
		})
	}

	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(chat("demo", "hi", 10)))
	r.Header.Set("Authorization", "Basic a2V5OmtleQ==")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	assert.Equal(t, http.StatusUnauthorized, w.Code, "another scheme than Bearer")
	assert.Equal(t, `Bearer realm="aigateway"`, w.Header().Get("WWW-Authenticate"))

	// The key-1 requests above took nothing: 5 requests are left.
	w = post(t, h, "key-1", chat("demo", "hi", 10))
	assert.Equal(t, `"requests";r=4;t=12`, boundItem(w))
}

// An estimate above the tokens limit can never be admitted: the middleware
// answers 413 naming the tokens policy.
func TestEstimateAboveTheLimit(t *testing.T) {
	h, _ := newTestGateway(t)
	w := post(t, h, "key-1", chat("demo", strings.Repeat("abcd", 1500), 1000)) // 2500
	assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code)
	assert.Contains(t, w.Body.String(), `policy \"tokens\"`, "the problem document's detail names it")
	assert.Equal(t, bothPolicies, w.Header().Get("RateLimit-Policy"))
}

// Without Redis, even at start, a replica decides on its share of the
// free plan: 5 requests a minute over the 2 replicas it assumes are 2 each.
// The completion is served on the fallback's decision.
func TestWithoutRedisAReplicaDecidesOnItsShare(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = client.Close() })
	r, err := newReplica(client, replicaConfig{ID: "replica-0", Replicas: 2, Logf: t.Logf})
	require.NoError(t, err)
	assert.Error(t, r.start(context.Background()))

	for range 2 {
		w := post(t, r.handler, "key-1", chat("demo", "Say hello", 10))
		assert.Equal(t, http.StatusOK, w.Code, w.Body.String())
		assert.Equal(t, "fallback", w.Header().Get("X-Ratelimit-Source"))
		assert.Equal(t, bothPolicies, w.Header().Get("RateLimit-Policy"), "the fallback's policies go by the plan's names")
	}
	w := post(t, r.handler, "key-1", chat("demo", "Say hello", 10))
	assert.Equal(t, http.StatusTooManyRequests, w.Code, w.Body.String())
	assert.NotContains(t, w.Body.String(), "usage")
}

func TestRateKeyHidesTheAPIKey(t *testing.T) {
	k := rateKey("sk-secret")
	assert.NotContains(t, k, "secret")
	assert.Len(t, k, 32)
	assert.Equal(t, k, rateKey("sk-secret"))
	assert.NotEqual(t, k, rateKey("sk-secret2"))
}
