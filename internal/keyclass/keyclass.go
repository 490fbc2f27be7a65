// Package keyclass classifies the errors of key and cost functions, so
// that httplimit and grpclimit answer the same error alike: a request
// without its credential is unauthenticated (401, codes.Unauthenticated),
// one whose credential or cost is malformed is invalid (400,
// codes.InvalidArgument), and any other error is the server's (500,
// codes.Internal). It also reads Bearer credentials for both.
package keyclass

import (
	"errors"

	"github.com/ratelimit-go/ratelimit"
)

// ErrMissingCredential is wrapped by a key function's error when the
// request carries no credential at all: httplimit answers it 401, grpclimit
// codes.Unauthenticated.
var ErrMissingCredential = errors.New("the request carries no credential to key its rate limit by")

// ErrMalformedCredential is wrapped by a key function's error when the
// request carries a credential that cannot be read: httplimit answers it
// 400, grpclimit codes.InvalidArgument.
var ErrMalformedCredential = errors.New("the request's credential is malformed")

// Class is the class of a key or cost function's error.
type Class int

const (
	// Server is the server's mistake or failure: 500, codes.Internal.
	Server Class = iota
	// Unauthenticated is a request without its credential: 401,
	// codes.Unauthenticated.
	Unauthenticated
	// Invalid is the client's mistake: a malformed credential, a cost that
	// is not valid, a key longer than the limiter takes. 400,
	// codes.InvalidArgument.
	Invalid
)

// Of returns err's class. A missing credential wins over a malformed one;
// extra are further errors of class Invalid (httplimit's
// ErrInvalidRequest).
func Of(err error, extra ...error) Class {
	switch {
	case errors.Is(err, ErrMissingCredential):
		return Unauthenticated
	case errors.Is(err, ErrMalformedCredential), errors.Is(err, ratelimit.ErrInvalidCost), errors.Is(err, ratelimit.ErrInvalidKey):
		return Invalid
	}
	for _, e := range extra {
		if errors.Is(err, e) {
			return Invalid
		}
	}
	return Server
}

// challenger is an error that names the authentication challenge of its
// answer (an HTTP WWW-Authenticate value).
type challenger interface {
	Challenge() string
}

// Challenge returns the WWW-Authenticate value that err, or an error it
// wraps, names with a Challenge method, or "" if none does.
func Challenge(err error) string {
	var c challenger
	if errors.As(err, &c) {
		return c.Challenge()
	}
	return ""
}
