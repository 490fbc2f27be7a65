package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newTestFleet returns n replicas on one embedded Redis, each with its own
// client, started and running (following the plans, beating), every one
// counting the n, and that Redis. The loops stop when the test ends.
func newTestFleet(t *testing.T, n int) ([]*replica, *miniredis.Miniredis) {
	t.Helper()
	m := miniredis.RunT(t)
	ctx, stop := context.WithCancel(context.Background())
	var loops sync.WaitGroup
	fleet := make([]*replica, n)
	for i := range fleet {
		client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = client.Close() })
		r, err := newReplica(client, replicaConfig{ID: "replica-" + strconv.Itoa(i), Replicas: n, Logf: t.Logf})
		require.NoError(t, err)
		require.NoError(t, r.start(ctx))
		fleet[i] = r
	}
	for _, r := range fleet {
		require.NoError(t, r.fleet.Beat(ctx)) // now that all have joined
		loops.Add(1)
		go func() { defer loops.Done(); r.run(ctx) }()
	}
	t.Cleanup(func() { stop(); loops.Wait() }) // before the clients close
	return fleet, m
}

// do sends a request to h and returns the response.
func do(h http.Handler, method, target, body string, header map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, strings.NewReader(body))
	for k, v := range header {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// view returns GET /admin/plans of r.
func view(t *testing.T, r *replica) replicaView {
	t.Helper()
	w := do(r.handler, http.MethodGet, "/admin/plans", "", nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	var v replicaView
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &v))
	return v
}

// A plan raised once, through one replica's admin endpoint, holds on every
// replica: another one decides by it, and says so in RateLimit-Policy.
func TestAPlanRaisedOnOneReplicaHoldsOnEvery(t *testing.T) {
	fleet, _ := newTestFleet(t, 3)
	w := post(t, fleet[2].handler, "key-1", chat("demo", "Say hello", 10))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, bothPolicies, w.Header().Get("RateLimit-Policy"))

	w = do(fleet[0].handler, http.MethodPut, "/admin/plans/free", `{"requests":10,"tokens":3000}`, nil)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	want := planLimits{Requests: 10, Tokens: 3000}
	for _, r := range fleet {
		require.Eventually(t, func() bool { return view(t, r).Plans[freePlan] == want },
			2*time.Second, 5*time.Millisecond, "%s follows", r.id)
	}
	assert.Equal(t, defaultPlans()[proPlan], view(t, fleet[1]).Plans[proPlan], "the other plan is unchanged")

	// key-1 keeps what it used: 1 of 10 requests before this one.
	w = post(t, fleet[2].handler, "key-1", chat("demo", "Say hello", 10))
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, `"requests";q=10;w=60, "tokens";q=3000;w=60`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"requests";r=8`, boundLeft(w))

	// A pro key is not on the free plan.
	w = post(t, fleet[1].handler, "sk-pro-1", chat("demo", "Say hello", 10))
	assert.Equal(t, `"requests";q=60;w=60, "tokens";q=40000;w=60`, w.Header().Get("RateLimit-Policy"))
}

func TestAdminRejectsBadPlans(t *testing.T) {
	fleet, _ := newTestFleet(t, 1)
	h := fleet[0].handler
	for _, c := range []struct {
		name, target, body string
		status             int
	}{
		{"unknown plan", "/admin/plans/gold", `{"requests":1,"tokens":1}`, http.StatusNotFound},
		{"not JSON", "/admin/plans/free", `ten`, http.StatusBadRequest},
		{"zero requests", "/admin/plans/free", `{"tokens":100}`, http.StatusBadRequest},
		{"too many tokens", "/admin/plans/free", `{"requests":1,"tokens":1000001}`, http.StatusBadRequest},
		{"body too large", "/admin/plans/free", strings.Repeat(" ", maxAdminBody+1), http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := do(h, http.MethodPut, c.target, c.body, nil)
			assert.Equal(t, c.status, w.Code, w.Body.String())
		})
	}
	assert.Equal(t, defaultPlans()[freePlan], view(t, fleet[0]).Plans[freePlan])
}

// While Redis fails, each of 3 replicas decides on a third of each plan:
// a burst of one pro key across the fleet is allowed 60 times, the plan's
// limit, not 3 × 60.
func TestWithRedisDownTheFleetKeepsNearTheLimit(t *testing.T) {
	fleet, m := newTestFleet(t, 3)
	for _, r := range fleet {
		assert.Equal(t, 3, view(t, r).Live, r.id)
	}
	m.SetError("LOADING Redis is loading the dataset in memory")

	allowed := 0
	for range 30 {
		for _, r := range fleet {
			w := post(t, r.handler, "sk-pro-burst", chat("demo", "Hi", 10))
			if w.Code == http.StatusOK {
				allowed++
				assert.Equal(t, "fallback", w.Header().Get("X-Ratelimit-Source"))
			}
		}
	}
	assert.InDelta(t, 60, allowed, 1, "60 a minute: within the test's run, at most one more refills")
	assert.Equal(t, 3, view(t, fleet[0]).Live, "the count of the latest heartbeat that answered")
}

// Every request is settled for itself, whatever its Idempotency-Key: a
// retry with the same key is admitted on its estimate and settled to its
// usage too, so a third request finds the first two's usage gone.
func TestEveryRequestIsSettledWhateverItsIdempotencyKey(t *testing.T) {
	h, _ := newTestGateway(t)
	story := chat("demo", "Say hello", 1000) // an estimate of 3 + 1000, a usage of 22
	key := map[string]string{"Authorization": "Bearer key-1", "Idempotency-Key": "req-1"}

	w := do(h, http.MethodPost, "/v1/chat/completions", story, key)
	assert.Equal(t, 22, usageOf(t, w).TotalTokens)
	assert.Equal(t, `"tokens";r=997`, boundLeft(w), "2000 - 1003, the estimate")

	// The retry is admitted on 2000 - 22: the first was settled.
	w = do(h, http.MethodPost, "/v1/chat/completions", story, key)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, `"tokens";r=975`, boundLeft(w), "2000 - 22 - 1003")

	// Its settle, with the same key, applied too: a third request is
	// admitted on 2000 - 22 - 22.
	w = do(h, http.MethodPost, "/v1/chat/completions", story, key)
	require.Equal(t, http.StatusOK, w.Code, w.Body.String())
	assert.Equal(t, `"requests";r=2;t=12, "tokens";r=953;t=1`, w.Header().Get("RateLimit"), "2000 - 22 - 22 - 1003 tokens; 2 of 5 requests, the smaller share")
}
