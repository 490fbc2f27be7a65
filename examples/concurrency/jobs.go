package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// maxJob is the longest job a request may ask for.
const maxJob = 10 * time.Second

// worker runs a job of d, or less when ctx ends first (the client went
// away), which it then returns ctx's error.
type worker func(ctx context.Context, d time.Duration) error

// sleep is the jobs' work: waiting d.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newHandler returns the API: POST /jobs?seconds=N runs a job of N seconds
// (1 by default, at most maxJob) by work, while holding one of limiter's
// units for the request's X-API-Key, and answers when it is done.
func newHandler(limiter ratelimit.Acquirer, work worker, logf func(string, ...any)) (http.Handler, error) {
	if limiter == nil || work == nil {
		return nil, errors.New("a limiter and a worker are required")
	}
	mux := http.NewServeMux()
	mux.Handle("POST /jobs", holdSlot(limiter, httplimit.KeyByHeader("X-API-Key"), logf, runJob(work)))
	return mux, nil
}

// runJob returns the handler that runs a job by work.
func runJob(work worker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seconds := 1
		if s := r.URL.Query().Get("seconds"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || time.Duration(n)*time.Second > maxJob {
				answer(w, http.StatusBadRequest, map[string]any{"error": "seconds must be a whole number from 1 to " + strconv.Itoa(int(maxJob/time.Second))})
				return
			}
			seconds = n
		}
		if err := work(r.Context(), time.Duration(seconds)*time.Second); err != nil {
			return // the client is gone: nobody reads an answer
		}
		answer(w, http.StatusOK, map[string]any{"job": "done", "seconds": seconds})
	})
}

// answer writes v as the JSON body of a response of status.
func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
