package httplimit_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// plans is a PolicyFunc over a map the test changes, as an admin endpoint
// would.
type plans struct {
	mu  sync.Mutex
	per map[string]ratelimit.Policy
}

func (p *plans) set(key string, policy ratelimit.Policy) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.per[key] = policy
}

func (p *plans) policy(_ context.Context, key string) (ratelimit.Policy, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.per[key], nil
}

func TestHeadersShowEachKeysOwnPolicy(t *testing.T) {
	p := &plans{per: map[string]ratelimit.Policy{"pro": {Limit: 100, Window: time.Minute}}}
	clock := ratelimittest.NewClock(epoch)
	l, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithClock(clock), ratelimit.WithPolicyFunc(p.policy))
	require.NoError(t, err)
	h, _ := limited(t, l)

	free := do(h, "free", "")
	assert.Equal(t, http.StatusOK, free.Code)
	assert.Equal(t, `"default";q=10;w=60`, free.Header().Get("RateLimit-Policy"))
	assert.Equal(t, "10", free.Header().Get("RateLimit-Limit"))
	assert.Equal(t, "9", free.Header().Get("RateLimit-Remaining"))

	pro := do(h, "pro", "")
	assert.Equal(t, `"default";q=100;w=60`, pro.Header().Get("RateLimit-Policy"))
	assert.Equal(t, "100", pro.Header().Get("RateLimit-Limit"))
	assert.Equal(t, "99", pro.Header().Get("RateLimit-Remaining"))
}

func TestAnUpgradeShowsInTheNextResponseAndKeepsWhatWasUsed(t *testing.T) {
	p := &plans{per: map[string]ratelimit.Policy{}}
	clock := ratelimittest.NewClock(epoch)
	l, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithClock(clock), ratelimit.WithPolicyFunc(p.policy))
	require.NoError(t, err)
	cache, err := ratelimit.NewDenyCache(l, ratelimit.DenyCacheConfig{Clock: clock, MaxAge: time.Minute})
	require.NoError(t, err)
	h, _ := limited(t, cache)

	for range 10 {
		require.Equal(t, http.StatusOK, do(h, "acme", "").Code)
	}
	denied := do(h, "acme", "")
	require.Equal(t, http.StatusTooManyRequests, denied.Code)
	assert.Equal(t, `"default";q=10;w=60`, denied.Header().Get("RateLimit-Policy"))

	// The denial is remembered, but not past the upgrade.
	p.set("acme", ratelimit.Policy{Limit: 100, Window: time.Minute})
	up := do(h, "acme", "")
	assert.Equal(t, http.StatusOK, up.Code)
	assert.Equal(t, `"default";q=100;w=60`, up.Header().Get("RateLimit-Policy"))
	assert.Equal(t, "89", up.Header().Get("RateLimit-Remaining"))
}

func TestWithPolicyWindowKeepsItsWindowForPolicyFuncLimiters(t *testing.T) {
	p := &plans{per: map[string]ratelimit.Policy{"pro": {Limit: 100, Window: time.Hour}}}
	l, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithPolicyFunc(p.policy))
	require.NoError(t, err)
	h, _ := limited(t, l, httplimit.WithPolicyWindow(5*time.Second))
	assert.Equal(t, `"default";q=100;w=5`, do(h, "pro", "").Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"default";q=10;w=5`, do(h, "free", "").Header().Get("RateLimit-Policy"))
}

// The fields are those of the policy the decision was made under: the
// limiter reads the key's policy once per request and tells it in its
// Decision, and the middleware reads none of its own, so a policy that
// changes between requests never mixes one policy's q with another's w.
func TestAPolicyChangedAfterTheDecisionIsNotMixedIntoTheHeaders(t *testing.T) {
	var calls int
	var mu sync.Mutex
	policy := func(_ context.Context, key string) (ratelimit.Policy, error) {
		mu.Lock()
		defer mu.Unlock()
		if key != "k" {
			return ratelimit.Policy{Limit: 3, Window: time.Second}, nil
		}
		calls++
		if calls%2 == 1 {
			return ratelimit.Policy{Limit: 10, Window: time.Minute}, nil
		}
		return ratelimit.Policy{Limit: 20, Window: time.Hour}, nil
	}
	l, err := ratelimit.NewGCRA(3, time.Second, ratelimit.WithPolicyFunc(policy))
	require.NoError(t, err)
	h, _ := limited(t, l)
	for i, want := range []struct{ limit, policy string }{
		{"10", `"default";q=10;w=60`},
		{"20", `"default";q=20;w=3600`},
		{"10", `"default";q=10;w=60`},
	} {
		w := do(h, "k", "")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i)
		assert.Equal(t, want.limit, w.Header().Get("RateLimit-Limit"), "request %d", i)
		assert.Equal(t, want.policy, w.Header().Get("RateLimit-Policy"), "request %d", i)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 3, calls, "the premise: the limiter reads the key's policy once per request, the middleware never")
}

// A PolicyFunc that fails leaves the key's limit unknown, which is not the
// situation of a backend that is down: the request is answered 503, also
// through a Guard (which passes ErrPolicy on), unless
// WithPolicyErrorsPass lets it through without fields.
func TestAFailingPolicyFuncDoesNotLiftTheLimit(t *testing.T) {
	failing := func(context.Context, string) (ratelimit.Policy, error) { return ratelimit.Policy{}, errBackend }
	l, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithPolicyFunc(failing))
	require.NoError(t, err)
	guard, err := ratelimit.NewGuard(l, ratelimit.GuardConfig{OnFailure: ratelimit.FailOpen, BreakerFailures: 1, BreakerCoolDown: time.Minute})
	require.NoError(t, err)
	for _, lim := range []ratelimit.Limiter{l, guard} {
		var log errorLog
		h, next := limited(t, lim, httplimit.WithOnError(log.hook))
		w := do(h, "k", "")
		assert.Equal(t, http.StatusServiceUnavailable, w.Code, "%T", lim)
		assert.Equal(t, map[string][]string{"Retry-After": {"1"}}, fields(w.Header()), "%T", lim)
		assert.Equal(t, int64(0), next.calls.Load(), "%T", lim)
		require.Len(t, log.errs, 1, "%T", lim)
		assert.ErrorIs(t, log.errs[0], ratelimit.ErrPolicy, "%T", lim)
		assert.ErrorIs(t, log.errs[0], errBackend, "%T", lim)

		h, next = limited(t, lim, httplimit.WithPolicyErrorsPass())
		w = do(h, "k", "")
		assert.Equal(t, http.StatusOK, w.Code, "%T", lim)
		assert.Empty(t, fields(w.Header()), "%T", lim)
		assert.Equal(t, int64(1), next.calls.Load(), "%T", lim)
	}
	assert.Equal(t, ratelimit.BreakerClosed, guard.BreakerState(), "a failing PolicyFunc is no backend failure")
}
