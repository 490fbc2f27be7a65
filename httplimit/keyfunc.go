package httplimit

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
)

// KeyFunc returns the key a request is limited under: who is asking (a user
// id, an API key, a client address), so that each key has its own limit. It
// must be safe for concurrent use. An error answers the request without
// asking the limiter: 401 Unauthorized when it wraps ErrMissingCredential
// (no credential) and names a challenge (see ErrMissingCredential), 400
// Bad Request when it wraps ErrMissingCredential without one,
// ErrMalformedCredential or ErrInvalidRequest (the client's other
// mistakes), 500 Internal Server
// Error otherwise, or as WithKeyErrorHandler says.
type KeyFunc func(*http.Request) (string, error)

// ErrNoKey is wrapped by the errors of the KeyFuncs in this package when a
// request does not carry what they key it by.
var ErrNoKey = errors.New("httplimit: no rate-limit key in request")

// ErrInvalidRequest is wrapped by the errors of KeyFuncs and CostFuncs that
// are the client's mistake, which the Middleware answers 400 Bad Request
// (unless WithKeyErrorHandler says otherwise): a request without the
// header KeyByHeader keys it by, or a cost it declares that cannot be used.
// A KeyFunc or CostFunc of your own wraps it for such requests; any other
// error of theirs is the server's, answered 500.
var ErrInvalidRequest = errors.New("httplimit: the request cannot be rate-limited as sent")

// KeyByHeader returns a KeyFunc that keys a request by the value of its
// header field name (the first, if there are several). A request without the
// field, or whose value is empty, gets an error wrapping ErrNoKey and
// ErrInvalidRequest: the client's mistake, answered 400. The name is matched
// case-insensitively; a name that is not a valid field name makes every
// request get an error wrapping ErrNoKey alone: the server's mistake,
// answered 500.
//
// The KeyFunc is safe for concurrent use and does not allocate. Only key by
// a header the client cannot forge, or one whose value is a
// credential checked before the limit (an API key), since each new value is
// a fresh limit. The key is the value as sent: a Redis limiter keeps it in
// its keys' names, where whoever can list keys reads it, so key a
// credential by KeyByBearer, or by a KeyFunc of your own that hashes it.
func KeyByHeader(name string) KeyFunc {
	canonical := textproto.CanonicalMIMEHeaderKey(name)
	if !isToken(name) {
		err := fmt.Errorf("%w: %q is not a valid header field name", ErrNoKey, name)
		return func(*http.Request) (string, error) { return "", err }
	}
	missing := fmt.Errorf("%w: %w: header %s is missing or empty", ErrInvalidRequest, ErrNoKey, canonical)
	return func(r *http.Request) (string, error) {
		if v := r.Header[canonical]; len(v) > 0 && v[0] != "" {
			return v[0], nil
		}
		return "", missing
	}
}

// isToken reports whether s is an RFC 9110 token, the syntax of a field name.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}
