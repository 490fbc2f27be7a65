package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/examples/internal/demoredis"
)

const (
	testLimit = 2
	testTTL   = 30 * time.Second
)

// deniedBody is the problem document of the middleware's 429.
const deniedBody = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
	`"title":"Quota Exceeded","status":429,` +
	`"detail":"As many requests as the limit allows are in flight; retry after the number of seconds in Retry-After, or sooner once one of them ends.",` +
	`"violated-policies":["jobs"]}` + "\n"

// jobGate is a worker whose jobs start when asked to and end when the
// test says so, so that the test decides how long each runs.
type jobGate struct {
	started chan struct{}
	finish  chan struct{}
}

func newJobGate() *jobGate {
	return &jobGate{started: make(chan struct{}, 16), finish: make(chan struct{})}
}

func (g *jobGate) work(ctx context.Context, _ time.Duration) error {
	g.started <- struct{}{}
	select {
	case <-g.finish:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitStarted waits for n jobs to start.
func (g *jobGate) waitStarted(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-g.started:
		case <-time.After(5 * time.Second):
			t.Fatal("a job did not start")
		}
	}
}

// newTestServer serves the API with jobs run by work, on the limiter the
// command builds, over the embedded Redis (or REDIS_ADDR's), with keys of
// the test's own.
func newTestServer(t *testing.T, work worker, opts ...ratelimit.RedisOption) (*httptest.Server, string) {
	t.Helper()
	rdb, err := demoredis.Open()
	require.NoError(t, err)
	t.Cleanup(rdb.Close)
	limiter, err := newJobLimiter(rdb.Client, testLimit, testTTL, opts...)
	require.NoError(t, err)
	h, err := newHandler(limiter, work, t.Logf)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

// post sends POST /jobs?seconds=3 for apiKey and returns the response,
// its body read.
func post(t *testing.T, srv *httptest.Server, apiKey string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/jobs?seconds=3", nil)
	require.NoError(t, err)
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(body)
}

// postAsync sends post in the background; the response comes on the
// channel returned.
func postAsync(t *testing.T, srv *httptest.Server, apiKey string) <-chan *http.Response {
	t.Helper()
	out := make(chan *http.Response, 1)
	go func() {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/jobs?seconds=3", nil)
		if !assert.NoError(t, err) {
			close(out)
			return
		}
		req.Header.Set("X-API-Key", apiKey)
		resp, err := srv.Client().Do(req)
		if !assert.NoError(t, err) {
			close(out)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		out <- resp
	}()
	return out
}

// firstOf returns the first response of those on cs, and the channels of
// the others.
func firstOf(t *testing.T, cs ...<-chan *http.Response) (*http.Response, []<-chan *http.Response) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		for i, c := range cs {
			select {
			case resp, ok := <-c:
				require.True(t, ok, "the request failed")
				return resp, append(cs[:i:i], cs[i+1:]...)
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatal("no response")
		case <-time.After(time.Millisecond):
		}
	}
}

func TestAKeyRunsAtMostLimitJobsAndASlotComesBackWhenOneEnds(t *testing.T) {
	gate := newJobGate()
	srv, key := newTestServer(t, gate.work)

	running := []<-chan *http.Response{postAsync(t, srv, key), postAsync(t, srv, key)}
	gate.waitStarted(t, testLimit)

	resp, body := post(t, srv, key)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, body)
	assert.Equal(t, "30", resp.Header.Get("Retry-After"), "the earliest lease expiry, rounded up")
	assert.Equal(t, `"jobs";q=2;qu="concurrent-requests"`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"jobs";r=0;t=30`, resp.Header.Get("RateLimit"))
	assert.Empty(t, resp.Header.Get("RateLimit-Limit"), "IETF fields only")
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	assert.Equal(t, deniedBody, body)

	running = append(running, postAsync(t, srv, key+"-other"))
	gate.waitStarted(t, 1) // another key has slots of its own

	gate.finish <- struct{}{} // one job ends, and gives its slot back
	ended, running := firstOf(t, running...)
	assert.Equal(t, http.StatusOK, ended.StatusCode)
	running = append(running, postAsync(t, srv, key))
	gate.waitStarted(t, 1)
	resp, body = post(t, srv, key)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the slot that came back is taken again: %s", body)

	close(gate.finish)
	for len(running) > 0 {
		ended, running = firstOf(t, running...)
		assert.Equal(t, http.StatusOK, ended.StatusCode)
	}
	resp, body = post(t, srv, key)
	assert.Equal(t, http.StatusOK, resp.StatusCode, body)
	assert.Equal(t, `"jobs";r=1`, resp.Header.Get("RateLimit"), "every slot came back; this job holds one (no t: a release may free a slot at any moment)")
	assert.JSONEq(t, `{"job":"done","seconds":3,"lease":{"key":"`+key+`","units":1,"ttl":"30s"}}`, body)
}

// releases is a ratelimit.Hooks that says when a lease was released.
type releases chan struct{}

func (releases) Decided(ratelimit.Event)                    {}
func (releases) BreakerChanged(_, _ ratelimit.BreakerState) {}
func (r releases) Adjusted(ev ratelimit.AdjustEvent) {
	if ev.Op == ratelimit.AdjustRelease {
		r <- struct{}{}
	}
}

// wait waits for a release.
func (r releases) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r:
	case <-time.After(5 * time.Second):
		t.Fatal("the lease was not released")
	}
}

func TestASlotComesBackWhenTheJobPanicsOrTheClientLeaves(t *testing.T) {
	gate := newJobGate()
	released := make(releases, 1)
	srv, key := newTestServer(t, func(ctx context.Context, d time.Duration) error {
		if d == time.Second {
			panic("the job failed")
		}
		return gate.work(ctx, d) // runs until its client leaves
	}, ratelimit.WithHooks(released))
	for range 2 * testLimit {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/jobs?seconds=1", nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", key)
		_, err = srv.Client().Do(req)
		require.Error(t, err, "the server drops the connection of a handler that panicked")
		released.wait(t)
	}
	for range 2 * testLimit {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/jobs?seconds=3", nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", key)
		failed := make(chan error, 1)
		go func() {
			_, err := srv.Client().Do(req)
			failed <- err
		}()
		gate.waitStarted(t, 1) // it has a slot
		cancel()
		assert.ErrorIs(t, <-failed, context.Canceled)
		released.wait(t)
	}
}

func TestBadRequestsAreRefusedBeforeAnySlotIsTaken(t *testing.T) {
	srv, key := newTestServer(t, sleep)
	resp, body := post(t, srv, "")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, body)
	assert.JSONEq(t, `{"error":"an X-API-Key header is required"}`, body)
	assert.Empty(t, resp.Header.Get("RateLimit"))

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/jobs?seconds=99", nil)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", key)
	resp, err = srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var problem map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&problem))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Empty(t, resp.Header.Get("RateLimit"), "no slot was taken")
	assert.Equal(t, "seconds must be a whole number from 1 to 10", problem["error"])
}

// unreachable is the limiter of jobs with its backend down: every Acquire
// fails as a Redis limiter's does when the server cannot be reached.
type unreachable struct{ ratelimit.Acquirer }

func (unreachable) Acquire(context.Context, string, int) (ratelimit.Lease, ratelimit.Decision, error) {
	return ratelimit.Lease{}, ratelimit.Decision{}, fmt.Errorf("%w: dial tcp: connection refused", ratelimit.ErrBackend)
}

func TestAJobIsAnswered503WhenTheLimiterCannotDecide(t *testing.T) {
	rdb, err := demoredis.Open()
	require.NoError(t, err)
	t.Cleanup(rdb.Close)
	limiter, err := newJobLimiter(rdb.Client, testLimit, testTTL)
	require.NoError(t, err)
	logged := make(chan string, 1)
	h, err := newHandler(unreachable{limiter}, sleep, func(format string, args ...any) {
		logged <- fmt.Sprintf(format, args...)
	})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	resp, body := post(t, srv, "alice")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Empty(t, resp.Header.Get("RateLimit"))
	assert.Contains(t, <-logged, "connection refused")
}
