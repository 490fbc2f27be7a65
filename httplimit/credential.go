package httplimit

import (
	"net/http"

	"github.com/ratelimit-go/ratelimit/internal/keyclass"
)

// ErrMissingCredential is wrapped by a KeyFunc's error when the request
// carries no credential to key it by (KeyByBearer's request without a
// Bearer credential, KeyByContext's without its value): the Middleware
// answers 401 Unauthorized with WWW-Authenticate when the error names a
// challenge (KeyByBearer's says "Bearer"), and 400 Bad Request when it
// names none, since a 401 must carry one (RFC 9110, section 15.5.2),
// unless WithKeyErrorHandler says otherwise. A KeyFunc of your own wraps it for such requests; an error
// in its chain with a method Challenge() string names the challenge
// (`Basic realm="api"`, say). It is the same error as grpclimit's
// ErrMissingCredential, answered codes.Unauthenticated there.
var ErrMissingCredential = keyclass.ErrMissingCredential

// ErrMalformedCredential is wrapped by a KeyFunc's error when the request
// carries a credential that cannot be read (KeyByBearer's Authorization
// field without a well-formed token): the Middleware answers 400 Bad
// Request, as for ErrInvalidRequest. It is the same error as grpclimit's
// ErrMalformedCredential, answered codes.InvalidArgument there.
var ErrMalformedCredential = keyclass.ErrMalformedCredential

// KeyByBearer returns a KeyFunc that keys a request by its Bearer
// credential (RFC 6750, section 2.1): an Authorization field of the scheme
// "Bearer", matched case-insensitively, then one space or more and the
// token.
//
// The key is "bearer:" and the unpadded base64url form of the first 16
// bytes of the token's SHA-256 (29 bytes), never the token itself: a key
// is stored by a Redis limiter, where anyone who can list keys would read
// every client's credential, and may reach logs and metrics. The hash is
// not keyed, unlike WithPartitionKey's: replicas need the same key for a
// token without sharing a secret, and a bearer token (an OAuth access
// token, an API key) has far too much entropy to be found from its hash
// by trying candidates. Key short or guessable credentials with a
// KeyFunc of your own that applies an HMAC under a secret.
//
// A request without an Authorization field, or with one of another scheme,
// gets an error wrapping ErrMissingCredential and ErrNoKey, answered 401
// Unauthorized with "WWW-Authenticate: Bearer"; one whose Bearer field has
// no token, a token that is not a b64token, or several Authorization field
// lines, gets an error wrapping ErrMalformedCredential and ErrNoKey,
// answered 400 Bad Request with `WWW-Authenticate: Bearer
// error="invalid_request"`. The KeyFunc does not check the token: put it
// behind the middleware that authenticates requests, or accept that each
// new token is a fresh limit. It is safe for concurrent use and allocates
// the key alone (and a copy of a token longer than 32 bytes).
func KeyByBearer() KeyFunc {
	errs := keyclass.NewBearerErrors("httplimit", ErrNoKey)
	return func(r *http.Request) (string, error) {
		return keyclass.Bearer(r.Header["Authorization"], errs)
	}
}
