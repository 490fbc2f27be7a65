package httplimit_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

func TestAKeyTheLimiterRefusesAsTooLongIsAKeyErrorAndNeverPasses(t *testing.T) {
	// A 1 MB X-Api-Key, or one just over the limiter's bound: whatever
	// the options, even WithPolicyErrorsPass, the request is answered as
	// a key error and its handler never runs.
	for _, key := range []string{strings.Repeat("k", 1<<20), strings.Repeat("k", 65)} {
		for name, opts := range map[string][]httplimit.Option{
			"default":              nil,
			"WithPolicyErrorsPass": {httplimit.WithPolicyErrorsPass()},
			"WithFailClosed":       {httplimit.WithFailClosed(time.Second)},
			"WithLeases":           {httplimit.WithLeases()},
		} {
			t.Run(name, func(t *testing.T) {
				tb, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 5, ratelimit.WithMaxKeyLength(64))
				require.NoError(t, err)
				var l ratelimit.Limiter = tb
				if name == "WithLeases" {
					c, err := ratelimit.NewConcurrency(5, time.Minute, ratelimit.WithMaxKeyLength(64))
					require.NoError(t, err)
					l = c
				}
				var onError int
				h, next := limited(t, l, append(opts, httplimit.WithOnError(func(*http.Request, error) { onError++ }))...)
				w := do(h, key, "")
				assert.Equal(t, http.StatusBadRequest, w.Code, "the client's key: the client's mistake")
				assert.Equal(t, int64(0), next.calls.Load())
				assert.Zero(t, onError, "a key error, not a limiter failure")

				var got error
				h, next = limited(t, l, append(opts, httplimit.WithKeyErrorHandler(func(w http.ResponseWriter, _ *http.Request, err error) {
					got = err
					w.WriteHeader(http.StatusRequestHeaderFieldsTooLarge)
				}))...)
				w = do(h, key, "")
				assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, w.Code)
				assert.ErrorIs(t, got, ratelimit.ErrInvalidKey)
				assert.Equal(t, int64(0), next.calls.Load())

				w = do(h, "short", "")
				assert.Equal(t, http.StatusOK, w.Code, "a key within the bound is limited as before")
			})
		}
	}
}
