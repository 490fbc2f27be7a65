package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

func TestNewMiddlewareRejectsBadArguments(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(2), 10)
	key := httplimit.KeyByHeader(keyHeader)
	cases := []struct {
		name    string
		limiter ratelimit.Limiter
		key     httplimit.KeyFunc
		opts    []httplimit.Option
		want    string
	}{
		{"nil limiter", nil, key, nil, "nil limiter"},
		{"typed nil limiter", (*ratelimit.TokenBucket)(nil), key, nil, "nil limiter"},
		{"typed nil Redis limiter", (*ratelimit.RedisTokenBucket)(nil), key, nil, "nil limiter"},
		{"nil key func", l, nil, nil, "nil KeyFunc"},
		{"nil option", l, key, []httplimit.Option{nil}, "option 0 is nil"},
		{"empty policy name", l, key, []httplimit.Option{httplimit.WithPolicyName("")}, "empty policy name"},
		{"policy name with newline", l, key, []httplimit.Option{httplimit.WithPolicyName("a\nb")}, "printable ASCII"},
		{"policy name with DEL", l, key, []httplimit.Option{httplimit.WithPolicyName("a\x7f")}, "printable ASCII"},
		{"policy name not ASCII", l, key, []httplimit.Option{httplimit.WithPolicyName("per-user-ユーザー")}, "printable ASCII"},
		{"unknown header style", l, key, []httplimit.Option{httplimit.WithHeaderStyle(7)}, "unknown header style"},
		{"negative header style", l, key, []httplimit.Option{httplimit.WithHeaderStyle(-1)}, "unknown header style"},
		{"negative policy window", l, key, []httplimit.Option{httplimit.WithPolicyWindow(-time.Second)}, "policy window"},
		{"nil cost func", l, key, []httplimit.Option{httplimit.WithCost(nil)}, "nil CostFunc"},
		{"nil skip func", l, key, []httplimit.Option{httplimit.WithSkip(nil)}, "WithSkip"},
		{"nil error hook", l, key, []httplimit.Option{httplimit.WithOnError(nil)}, "WithOnError"},
		{"negative fail-closed retry", l, key, []httplimit.Option{httplimit.WithFailClosed(-time.Second)}, "WithFailClosed"},
		{"nil key error handler", l, key, []httplimit.Option{httplimit.WithKeyErrorHandler(nil)}, "WithKeyErrorHandler"},
		{"nil denied handler", l, key, []httplimit.Option{httplimit.WithDeniedHandler(nil)}, "WithDeniedHandler"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := httplimit.NewMiddleware(tc.limiter, tc.key, tc.opts...)
			require.Error(t, err)
			assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, m)
		})
	}
}

func TestNewMiddlewareAcceptsPrintablePolicyNames(t *testing.T) {
	l, _ := tokenBucket(t, ratelimit.PerSecond(2), 10)
	for _, name := range []string{"default", " ", "per user", `a"b\c`, "~!#$%&'()*+,-./:;<=>?@[]^_`{|}"} {
		_, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithPolicyName(name))
		assert.NoError(t, err, "%q", name)
	}
}

func TestHandlerWithNilNextAnswers500WithoutAskingTheLimiter(t *testing.T) {
	stub := &stubLimiter{res: ratelimit.Result{Allowed: true, Limit: 1, Remaining: 1}}
	m, err := httplimit.NewMiddleware(stub, httplimit.KeyByHeader(keyHeader))
	require.NoError(t, err)

	for _, next := range []http.Handler{nil, http.HandlerFunc(nil), (*counter)(nil)} {
		w := do(m.Handler(next), "k", "")
		assert.Equal(t, http.StatusInternalServerError, w.Code)
		assert.Contains(t, w.Body.String(), "nil next handler")
	}
	assert.Equal(t, 0, stub.callCount())
}

func TestUnconstructedMiddlewareAnswers500(t *testing.T) {
	for name, m := range map[string]*httplimit.Middleware{"nil": nil, "zero": {}} {
		t.Run(name, func(t *testing.T) {
			next := &counter{}
			w := do(m.Handler(next), "k", "")
			assert.Equal(t, http.StatusInternalServerError, w.Code)
			assert.Contains(t, w.Body.String(), "not made by NewMiddleware")
			assert.Equal(t, int64(0), next.calls.Load())
		})
	}
}
