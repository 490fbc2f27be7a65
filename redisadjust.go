package ratelimit

import (
	"strings"
	"time"
)

// adjustOp is a Settle or a Reset request for the batch script; a Settle's
// cost minus taken (> 0 takes more, < 0 gives back) is its request's n.
type adjustOp struct {
	reset bool
	age   int64
	// age is the µs since the units were taken, rounded up; -1 when not
	// known.
	token string // the Redis key that remembers a WithToken token; "" without one
}

// tokenPrefix starts the name of every Redis key that remembers a token,
// so that no limiter key (which starts with the limiter's prefix) can be
// one.
const tokenPrefix = "ratelimit:settled:"

// newSettleOp returns the Settle on the request whose first key is key, on
// a client of route r. A token goes in a key that the request's script
// call can touch on any client (see tokenKey).
func newSettleOp(r route, key string, a adjustment) *adjustOp {
	op := &adjustOp{age: -1}
	if a.hasTaken {
		// Rounded up, so that a refund never lands in a window that opened
		// after the units were taken; a zero or ancient time saturates.
		age := max(time.Since(a.takenAt), 0)
		op.age = int64(age / time.Microsecond)
		if age%time.Microsecond != 0 {
			op.age++
		}
	}
	if a.tokenSet {
		op.token = tokenKey(r, key, a.token)
	}
	return op
}

// tokenKey returns the name of the Redis key that remembers token for the
// Redis key key, on a client of route r: tokenPrefix, key, ":" and token,
// with key put in braces when it has no hash tag of its own and no '}', so
// that both are in one hash slot (tokenPrefix has no braces).
//
// That name is not in key's slot when key has a '}' but no hash tag, or is
// empty (which braces make "{}", no hash tag either). On a cluster, and
// through a client whose routing is unknown (routeAlone, which may be one),
// such a key gets instead tokenPrefix, its slot's tag from slotTags in
// braces, "#", key, ":" and token, in key's slot ("#" keeps it apart from
// the name of a key equal to the tag). A single server or a Ring keeps the
// name above: a Ring sends a script call to the shard of its first key,
// whose hash tag every key of the call shares (see sender.split), and only
// that call touches the token key, so the token is remembered on key's
// shard whatever its name.
func tokenKey(r route, key, token string) string {
	inSlot := hashTag(key) != key || (key != "" && strings.IndexByte(key, '}') < 0)
	if !inSlot && (r == routeSlot || r == routeAlone) {
		tag := slotTags[hashSlot(key)]
		return tokenPrefix + "{" + string(tag[:]) + "}#" + key + ":" + token
	}
	if hashTag(key) != key || strings.IndexByte(key, '}') >= 0 {
		return tokenPrefix + key + ":" + token
	}
	return tokenPrefix + "{" + key + "}:" + token
}
