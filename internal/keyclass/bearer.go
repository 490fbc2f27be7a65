package keyclass

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// BearerPrefix starts every key Bearer returns.
const BearerPrefix = "bearer:"

// bearerError is the error of a request without a usable Bearer
// credential: it wraps ErrMissingCredential or ErrMalformedCredential, and
// ErrNoKey of the package that reads it, and names its challenge.
type bearerError struct {
	class     error // ErrMissingCredential or ErrMalformedCredential
	noKey     error // the package's ErrNoKey
	msg       string
	challenge string
}

func (e *bearerError) Error() string     { return e.msg }
func (e *bearerError) Unwrap() []error   { return []error{e.class, e.noKey} }
func (e *bearerError) Challenge() string { return e.challenge }

// BearerErrors are the two errors Bearer returns, made once per key
// function so that a request without its credential costs no allocation.
type BearerErrors struct {
	Missing, Malformed error
}

// NewBearerErrors returns the errors of a Bearer key function of the
// package whose ErrNoKey is noKey, prefix naming it ("httplimit").
func NewBearerErrors(prefix string, noKey error) BearerErrors {
	return BearerErrors{
		Missing: &bearerError{class: ErrMissingCredential, noKey: noKey,
			msg:       prefix + ": no Bearer credential (Authorization: Bearer <token>)",
			challenge: "Bearer"},
		Malformed: &bearerError{class: ErrMalformedCredential, noKey: noKey,
			msg:       prefix + ": the Authorization field is not one well-formed Bearer credential",
			challenge: `Bearer error="invalid_request"`},
	}
}

// Bearer returns the key of the Bearer credential in values, the
// request's Authorization field lines (RFC 6750, section 2.1): "Bearer",
// matched case-insensitively, one space or more, and a b64token. The key
// is BearerPrefix and the unpadded base64url form of the first 16 bytes of
// the token's SHA-256, never the token: a key may be stored (in Redis),
// logged and shown. No field, or a field of another scheme, is a missing
// credential (errs.Missing); a Bearer field without a well-formed token, or
// several field lines, a malformed one (errs.Malformed).
func Bearer(values []string, errs BearerErrors) (string, error) {
	switch len(values) {
	case 0:
		return "", errs.Missing
	case 1:
	default:
		return "", errs.Malformed
	}
	v := values[0]
	const scheme = "bearer"
	if len(v) < len(scheme) || !strings.EqualFold(v[:len(scheme)], scheme) {
		return "", errs.Missing
	}
	rest := v[len(scheme):]
	if rest != "" && rest[0] != ' ' {
		return "", errs.Missing // another scheme, "Bearerx"
	}
	token := strings.TrimLeft(rest, " ")
	if token == rest || !isB64Token(token) {
		return "", errs.Malformed
	}
	sum := sha256.Sum256([]byte(token))
	var key [len(BearerPrefix) + 22]byte
	copy(key[:], BearerPrefix)
	base64.RawURLEncoding.Encode(key[len(BearerPrefix):], sum[:16])
	return string(key[:]), nil
}

// isB64Token reports whether s is RFC 6750's b64token:
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	i := 0
	for ; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/' {
			continue
		}
		break
	}
	if i == 0 {
		return false
	}
	for ; i < len(s); i++ {
		if s[i] != '=' {
			return false
		}
	}
	return true
}
