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
	clock := ratelimit.NewFakeClock(epoch)
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
	clock := ratelimit.NewFakeClock(epoch)
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

func TestWithPolicyWindowKeepsItsWindowForKeyedLimiters(t *testing.T) {
	p := &plans{per: map[string]ratelimit.Policy{"pro": {Limit: 100, Window: time.Hour}}}
	l, err := ratelimit.NewGCRA(10, time.Minute, ratelimit.WithPolicyFunc(p.policy))
	require.NoError(t, err)
	h, _ := limited(t, l, httplimit.WithPolicyWindow(5*time.Second))
	assert.Equal(t, `"default";q=100;w=5`, do(h, "pro", "").Header().Get("RateLimit-Policy"))
	assert.Equal(t, `"default";q=10;w=5`, do(h, "free", "").Header().Get("RateLimit-Policy"))
}

func TestAPolicyChangedAfterTheDecisionIsNotMixedIntoTheHeaders(t *testing.T) {
	// The limiter reads the policy first, the middleware second: the
	// second read says another limit, so the headers keep the decision's
	// limit and leave the window out.
	var calls int
	var mu sync.Mutex
	policy := func(context.Context, string) (ratelimit.Policy, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls%2 == 1 {
			return ratelimit.Policy{Limit: 10, Window: time.Minute}, nil
		}
		return ratelimit.Policy{Limit: 20, Window: time.Hour}, nil
	}
	l, err := ratelimit.NewGCRA(3, time.Second, ratelimit.WithPolicyFunc(policy))
	require.NoError(t, err)
	h, _ := limited(t, l)
	w := do(h, "k", "")
	assert.Equal(t, "10", w.Header().Get("RateLimit-Limit"))
	assert.Equal(t, `"default";q=10`, w.Header().Get("RateLimit-Policy"))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, 2, calls, "the premise: the limiter reads the policy once, the middleware once more")
}
