// Command aigateway serves a small API in the shape of an LLM API, POST
// /v1/chat/completions, that answers a fake completion and limits every API
// key to 5 requests and 2000 tokens a minute, decided together in one call
// to Redis.
//
// A request is admitted on an estimate of its tokens (its prompt's tokens
// plus its max_tokens), since the length of the reply is unknown until it
// has been written; the handler then reports the true total and the
// middleware settles the difference. Answers of 500 and above are given
// back in full.
//
// With no configuration it starts an embedded Redis (miniredis) in this
// process; with REDIS_ADDR set (say 127.0.0.1:6379) it uses that server, so
// several copies of the gateway share each key's limits. It listens on ADDR,
// 127.0.0.1:8080 by default, and shuts down gracefully on SIGINT or SIGTERM.
// See README.md for the responses.
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoserve"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// The limits of each API key, and how the gateway behaves when Redis does
// not answer.
const (
	requestsPerMinute = 5    // the "requests" policy: calls, whatever their size
	tokensPerMinute   = 2000 // the "tokens" policy: prompt and completion tokens

	limiterTimeout  = 250 * time.Millisecond // the most one decision may wait for Redis
	breakerFailures = 3                      // failed decisions in a row that stop asking Redis
	breakerCoolDown = 5 * time.Second        // how long until Redis is asked again

	defaultAddr = "127.0.0.1:8080"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "aigateway:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := os.Getenv("ADDR")
	if addr == "" {
		addr = defaultAddr
	}
	rdb, err := demoredis.Open()
	if err != nil {
		return err
	}
	defer rdb.Close()

	gateway, err := newGateway(rdb.Client, log.Printf)
	if err != nil {
		return err
	}
	srv := demoserve.NewServer(gateway)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("%s", rdb.Describe())
	log.Printf("listening on http://%s/v1/chat/completions (per API key: %d requests and %d tokens a minute)",
		ln.Addr(), requestsPerMinute, tokensPerMinute)

	return demoserve.Serve(srv, ln)
}

// newGateway returns the gateway's handler, with its limits kept in the
// Redis that client reaches. logf receives the limiter's failures.
func newGateway(client redis.Scripter, logf func(format string, args ...any)) (http.Handler, error) {
	limiter, err := newLimiter(client, logf)
	if err != nil {
		return nil, err
	}
	limit, err := httplimit.NewMiddleware(limiter, callKey,
		httplimit.WithCost(estimate),
		httplimit.WithSettle(),
		httplimit.WithRefund(func(_ *http.Request, status int) bool { return status >= 500 }),
		httplimit.WithOnError(func(r *http.Request, err error) {
			logf("rate limiter: %s %s: %v", r.Method, r.URL.Path, err)
		}))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /v1/chat/completions", withChatRequest(limit.Handler(http.HandlerFunc(complete))))
	return mux, nil
}

// newLimiter returns the limiter of every API key: a Composite of the
// "requests" and "tokens" policies, decided in one script call on Redis, in
// a Guard.
//
// The Guard fails closed: while Redis does not answer, requests are denied
// (429, Retry-After) rather than let through unmetered, since the tokens
// limit stands for the capacity of a paid, scarce upstream model. After
// breakerFailures failures in a row it stops asking Redis for
// breakerCoolDown, so an outage costs requests no waiting.
func newLimiter(client redis.Scripter, logf func(format string, args ...any)) (*ratelimit.Guard, error) {
	requests, err := ratelimit.NewRedisGCRA(client, requestsPerMinute, time.Minute)
	if err != nil {
		return nil, err
	}
	tokens, err := ratelimit.NewRedisTokenBucket(client, tokensPerMinute, tokensPerMinute/60.0)
	if err != nil {
		return nil, err
	}
	both, err := ratelimit.NewComposite(
		// Each call takes 1 from "requests", whatever its cost in tokens.
		ratelimit.Part{Name: "requests", Limiter: requests, PerCall: true},
		ratelimit.Part{Name: "tokens", Limiter: tokens},
	)
	if err != nil {
		return nil, err
	}
	return ratelimit.NewGuard(both, ratelimit.GuardConfig{
		Timeout:              limiterTimeout,
		OnFailure:            ratelimit.FailClosed,
		FailClosedRetryAfter: time.Second,
		BreakerFailures:      breakerFailures,
		BreakerCoolDown:      breakerCoolDown,
		Hooks:                failureLog(logf),
	})
}

// failureLog is the Guard's Hooks: it logs the decisions it made without
// Redis, and its breaker's changes.
type failureLog func(format string, args ...any)

// Decided logs a decision that Redis did not make.
func (logf failureLog) Decided(ev ratelimit.Event) {
	if ev.BackendErr != nil {
		logf("rate limiter unavailable, denying (%s): %v", ev.Source, ev.BackendErr)
	}
}

// BreakerChanged logs a change of the circuit breaker.
func (logf failureLog) BreakerChanged(from, to ratelimit.BreakerState) {
	logf("rate limiter circuit breaker: %v -> %v", from, to)
}
