package outbound

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted is an upstream that answers the statuses given, in order, then
// 200, and records the bodies it received.
type scripted struct {
	mu       sync.Mutex
	statuses []int
	bodies   []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	status := http.StatusOK
	if len(s.statuses) > 0 {
		status, s.statuses = s.statuses[0], s.statuses[1:]
	}
	s.mu.Unlock()
	w.Header().Set("X-Cost", "3")
	w.WriteHeader(status)
}

// received returns the bodies received so far.
func (s *scripted) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// newTransportCase returns an upstream answering statuses, and a Transport
// to it through an Upstream on fake time that never jitters, learns a 429
// as a pause of a second, and waits at most maxWait.
func newTransportCase(t *testing.T, maxWait time.Duration, statuses ...int) (*scripted, *httptest.Server, *Transport, *fakeTime, *events) {
	up := &scripted{statuses: statuses}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	ft := newFakeTime()
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 10, time.Second), Config{NoJitter: true, MaxWait: maxWait})
	return up, srv, &Transport{Upstream: u}, ft, ev
}

func TestATransportRetriesARefusedGETAfterThePauseTheAnswerSet(t *testing.T) {
	up, srv, tr, ft, ev := newTransportCase(t, 0, 429, 429)
	tr.Retries = 2
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Len(t, up.received(), 3)
	assert.Equal(t, []time.Duration{DefaultLimitedPause, DefaultLimitedPause}, ft.slept())
	retried := ev.of(Retried)
	require.Len(t, retried, 2)
	assert.Equal(t, 2, retried[0].Attempt)
	assert.Equal(t, 3, retried[1].Attempt)
	assert.Equal(t, http.StatusTooManyRequests, retried[0].Status)
	assert.Len(t, ev.of(UpstreamLimited), 2)
}

func TestATransportRetriesAtMostRetriesTimesAndReturnsTheLastRefusal(t *testing.T) {
	up, srv, tr, _, _ := newTransportCase(t, 0, 429, 429, 429, 429)
	tr.Retries = 2
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Len(t, up.received(), 3)
}

func TestATransportRetriesOnlyRequestsThatCanBeReplayed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		request  func(url string) *http.Request
		anyVerb  bool
		attempts int
	}{
		{"a POST is never retried by default", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("pay"))
			return r
		}, false, 1},
		{"a POST with an Idempotency-Key is", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("pay"))
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, false, 2},
		{"a POST is with RetryAnyMethod", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte("pay")))
			return r
		}, true, 2},
		{"a PUT whose body cannot be read again is not", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPut, url, io.NopCloser(strings.NewReader("put")))
			return r
		}, false, 1},
		{"a PUT whose body GetBody gives again is", func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPut, url, strings.NewReader("put"))
			return r
		}, false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, srv, tr, _, _ := newTransportCase(t, 0, 429)
			tr.Retries, tr.RetryAnyMethod = 1, tc.anyVerb
			resp, err := (&http.Client{Transport: tr}).Do(tc.request(srv.URL))
			require.NoError(t, err)
			resp.Body.Close()
			got := up.received()
			assert.Len(t, got, tc.attempts)
			if tc.attempts == 2 {
				assert.Equal(t, got[0], got[1], "the same body, sent again")
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
		})
	}
}

func TestATransportDoesNotRetryWhenThePauseIsLongerThanItMayWait(t *testing.T) {
	up, srv, tr, ft, _ := newTransportCase(t, 500*time.Millisecond, 429)
	tr.Retries = 3
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the refusal as the upstream sent it")
	assert.Len(t, up.received(), 1)
	assert.Empty(t, ft.slept())
}

// closeRecorder is a request body that records its Close.
type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }

func TestATransportRefusesARequestItWouldWaitTooLongForUnsentWithItsBodyClosed(t *testing.T) {
	up, srv, tr, _, ev := newTransportCase(t, -1)
	for range 10 {
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
	}
	body := &closeRecorder{Reader: strings.NewReader("x")}
	req, err := http.NewRequest(http.MethodPost, srv.URL, body)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, ErrLimited)
	assert.True(t, body.closed)
	assert.Len(t, up.received(), 10)
	assert.Len(t, ev.of(Refused), 1)

	_, err = (&http.Client{Transport: tr}).Get(srv.URL)
	require.ErrorIs(t, err, ErrLimited, "through an http.Client too")
}

func TestATransportSettlesTheCostTheAnswerTells(t *testing.T) {
	_, srv, tr, _, _ := newTransportCase(t, -1)
	tr.Cost = func(*http.Request) (int, error) { return 1, nil }
	tr.Settle = func(resp *http.Response) (int, bool) {
		n, err := strconv.Atoi(resp.Header.Get("X-Cost"))
		return n, err == nil
	}
	for range 3 {
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	_, err := tr.Upstream.Admit(context.Background(), host, 2)
	require.ErrorIs(t, err, ErrLimited, "3 calls settled at 3 each took 9 of 10")
	_, err = tr.Upstream.Admit(context.Background(), host, 1)
	require.NoError(t, err)
}

func TestATransportFailsUnsentOnABadPartitionCostOrConfiguration(t *testing.T) {
	up, srv, tr, _, _ := newTransportCase(t, 0)
	bad := errors.New("no tenant")
	for name, tc := range map[string]struct {
		mutate func(*Transport)
		want   error
	}{
		"a partition error":   {func(tr *Transport) { tr.Partition = func(*http.Request) (string, error) { return "", bad } }, bad},
		"a cost error":        {func(tr *Transport) { tr.Cost = func(*http.Request) (int, error) { return 0, bad } }, bad},
		"a negative Retries":  {func(tr *Transport) { tr.Retries = -1 }, ratelimit.ErrInvalidConfig},
		"too many Retries":    {func(tr *Transport) { tr.Retries = MaxRetries + 1 }, ratelimit.ErrInvalidConfig},
		"a nil Upstream":      {func(tr *Transport) { tr.Upstream = nil }, ratelimit.ErrInvalidConfig},
		"a zero Upstream":     {func(tr *Transport) { tr.Upstream = &Upstream{} }, ratelimit.ErrInvalidConfig},
		"a cost above limits": {func(tr *Transport) { tr.Cost = func(*http.Request) (int, error) { return 11, nil } }, ratelimit.ErrCostExceedsLimit},
	} {
		t.Run(name, func(t *testing.T) {
			c := *tr
			tc.mutate(&c)
			_, err := (&http.Client{Transport: &c}).Get(srv.URL)
			require.ErrorIs(t, err, tc.want)
		})
	}
	assert.Empty(t, up.received())

	_, err := ByHost(&http.Request{})
	assert.ErrorContains(t, err, "no host")
	_, err = (&Transport{Upstream: tr.Upstream}).RoundTrip(&http.Request{Method: http.MethodGet, Header: http.Header{}})
	assert.ErrorContains(t, err, "no host")
}

func TestATransportReportsASettleThatFailsAndReturnsTheAnswer(t *testing.T) {
	_, srv, tr, _, ev := newTransportCase(t, 0)
	tr.Settle = func(*http.Response) (int, bool) { return -1, true }
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	failed := ev.of(SettleFailed)
	require.Len(t, failed, 1)
	assert.ErrorIs(t, failed[0].Err, ratelimit.ErrInvalidCost)
}

// retrying is a RoundTripper that sends a request again once after any
// 429, as the retrying transports of other packages do.
type retrying struct{ next http.RoundTripper }

func (r retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusTooManyRequests {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return r.next.RoundTrip(req)
}

// tracing is a RoundTripper that counts what it sends, as a tracing
// transport would.
type tracing struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent int
}

func (t *tracing) RoundTrip(req *http.Request) (*http.Response, error) {
	t.mu.Lock()
	t.sent++
	t.mu.Unlock()
	return t.next.RoundTrip(req)
}

func TestATransportComposesWithRetryingAndTracingTransports(t *testing.T) {
	up, srv, tr, ft, ev := newTransportCase(t, 0, 429)
	trace := &tracing{next: http.DefaultTransport}
	tr.Base = trace
	client := &http.Client{Transport: retrying{next: tr}}
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Len(t, up.received(), 2)
	assert.Equal(t, 2, trace.sent, "each attempt traced")
	assert.Equal(t, []time.Duration{DefaultLimitedPause}, ft.slept(), "the outer retry waited for the pause the 429 set")
	assert.Len(t, ev.of(UpstreamLimited), 1)
}

func TestATransportReturnsTheRefusalWhenItsRetryCannotBeAdmitted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, "slow down")
	}))
	t.Cleanup(srv.Close)
	ft := newFakeTime()
	// One call per 2 s, and at most 1.5 s of wait: the pause of a second
	// the refusal sets fits, but not the limiter's next unit after it.
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, 2*time.Second), Config{NoJitter: true, MaxWait: 1500 * time.Millisecond})
	resp, err := (&http.Client{Transport: &Transport{Upstream: u, Retries: 3}}).Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "slow down", string(body), "the refusal as the upstream sent it")
	assert.Empty(t, ev.of(Retried))
	assert.Len(t, ev.of(Refused), 1)
}

func TestATransportRetriesAPOSTWithAnXIdempotencyKeyEvenWithoutAValue(t *testing.T) {
	up, srv, tr, _, _ := newTransportCase(t, 0, 429)
	tr.Retries = 1
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("pay"))
	require.NoError(t, err)
	req.Header["X-Idempotency-Key"] = nil
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Len(t, up.received(), 2)
}

func TestAPartitionOrCostErrorIsTheCallersMistake(t *testing.T) {
	_, srv, tr, _, _ := newTransportCase(t, 0)
	tr.Partition = func(*http.Request) (string, error) { return "", errors.New("no tenant") }
	_, err := (&http.Client{Transport: tr}).Get(srv.URL)
	require.ErrorIs(t, err, ratelimit.ErrCaller)
}

func TestByCredentialGivesEachCredentialItsOwnPartitionWithoutShowingIt(t *testing.T) {
	part := ByCredential("authorization")
	req := func(token string) *http.Request {
		r, err := http.NewRequest(http.MethodGet, "https://api.example.com/v1", nil)
		require.NoError(t, err)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}
	a, err := part(req("alice-secret"))
	require.NoError(t, err)
	b, err := part(req("bob-secret"))
	require.NoError(t, err)
	assert.NotEqual(t, a, b)
	assert.Equal(t, "api.example.com "+ratelimit.KeyDigest("Bearer alice-secret"), a)
	assert.NotContains(t, a, "alice-secret")

	_, srv, tr, _, _ := newTransportCase(t, 0)
	tr.Partition = part
	_, err = (&http.Client{Transport: tr}).Get(srv.URL)
	require.ErrorIs(t, err, ratelimit.ErrCaller, "no Authorization field")
	assert.ErrorContains(t, err, "Authorization")
}
