package httplimit

import (
	"fmt"
	"net/http"
)

// KeyByContext returns a KeyFunc that keys a request by the value stored
// under key in its context, such as the user id an authentication middleware
// put there before this one. The value must be a non-empty string or a
// non-nil fmt.Stringer whose String is not empty. A request without one
// (or with an empty one) gets an error wrapping ErrMissingCredential and
// ErrNoKey, answered 400 Bad Request: the authentication middleware in
// front let through a request it did not authenticate, and a 401 must name
// a challenge, which the KeyFunc cannot know (answer one with
// WithKeyErrorHandler). One whose value is of another type gets an error wrapping
// ErrNoKey alone: the server's mistake, answered 500.
// The KeyFunc is safe for concurrent use as far as the value's String method
// is.
func KeyByContext(key any) KeyFunc {
	missing := fmt.Errorf("%w: %w: no value in the request's context under key %v", ErrMissingCredential, ErrNoKey, key)
	return func(r *http.Request) (string, error) {
		switch v := r.Context().Value(key).(type) {
		case nil:
			return "", missing
		case string:
			if v != "" {
				return v, nil
			}
			return "", missing
		case fmt.Stringer:
			// A nil pointer's String method would likely panic.
			if isNil(v) {
				return "", missing
			}
			if s := v.String(); s != "" {
				return s, nil
			}
			return "", missing
		default:
			return "", fmt.Errorf("%w: the request's context value under key %v is a %T, not a string or fmt.Stringer", ErrNoKey, key, v)
		}
	}
}
