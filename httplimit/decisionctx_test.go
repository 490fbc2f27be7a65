package httplimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// decisionRecorder is a handler that keeps what DecisionOf finds in each
// request it serves.
type decisionRecorder struct {
	found []bool
	seen  []ratelimit.Decision
}

func (d *decisionRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dec, ok := httplimit.DecisionOf(r.Context())
	d.found = append(d.found, ok)
	d.seen = append(d.seen, dec)
	w.WriteHeader(http.StatusOK)
}

func serveKey(h http.Handler, key string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Key", key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func headerKey(r *http.Request) (string, error) { return r.Header.Get("X-Key"), nil }

// The handler learns who answered its request: the backend while it is up,
// the Guard's fallback while it is down, so that it never settles a
// fallback's decision at the backend.
func TestTheHandlerLearnsWhoAnsweredItsRequest(t *testing.T) {
	backend := &downAdjuster{}
	fallback, _ := tokenBucket(t, ratelimit.PerSecond(1), 5)
	guard, err := ratelimit.NewGuard(backend, ratelimit.GuardConfig{OnFailure: ratelimit.FailOver, Fallback: fallback})
	require.NoError(t, err)
	up, _ := tokenBucket(t, ratelimit.PerSecond(1), 5)

	for _, tc := range []struct {
		name    string
		limiter ratelimit.Limiter
		source  ratelimit.Source
	}{
		{"backend up", up, ratelimit.FromBackend},
		{"backend down", guard, ratelimit.FromFallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &decisionRecorder{}
			m, err := httplimit.NewMiddleware(tc.limiter, headerKey, httplimit.WithDecisionContext())
			require.NoError(t, err)
			w := serveKey(m.Handler(rec), "k")
			require.Equal(t, http.StatusOK, w.Code)
			require.Equal(t, []bool{true}, rec.found)
			d := rec.seen[0]
			assert.Equal(t, tc.source, d.Source)
			assert.True(t, d.Allowed)
			assert.Equal(t, 5, d.Limit)
			assert.Equal(t, 4, d.Remaining)
		})
	}
}

// Without WithDecisionContext, or for a request passed on without a
// decision, the handler finds none.
func TestTheHandlerFindsNoDecisionUnlessOneWasMadeAndAskedFor(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(1), 5)
	rec := &decisionRecorder{}
	m, err := httplimit.NewMiddleware(l, headerKey)
	require.NoError(t, err)
	serveKey(m.Handler(rec), "k")

	skipped, err := httplimit.NewMiddleware(l, headerKey, httplimit.WithDecisionContext(),
		httplimit.WithSkip(func(*http.Request) bool { return true }))
	require.NoError(t, err)
	serveKey(skipped.Handler(rec), "k")

	failing, err := httplimit.NewMiddleware(&downAdjuster{}, headerKey, httplimit.WithDecisionContext())
	require.NoError(t, err)
	serveKey(failing.Handler(rec), "k")

	assert.Equal(t, []bool{false, false, false}, rec.found)
	_, ok := httplimit.DecisionOf(context.Background())
	assert.False(t, ok)
}

// A request a Shadow let through against a denial carries that Decision,
// which says it would have been denied and took nothing.
func TestTheHandlerSeesAShadowedDenial(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(1), 1)
	shadow, err := ratelimit.NewShadow(l, ratelimit.ShadowConfig{})
	require.NoError(t, err)
	rec := &decisionRecorder{}
	m, err := httplimit.NewMiddleware(shadow, headerKey, httplimit.WithDecisionContext(), httplimit.WithSettle())
	require.NoError(t, err)
	h := m.Handler(rec)
	serveKey(h, "k")
	serveKey(h, "k")
	require.Equal(t, []bool{true, true}, rec.found)
	assert.False(t, rec.seen[0].WouldDeny)
	assert.Equal(t, ratelimit.FromBackend, rec.seen[0].Source)
	assert.True(t, rec.seen[1].WouldDeny)
	assert.Equal(t, ratelimit.FromShadow, rec.seen[1].Source)
	assert.False(t, rec.seen[1].Enforced.Allowed)
}

// Nested Middlewares: the handler reads the innermost one's Decision.
func TestTheHandlerReadsTheInnermostDecision(t *testing.T) {
	outer, _ := tokenBucket(t, ratelimit.PerSecond(1), 10)
	inner, _ := tokenBucket(t, ratelimit.PerSecond(1), 3)
	mo, err := httplimit.NewMiddleware(outer, headerKey, httplimit.WithDecisionContext())
	require.NoError(t, err)
	mi, err := httplimit.NewMiddleware(inner, headerKey, httplimit.WithDecisionContext())
	require.NoError(t, err)
	rec := &decisionRecorder{}
	serveKey(mo.Handler(mi.Handler(rec)), "k")
	require.Equal(t, []bool{true}, rec.found)
	assert.Equal(t, 3, rec.seen[0].Limit)
}

// With WithDecisionContext, an allowed request costs two allocations more
// than without.
func BenchmarkDecisionContext(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		opts := []httplimit.Option{}
		if on {
			name, opts = "on", append(opts, httplimit.WithDecisionContext())
		}
		b.Run(name, func(b *testing.B) {
			l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1e8), 1<<30)
			require.NoError(b, err)
			m, err := httplimit.NewMiddleware(l, headerKey, opts...)
			require.NoError(b, err)
			h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.Header.Set("X-Key", "k")
			w := httptest.NewRecorder()
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, r)
			}
		})
	}
}
