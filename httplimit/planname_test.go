package httplimit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// With a plan per key, RateLimit-Policy, RateLimit and a denial's
// violated-policies name each key's plan ("free", "pro"), not "default";
// a key of no plan keeps the limiter's name.
func TestPlanNameNamesEachKeysPolicy(t *testing.T) {
	plans := map[string]string{"alice": "free", "bob": "pro"}
	limits := map[string]int{"free": 1, "pro": 5}
	l, err := ratelimit.NewGCRA(2, time.Minute, ratelimit.WithPolicyFunc(func(_ context.Context, key string) (ratelimit.Policy, error) {
		if plan, ok := plans[key]; ok {
			return ratelimit.Policy{Limit: limits[plan], Window: time.Minute}, nil
		}
		return ratelimit.Policy{Limit: 2, Window: time.Minute}, nil
	}))
	require.NoError(t, err)
	planOf := func(key string) (string, bool) { p, ok := plans[key]; return p, ok }
	h, _ := limited(t, l, httplimit.WithPlanName(planOf))

	w := do(h, "alice", "")
	assert.Equal(t, `"free";q=1;w=60`, w.Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"free";r=0;t=60`, w.Header().Get("RateLimit"))
	w = do(h, "bob", "")
	assert.Equal(t, `"pro";q=5;w=60`, w.Header().Get("RateLimit-Policy"))
	w = do(h, "carol", "")
	assert.Equal(t, `"default";q=2;w=60`, w.Header().Get("RateLimit-Policy"))

	w = do(h, "alice", "application/json")
	require.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, `"free";q=1;w=60`, w.Header().Get("RateLimit-Policy"))
	var doc problemDoc
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &doc))
	assert.Equal(t, []string{"free"}, doc.ViolatedPolicies)
}

// A plan's name wins over WithPolicyName, which still names the keys of no
// plan; a name that cannot be sent is ignored.
func TestPlanNameOverWithPolicyName(t *testing.T) {
	l, err := ratelimit.NewGCRA(5, time.Minute)
	require.NoError(t, err)
	plan := func(key string) (string, bool) {
		switch key {
		case "a":
			return "gold", true
		case "b":
			return "bad\nname", true
		case "d":
			return "default", true // the limiter's own policy's name
		}
		return "", false
	}
	h, _ := limited(t, l, httplimit.WithPlanName(plan), httplimit.WithPolicyName("api"))
	assert.Equal(t, `"gold";q=5;w=60`, do(h, "a", "").Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"api";q=5;w=60`, do(h, "b", "").Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"api";q=5;w=60`, do(h, "c", "").Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"default";q=5;w=60`, do(h, "d", "").Header().Get("RateLimit-Policy"),
		"a plan named as the limiter's policy is not sent as a key of no plan is, whatever was sent before")
	assert.Equal(t, `"api";q=5;w=60`, do(h, "c", "").Header().Get("RateLimit-Policy"))
}

// WithPlanName names one policy: a limiter of several is an error, and so
// is a nil func.
func TestPlanNameRefusesSeveralPoliciesAndNil(t *testing.T) {
	c, err := ratelimit.NewComposite(
		ratelimit.Part{Name: "second", Limiter: mustGCRA(t, 5, time.Second)},
		ratelimit.Part{Name: "minute", Limiter: mustGCRA(t, 50, time.Minute)},
	)
	require.NoError(t, err)
	_, err = httplimit.NewMiddleware(c, httplimit.KeyByHeader(keyHeader), httplimit.WithPlanName(func(string) (string, bool) { return "x", true }))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, err = httplimit.NewMiddleware(mustGCRA(t, 5, time.Second), httplimit.KeyByHeader(keyHeader), httplimit.WithPlanName(nil))
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}

func mustGCRA(t *testing.T, limit int, period time.Duration) *ratelimit.GCRA {
	t.Helper()
	l, err := ratelimit.NewGCRA(limit, period)
	require.NoError(t, err)
	return l
}

// The observer and the handler see the plan's name in the Decision, as
// the client does in the fields.
func TestPlanNameReachesTheObserverAndTheHandler(t *testing.T) {
	l, err := ratelimit.NewGCRA(2, time.Minute)
	require.NoError(t, err)
	planOf := func(key string) (string, bool) { return "pro", key == "bob" }
	var observed []string
	m, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithPlanName(planOf),
		httplimit.WithDecisionContext(),
		httplimit.WithObserver(func(_ *http.Request, d ratelimit.Decision, _ error) { observed = append(observed, d.Policy.Name) }))
	require.NoError(t, err)
	var handled []string
	h := m.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		d, ok := httplimit.DecisionOf(r.Context())
		require.True(t, ok)
		handled = append(handled, d.Policy.Name, d.Policies[0].Name)
	}))

	do(h, "bob", "")
	do(h, "carol", "")
	assert.Equal(t, []string{"pro", "default"}, observed)
	assert.Equal(t, []string{"pro", "pro", "default", "default"}, handled)
}
