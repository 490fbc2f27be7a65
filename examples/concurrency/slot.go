package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
)

// holdSlot returns a handler that runs next while holding one unit of
// limiter for the request's key, and gives it back when next returns or
// panics. A request whose key has no unit free is answered 429 at once,
// with Retry-After; every answer carries the RateLimit fields. A request
// without a key is answered 400, and one the limiter cannot decide 503.
func holdSlot(limiter ratelimit.Acquirer, key httplimit.KeyFunc, logf func(string, ...any), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := key(r)
		if err != nil {
			answer(w, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		lease, d, err := limiter.Acquire(r.Context(), k, 1)
		if err != nil {
			logf("acquire for %s: %v", r.URL.Path, err)
			answer(w, http.StatusServiceUnavailable, map[string]any{"error": "the limiter is unavailable"})
			return
		}
		setFields(w.Header(), d)
		if !d.Allowed {
			answer(w, http.StatusTooManyRequests, map[string]any{
				"error": fmt.Sprintf("this key runs %d jobs already; retry when one ends", d.Limit),
			})
			return
		}
		// The release must happen even when the client has gone away
		// and r's context is done, or the unit would be held until the
		// lease's TTL passes.
		defer func() {
			if err := lease.Release(context.WithoutCancel(r.Context())); err != nil {
				logf("release %v: %v", lease, err)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// setFields sets the RateLimit fields of d on h, and Retry-After on a
// denial: the policy is limit jobs in flight (quota unit
// concurrent-requests), r the units free, and t the seconds until every
// lease held has expired, or, on a denial, until the first one has, which
// Retry-After says too (rounded up, at least 1). A job that ends frees its
// unit sooner.
func setFields(h http.Header, d ratelimit.Decision) {
	reset := seconds(d.ResetAfter)
	if !d.Allowed {
		reset = max(seconds(d.RetryAfter), 1)
		h.Set("Retry-After", strconv.FormatInt(reset, 10))
	}
	h.Set("RateLimit-Policy", fmt.Sprintf(`%q;q=%d;qu="concurrent-requests"`, policyName, d.Limit))
	h.Set("RateLimit", fmt.Sprintf(`%q;r=%d;t=%d`, policyName, d.Remaining, reset))
}

// seconds returns d in whole seconds, rounded up.
func seconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}
