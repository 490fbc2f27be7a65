package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// costFromQuery takes the cost from the query parameter "cost".
func costFromQuery(r *http.Request) (int, error) {
	return strconv.Atoi(r.URL.Query().Get("cost"))
}

// doCost sends one GET for key "k" costing cost through h.
func doCost(h http.Handler, cost int) (int, http.Header) {
	r := httptest.NewRequest(http.MethodGet, "/?cost="+strconv.Itoa(cost), nil)
	r.Header.Set(keyHeader, "k")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code, w.Header()
}

func TestCost(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(2), 10)
	h, next := limited(t, l, httplimit.WithCost(costFromQuery))

	code, hdr := doCost(h, 4) // the next token in 0.5 s, full in 2 s
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, `"default";r=6;t=1`, hdr.Get("RateLimit"))
	assert.Equal(t, "2", hdr.Get("RateLimit-Reset"))

	code, hdr = doCost(h, 0) // takes 1 all the same: a request that runs is never free
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, `"default";r=5;t=1`, hdr.Get("RateLimit"))
	assert.Equal(t, "3", hdr.Get("RateLimit-Reset"))

	code, hdr = doCost(h, 5)
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, `"default";r=0;t=1`, hdr.Get("RateLimit"))
	assert.Equal(t, "5", hdr.Get("RateLimit-Reset"))

	code, hdr = doCost(h, 3)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Equal(t, "2", hdr.Get("Retry-After")) // 1.5 s until 3 tokens
	assert.Equal(t, int64(3), next.calls.Load())
}

func TestSkipBypassesLimiting(t *testing.T) {
	stub := &stubLimiter{}
	h, next := limited(t, stub, httplimit.WithSkip(func(r *http.Request) bool { return r.URL.Path == "/healthz" }))

	r := httptest.NewRequest(http.MethodGet, "/healthz", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r) // no key either: the KeyFunc is not called
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Empty(t, fields(w.Header()))
	assert.Equal(t, 0, stub.callCount())
	assert.Equal(t, int64(1), next.calls.Load())

	w = do(h, "k", "") // other paths are limited: the stub denies
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, 1, stub.callCount())
}

func TestKeyAndCostReachTheLimiter(t *testing.T) {
	stub := &stubLimiter{}
	h, _ := limited(t, stub, httplimit.WithCost(costFromQuery))
	doCost(h, 7)
	require.Len(t, stub.calls, 1)
	assert.Equal(t, stubCall{key: "k", n: 7}, stub.calls[0])
}

// With the clock frozen, nothing refills: of many concurrent requests on one
// key, exactly the capacity pass.
func TestConcurrentRequestsOnOneKey(t *testing.T) {
	const capacity, workers, perWorker = 25, 32, 20
	l, _ := tokenBucket(t, ratelimit.PerSecond(1), capacity)
	h, next := limited(t, l)

	codes := make([][]int, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for range perWorker {
				codes[i] = append(codes[i], do(h, "hot", "").Code)
			}
		})
	}
	wg.Wait()

	counts := map[int]int{}
	for _, c := range codes {
		for _, code := range c {
			counts[code]++
		}
	}
	assert.Equal(t, map[int]int{http.StatusOK: capacity, http.StatusTooManyRequests: workers*perWorker - capacity}, counts)
	assert.Equal(t, int64(capacity), next.calls.Load())
}
