// Command httpserver serves a small JSON API behind the httplimit middleware:
// GET /api/v1/data?user_id=… answers {"user_id": …, "data": …}, limited per
// user to bursts of 10 refilling at 2 per second, in a Redis token bucket.
//
// With no configuration it starts an embedded Redis (miniredis) in this
// process; with REDIS_ADDR set (say 127.0.0.1:6379) it uses that server, so
// several copies of the server share each user's limit. It listens on ADDR,
// 127.0.0.1:8080 by default, and shuts down gracefully on SIGINT or SIGTERM.
// See README.md for the responses.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoserve"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

const (
	capacity    = 10
	rate        = 2  // tokens per second
	maxUserID   = 64 // bytes: a longer user_id is refused, so keys stay small
	defaultAddr = "127.0.0.1:8080"
)

// errNoUserID is what userKey returns for a request without a usable
// user_id.
var errNoUserID = errors.New("the query parameter user_id is required (1 to 64 bytes)")

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
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

	limiter, err := ratelimit.NewRedisTokenBucket(rdb.Client, ratelimit.PerSecond(rate), capacity)
	if err != nil {
		return err
	}
	limit, err := httplimit.NewMiddleware(limiter, userKey,
		httplimit.WithKeyErrorHandler(badRequest),
		httplimit.WithOnError(func(r *http.Request, err error) {
			// Fail open: an outage of Redis is not an outage of the
			// API. But say so.
			log.Printf("rate limiter unavailable, letting %s %s through: %v", r.Method, r.URL.Path, err)
		}))
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /api/v1/data", limit.Handler(http.HandlerFunc(data)))
	srv := demoserve.NewServer(mux)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("%s", rdb.Describe())
	log.Printf("listening on http://%s/api/v1/data?user_id=42 (capacity %d, %d tokens/s per user)", ln.Addr(), capacity, rate)

	return demoserve.Serve(srv, ln)
}

// userKey keys a request by its user_id query parameter.
func userKey(r *http.Request) (string, error) {
	id := r.URL.Query().Get("user_id")
	if id == "" || len(id) > maxUserID {
		return "", errNoUserID
	}
	return "user:" + id, nil
}

// badRequest answers a request userKey refused: 400 with a problem
// document.
func badRequest(w http.ResponseWriter, _ *http.Request, err error) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type":   "about:blank",
		"title":  "Bad Request",
		"status": http.StatusBadRequest,
		"detail": err.Error(),
	})
}

// data is the protected API: it answers the user's data as JSON.
func data(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		UserID string `json:"user_id"`
		Data   string `json:"data"`
	}{
		UserID: r.URL.Query().Get("user_id"),
		Data:   "the protected API response for this user",
	})
}
