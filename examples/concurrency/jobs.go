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
// units for the request's X-API-Key, and answers when it is done. The
// middleware of package httplimit holds the unit: it takes a lease before
// the job starts and releases it once the handler has returned, panicked
// included, even when the client has gone away. A request beyond the
// limit is answered 429 with Retry-After; one without a key, or with a
// bad seconds, 400 before any unit is taken; one the limiter cannot
// decide, 503. logf logs the limiter's errors.
func newHandler(limiter ratelimit.Acquirer, work worker, logf func(string, ...any)) (http.Handler, error) {
	if limiter == nil || work == nil || logf == nil {
		return nil, errors.New("a limiter, a worker and a log function are required")
	}
	limit, err := httplimit.NewMiddleware(limiter, httplimit.KeyByHeader("X-API-Key"),
		httplimit.WithLeases(),
		httplimit.WithPolicyName(policyName),
		httplimit.WithHeaderStyle(httplimit.IETFHeaders),
		httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, _ error) {
			answer(w, http.StatusBadRequest, map[string]any{"error": "an X-API-Key header is required"})
		}),
		// A limit on jobs that lets them all through while Redis is
		// down protects nothing: answer 503 instead.
		httplimit.WithFailClosed(time.Second),
		httplimit.WithOnError(func(r *http.Request, err error) {
			logf("%s %s: %v", r.Method, r.URL.Path, err)
		}),
	)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /jobs", checkJob(limit.Handler(runJob(work))))
	return mux, nil
}

// jobSeconds returns the length of the job r asks for, in seconds: its
// seconds parameter, 1 without one, or an error when it is not a whole
// number from 1 to maxJob.
func jobSeconds(r *http.Request) (int, error) {
	s := r.URL.Query().Get("seconds")
	if s == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || time.Duration(n)*time.Second > maxJob {
		return 0, errors.New("seconds must be a whole number from 1 to " + strconv.Itoa(int(maxJob/time.Second)))
	}
	return n, nil
}

// checkJob answers 400 to a request for a job of a bad length, and passes
// the others to next: a bad request takes no unit of the limit.
func checkJob(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := jobSeconds(r); err != nil {
			answer(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// runJob returns the handler that runs a job by work, of a length
// checkJob has checked, and answers with the lease that held its unit.
func runJob(work worker) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seconds, err := jobSeconds(r)
		if err != nil {
			answer(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		if err := work(r.Context(), time.Duration(seconds)*time.Second); err != nil {
			return // the client is gone: nobody reads an answer
		}
		body := jobDone{Job: "done", Seconds: seconds}
		if lease, ok := httplimit.LeaseOf(r.Context()); ok {
			body.Lease = &leaseInfo{Key: lease.Key(), Units: lease.Units(), TTL: lease.TTL().String()}
		}
		answer(w, http.StatusOK, body)
	})
}

// jobDone is the answer to a job done: its length in seconds, and the
// lease that held its unit of the limit while it ran.
type jobDone struct {
	Job     string     `json:"job"`
	Seconds int        `json:"seconds"`
	Lease   *leaseInfo `json:"lease,omitempty"`
}

// leaseInfo describes a lease: the key whose units it held, how many, and
// its TTL as last extended.
type leaseInfo struct {
	Key   string `json:"key"`
	Units int    `json:"units"`
	TTL   string `json:"ttl"`
}

// answer writes v as the JSON body of a response of status.
func answer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
