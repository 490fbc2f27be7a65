package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/ratelimit-go/ratelimit/httplimit"
)

// The bounds of a request the gateway accepts.
const (
	maxBody          = 8 << 10 // bytes of JSON; a larger body is answered 413
	maxMessages      = 64
	maxModelLen      = 64
	maxAPIKeyLen     = 200
	defaultMaxTokens = 256  // when the request gives no max_tokens
	maxMaxTokens     = 1024 // the largest max_tokens accepted
)

// failModel is the model whose upstream always fails: its requests are
// answered 503, and the middleware gives their units back.
const failModel = "fail"

// chatRequest is the body of POST /v1/chat/completions. Other fields of the
// API (temperature, stream, ...) are ignored.
type chatRequest struct {
	Model     string    `json:"model"`
	Messages  []message `json:"messages"`
	MaxTokens *int      `json:"max_tokens"`
}

// message is one message of a chat.
type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// chatCall is a request that withChatRequest has checked: the rate-limit
// key of its API key, and what the completion needs.
type chatCall struct {
	key          string // the API key's rate-limit key
	plan         string // the API key's plan (see planOf)
	model        string
	promptTokens int
	maxTokens    int
}

// chatCallKey is the context key of a request's *chatCall.
type chatCallKey struct{}

// errNoCall is what callKey and estimate return for a request that did not
// come through withChatRequest: a wiring mistake, answered 500.
var errNoCall = errors.New("aigateway: the request was not checked by withChatRequest")

// withChatRequest checks the API key and the body of a request before next
// (the rate limit, then the completion) sees it: 401 without an API key,
// 413 for a body over maxBody, 400 for one that is not a valid request.
// The request goes on with its chatCall in its context.
func withChatRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		apiKey, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="aigateway"`)
			writeProblem(w, http.StatusUnauthorized, fmt.Sprintf("an API key is required: send Authorization: Bearer <key> (1 to %d bytes)", maxAPIKeyLen))
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if maxErr := (*http.MaxBytesError)(nil); errors.As(err, &maxErr) {
			writeProblem(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the body is over %d bytes", maxBody))
			return
		}
		if err != nil {
			writeProblem(w, http.StatusBadRequest, "reading the body: "+err.Error())
			return
		}
		call, err := parseChat(body)
		if err != nil {
			writeProblem(w, http.StatusBadRequest, err.Error())
			return
		}
		call.key, call.plan = rateKey(apiKey), planOf(apiKey)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chatCallKey{}, call)))
	})
}

// bearer returns the credentials of an Authorization value of the Bearer
// scheme, if they are 1 to maxAPIKeyLen visible ASCII characters.
func bearer(authorization string) (string, bool) {
	scheme, key, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimLeft(key, " ")
	if key == "" || len(key) > maxAPIKeyLen {
		return "", false
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return "", false
		}
	}
	return key, true
}

// rateKey returns the rate-limit key of an API key: a hash of it, so that
// credentials never reach Redis and keys have one length. (Each limiter
// puts it in a hash tag of its own, so both policies' Redis keys are in
// one hash slot on Redis Cluster, as a Composite needs.)
func rateKey(apiKey string) string {
	sum := sha256.Sum256([]byte(apiKey))
	return hex.EncodeToString(sum[:16])
}

// parseChat checks a request body and returns what the completion needs.
// Its errors say what is wrong, for a 400 answer.
func parseChat(body []byte) (*chatCall, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("the body is not a JSON chat completion request: %v", err)
	}
	if req.Model == "" || len(req.Model) > maxModelLen {
		return nil, fmt.Errorf("model must be 1 to %d bytes", maxModelLen)
	}
	if len(req.Messages) == 0 || len(req.Messages) > maxMessages {
		return nil, fmt.Errorf("messages must hold 1 to %d messages, not %d", maxMessages, len(req.Messages))
	}
	chars := 0
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant":
		default:
			return nil, fmt.Errorf(`messages[%d].role must be "system", "user" or "assistant", not %q`, i, m.Role)
		}
		chars += utf8.RuneCountInString(m.Content)
	}
	maxTokens := defaultMaxTokens
	if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 || maxTokens > maxMaxTokens {
		return nil, fmt.Errorf("max_tokens must be 1 to %d, not %d", maxMaxTokens, maxTokens)
	}
	return &chatCall{model: req.Model, promptTokens: max(countTokens(chars), 1), maxTokens: maxTokens}, nil
}

// countTokens estimates the tokens of a text of chars characters as a
// tokenizer of English would: about one per 4 characters, rounded up.
func countTokens(chars int) int { return (chars + 3) / 4 }

// callOf returns the chatCall withChatRequest put in a request's context,
// or in the context of a limiter call made for that request.
func callOf(ctx context.Context) (*chatCall, error) {
	call, ok := ctx.Value(chatCallKey{}).(*chatCall)
	if !ok {
		return nil, errNoCall
	}
	return call, nil
}

// callKey is the middleware's KeyFunc: requests are limited per API key.
func callKey(r *http.Request) (string, error) {
	call, err := callOf(r.Context())
	if err != nil {
		return "", err
	}
	return call.key, nil
}

// estimate is the middleware's CostFunc: the most tokens the request can
// take, its prompt's plus max_tokens. The handler reports the true total
// with httplimit.SetCost, and the middleware settles the difference.
func estimate(r *http.Request) (int, error) {
	call, err := callOf(r.Context())
	if err != nil {
		return 0, err
	}
	return call.promptTokens + call.maxTokens, nil
}

// completion is the answer to a chat completion request.
type completion struct {
	Object  string   `json:"object"`
	Model   string   `json:"model"`
	Choices []choice `json:"choices"`
	Usage   usage    `json:"usage"`
}

// choice is one reply of a completion.
type choice struct {
	Index        int     `json:"index"`
	Message      message `json:"message"`
	FinishReason string  `json:"finish_reason"` // "stop", or "length" when cut at max_tokens
}

// usage counts the tokens of a completion: what the "tokens" policy is
// settled to.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// complete answers a chat completion request that the rate limit admitted,
// with a fake, deterministic reply, and reports its true cost in tokens
// for the middleware to settle. Model "fail" stands for an upstream
// failure: 503, and the middleware gives back what the request took.
func complete(w http.ResponseWriter, r *http.Request) {
	call, err := callOf(r.Context())
	if err != nil {
		writeProblem(w, http.StatusInternalServerError, err.Error())
		return
	}
	if call.model == failModel {
		writeProblem(w, http.StatusServiceUnavailable, fmt.Sprintf("the upstream model failed (model %q always does); the request does not count", failModel))
		return
	}
	reply := fmt.Sprintf("Hello from the %s model! This is a fake completion of a %d-token prompt.", call.model, call.promptTokens)
	finish := "stop"
	if limit := 4 * call.maxTokens; utf8.RuneCountInString(reply) > limit {
		reply, finish = string([]rune(reply)[:limit]), "length"
	}
	u := usage{PromptTokens: call.promptTokens, CompletionTokens: countTokens(utf8.RuneCountInString(reply))}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	httplimit.SetCost(r.Context(), u.TotalTokens)

	if d, ok := httplimit.DecisionOf(r.Context()); ok {
		// "backend" (Redis) or "fallback" (this replica's share).
		w.Header().Set("X-Ratelimit-Source", d.Source.String())
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(completion{
		Object:  "chat.completion",
		Model:   call.model,
		Choices: []choice{{Message: message{Role: "assistant", Content: reply}, FinishReason: finish}},
		Usage:   u,
	})
}

// writeProblem answers with status and an RFC 9457 problem document whose
// detail is detail.
func writeProblem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{
		"type":   "about:blank",
		"title":  http.StatusText(status),
		"status": status,
		"detail": detail,
	})
}
