package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// shadowField is the field WithShadowHeader adds.
const shadowField = "RateLimit-Shadow"

// shadowHooks counts the decisions a Shadow reports, by Source.
type shadowHooks struct {
	ratelimit.NopHooks
	mu      sync.Mutex
	sources []ratelimit.Source
}

func (h *shadowHooks) Decided(ev ratelimit.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sources = append(h.sources, ev.Source)
}

// shadowed returns a Shadow, shadowing, around a token bucket of capacity
// 2 refilling 1 a second on a fake clock, and the bucket.
func shadowed(t *testing.T, hooks ratelimit.Hooks) (*ratelimit.Shadow, *ratelimit.TokenBucket) {
	t.Helper()
	bucket, clock := tokenBucket(t, ratelimit.PerSecond(1), 2)
	s, err := ratelimit.NewShadow(bucket, ratelimit.ShadowConfig{Hooks: hooks, Clock: clock})
	require.NoError(t, err)
	return s, bucket
}

// peekRemaining returns what bucket has left for key.
func peekRemaining(t *testing.T, l ratelimit.Limiter, key string) int {
	t.Helper()
	res, err := l.Allow(context.Background(), key, 0)
	require.NoError(t, err)
	return res.Remaining
}

// Through a shadowing limiter no request is denied; with WithShadowHeader,
// those that would have been carry RateLimit-Shadow, the RateLimit value of
// the denial, and the others do not.
func TestShadowNeverDeniesAndMarksWouldDenyResponses(t *testing.T) {
	hooks := &shadowHooks{}
	s, bucket := shadowed(t, hooks)
	h, next := limited(t, s, httplimit.WithShadowHeader())

	for i := 1; i <= 2; i++ {
		w := do(h, "alice", "")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i)
		assert.Empty(t, w.Header().Values(shadowField), "request %d", i)
	}
	for i := 3; i <= 5; i++ {
		w := do(h, "alice", "")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i)
		assert.Equal(t, []string{`"default";r=0;t=1`}, w.Header().Values(shadowField), "request %d", i)
		assert.Equal(t, map[string][]string{
			"RateLimit-Limit":     {"2"},
			"RateLimit-Remaining": {"0"},
			"RateLimit-Reset":     {"2"},
			"RateLimit-Policy":    {`"default";q=2;w=2`},
			"RateLimit":           {`"default";r=0;t=1`}, // the next token in 1 s
		}, fields(w.Header()), "request %d: the fields of an allowed request, no Retry-After", i)
	}
	assert.Equal(t, int64(5), next.calls.Load())
	assert.Equal(t, 0, peekRemaining(t, bucket, "alice"), "spent as enforced: two taken, three denials took nothing")
	assert.Equal(t, []ratelimit.Source{
		ratelimit.FromBackend, ratelimit.FromBackend,
		ratelimit.FromShadow, ratelimit.FromShadow, ratelimit.FromShadow,
	}, hooks.sources)
}

// Without WithShadowHeader, a would-be denial looks like any allowed
// response.
func TestShadowHeaderOnlyWithTheOption(t *testing.T) {
	s, _ := shadowed(t, nil)
	h, next := limited(t, s)
	for i := 1; i <= 4; i++ {
		w := do(h, "alice", "")
		require.Equal(t, http.StatusOK, w.Code, "request %d", i)
		assert.Empty(t, w.Header().Values(shadowField), "request %d", i)
		assert.Empty(t, w.Header().Values("Retry-After"), "request %d", i)
	}
	assert.Equal(t, int64(4), next.calls.Load())
}

// Flipping the Shadow to enforce makes the middleware deny from the next
// request on, without RateLimit-Shadow; flipping it back lets them through.
func TestShadowFlippedToEnforceAnswers429(t *testing.T) {
	s, _ := shadowed(t, nil)
	h, next := limited(t, s, httplimit.WithShadowHeader())
	for range 3 {
		require.Equal(t, http.StatusOK, do(h, "alice", "").Code)
	}

	s.SetEnforce(true)
	w := do(h, "alice", "")
	assert.Equal(t, http.StatusTooManyRequests, w.Code)
	assert.Equal(t, "1", w.Header().Get("Retry-After"))
	assert.Equal(t, `"default";r=0;t=1`, w.Header().Get("RateLimit"))
	assert.Empty(t, w.Header().Values(shadowField))
	assert.Equal(t, int64(3), next.calls.Load())

	s.SetEnforce(false)
	w = do(h, "alice", "")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"default";r=0;t=1`, w.Header().Get(shadowField))
	assert.Equal(t, int64(4), next.calls.Load())
}

// Through a Shadow around a Composite, every policy is listed, and
// RateLimit-Shadow names the one that would have denied.
func TestShadowAroundACompositeNamesTheDenyingPolicy(t *testing.T) {
	c, _ := realComposite(t)
	s, err := ratelimit.NewShadow(c, ratelimit.ShadowConfig{})
	require.NoError(t, err)
	h, next := limited(t, s, httplimit.WithShadowHeader())

	for range 2 {
		w := do(h, "alice", "")
		require.Equal(t, http.StatusOK, w.Code)
		assert.Empty(t, w.Header().Values(shadowField))
	}
	w := do(h, "alice", "")
	require.Equal(t, http.StatusOK, w.Code)
	assert.Equal(t, `"per-second";r=0;t=1`, w.Header().Get(shadowField))
	assert.Equal(t, twoPolicyList, w.Header().Get("RateLimit-Policy"))
	assert.Empty(t, w.Header().Values("Retry-After"))
	assert.Equal(t, int64(3), next.calls.Load())
}

// A request let through against a denial took nothing, so it is not
// refunded even when the rule says so: the key keeps what enforcing would
// have left it.
func TestShadowWouldDenyRequestsAreNotAdjusted(t *testing.T) {
	s, bucket := shadowed(t, nil)
	var hooked []error
	m, err := httplimit.NewMiddleware(s, httplimit.KeyByHeader(keyHeader),
		httplimit.WithRefund(func(_ *http.Request, status int) bool { return status >= 500 }),
		httplimit.WithOnError(func(_ *http.Request, err error) { hooked = append(hooked, err) }))
	require.NoError(t, err)
	fail := false
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if fail {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))

	for range 2 {
		require.Equal(t, http.StatusOK, do(h, "alice", "").Code)
	}
	fail = true
	require.Equal(t, http.StatusInternalServerError, do(h, "alice", "").Code)
	assert.Equal(t, 0, peekRemaining(t, bucket, "alice"), "a would-be denial is not refunded")
	assert.Empty(t, hooked)

	// An allowed request that fails is refunded as before.
	s.SetEnforce(true)
	require.NoError(t, bucket.Reset(context.Background(), "alice"))
	require.Equal(t, http.StatusInternalServerError, do(h, "alice", "").Code)
	assert.Equal(t, 2, peekRemaining(t, bucket, "alice"))
}

// A Shadow changes verdicts, not errors: a limiter error goes to WithOnError
// and fails open (or closed) as without it.
func TestShadowPassesLimiterErrorsToOnError(t *testing.T) {
	down := errors.New("down")
	s, err := ratelimit.NewShadow(&stubLimiter{err: down}, ratelimit.ShadowConfig{})
	require.NoError(t, err)
	var hooked []error
	h, next := limited(t, s, httplimit.WithShadowHeader(),
		httplimit.WithOnError(func(_ *http.Request, err error) { hooked = append(hooked, err) }))
	w := do(h, "alice", "")
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Empty(t, fields(w.Header()))
	assert.Empty(t, w.Header().Values(shadowField))
	assert.Equal(t, int64(1), next.calls.Load())
	require.Len(t, hooked, 1)
	assert.ErrorIs(t, hooked[0], down)

	h, _ = limited(t, s, httplimit.WithFailClosed(time.Second))
	assert.Equal(t, http.StatusServiceUnavailable, do(h, "alice", "").Code)
}

// WithShadowHeader applies to any limiter: RateLimit-Shadow is sent when
// the Decision says a Shadow let the request through against a denial,
// also through a Guard or a DenyCache around the Shadow; a limiter without
// a Shadow denies, and never sends it.
func TestWithShadowHeaderAppliesToAnyLimiter(t *testing.T) {
	bucket, _ := tokenBucket(t, ratelimit.PerSecond(1), 2)
	h, next := limited(t, bucket, httplimit.WithShadowHeader())
	for i, code := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		w := do(h, "alice", "")
		require.Equal(t, code, w.Code, "request %d", i)
		assert.Empty(t, w.Header().Values(shadowField), "request %d", i)
	}
	assert.Equal(t, int64(2), next.calls.Load())

	decorators := []struct {
		name string
		wrap func(*ratelimit.Shadow) (ratelimit.Limiter, error)
	}{
		{"Guard", func(s *ratelimit.Shadow) (ratelimit.Limiter, error) {
			return ratelimit.NewGuard(s, ratelimit.GuardConfig{})
		}},
		{"DenyCache", func(s *ratelimit.Shadow) (ratelimit.Limiter, error) {
			return ratelimit.NewDenyCache(s, ratelimit.DenyCacheConfig{})
		}},
	}
	for _, dec := range decorators {
		t.Run(dec.name, func(t *testing.T) {
			s, _ := shadowed(t, nil)
			l, err := dec.wrap(s)
			require.NoError(t, err)
			h, next := limited(t, l, httplimit.WithShadowHeader())
			for i := 1; i <= 2; i++ {
				w := do(h, "alice", "")
				require.Equal(t, http.StatusOK, w.Code, "request %d", i)
				assert.Empty(t, w.Header().Values(shadowField), "request %d", i)
			}
			for i := 3; i <= 4; i++ {
				w := do(h, "alice", "")
				require.Equal(t, http.StatusOK, w.Code, "request %d", i)
				assert.Equal(t, []string{`"default";r=0;t=1`}, w.Header().Values(shadowField), "request %d", i)
				assert.Equal(t, `"default";r=0;t=1`, w.Header().Get("RateLimit"), "request %d", i)
			}
			assert.Equal(t, int64(4), next.calls.Load())
		})
	}
}
