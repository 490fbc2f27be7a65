package ratelimit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
)

// DefaultMaxKeyLength is the longest key, in bytes, that a limiter takes
// unless WithMaxKeyLength says otherwise: room for any user id, API key,
// address or composed key, and for a bearer token used as a key, while a
// client cannot make one key cost the store more than a few KiB.
const DefaultMaxKeyLength = 4096

// ErrInvalidKey is wrapped by the error of a call whose key is longer than
// the limiter's WithMaxKeyLength (DefaultMaxKeyLength by default). Such a
// call changes nothing, writes nothing and calls no PolicyFunc. It is of
// class ErrCaller: the key must change, not the backend, so a Guard
// returns it to the caller and its breaker never counts it.
var ErrInvalidKey error = &classed{"ratelimit: invalid key", ErrCaller}

// KeyDigest returns the form a key takes in errors and hook events by
// default (see WithKeysShown): "sha256:" and the first 16 hexadecimal
// digits (64 bits) of the SHA-256 of the key's bytes. It is the same for
// the same key in every process and release, so that the reports of one
// key can be told apart and matched (printf %s "$key" | sha256sum gives
// it), and it cannot be turned back into a key that could not be guessed:
// an API key or a token. A key that can be guessed (an IP address, a small
// user id) can be found by trying candidates. It is safe for concurrent
// use.
func KeyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	var b [len("sha256:") + 16]byte
	copy(b[:], "sha256:")
	hex.Encode(b[len("sha256:"):], sum[:8])
	return string(b[:])
}

// keyRules is how a limiter treats its callers' keys: how long they may be,
// and whether they are shown whole in errors and hook events. The zero
// value bounds nothing and shows keys as digests. It is immutable.
type keyRules struct {
	max   int  // the longest key in bytes; 0: unbounded
	shown bool // keys are shown whole (WithKeysShown)
}

// check returns the error, naming the limiter name, of a call on key when
// it is longer than the rules allow; nil otherwise.
func (k keyRules) check(name, key string) error {
	if k.max > 0 && len(key) > k.max {
		return k.refusal(name, key)
	}
	return nil
}

// tooLong reports whether key is longer than the rules allow.
func (k keyRules) tooLong(key string) bool { return k.max > 0 && len(key) > k.max }

// refusal is check's error.
func (k keyRules) refusal(name, key string) error {
	return fmt.Errorf("%w: %s: a key of %d bytes; at most %d (WithMaxKeyLength)", ErrInvalidKey, name, len(key), k.max)
}

// event returns key as an event for listener carries it: "" for a
// listener that ignores keys (see KeylessHooks), whole when shown, its
// digest otherwise.
func (k keyRules) event(listener any, key string) string {
	if _, keyless := listener.(interface{ IgnoresKeys() }); keyless {
		return ""
	}
	if k.shown {
		return key
	}
	return KeyDigest(key)
}

// quote returns key as an error names it: quoted when shown, its digest
// otherwise.
func (k keyRules) quote(key string) string {
	if k.shown {
		return strconv.Quote(key)
	}
	return KeyDigest(key)
}

// quoteStored returns stored, a Redis key whose caller's key is key and
// whose name of it starts at byte form, as an error names it: quoted whole
// when shown, and otherwise what comes before the caller's key quoted,
// "+" and the key's digest.
func (k keyRules) quoteStored(stored string, form int, key string) string {
	if k.shown {
		return strconv.Quote(stored)
	}
	return strconv.Quote(stored[:form]) + "+" + KeyDigest(key)
}

// both returns the rules of a call that several limiters of rules a and b
// serve (a Composite's parts): the shorter bound, and keys shown only when
// both show them.
func (k keyRules) both(b keyRules) keyRules {
	r := keyRules{max: k.max, shown: k.shown && b.shown}
	if r.max == 0 || b.max > 0 && b.max < r.max {
		r.max = b.max
	}
	return r
}
