package httplimit

import (
	"crypto/rand"
	"encoding/base64"
	"strconv"
	"sync/atomic"
)

// tokens makes the tokens of a Middleware's adjustments (see
// Middleware.adjust): one per request, unique among every Middleware's,
// whatever the process or replica, and nothing a client chooses. Each is a
// random prefix drawn when the Middleware is built, 96 bits in base64, a
// dot, and the number of the adjustment in base 36: at most 30 bytes.
//
// Its only mutable state is the counter; it is safe for concurrent use.
type tokens struct {
	prefix string
	seq    atomic.Uint64
}

// newTokens returns a tokens of a fresh random prefix. crypto/rand's Read
// does not fail (the program stops when the system has no randomness to
// give).
func newTokens() *tokens {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return &tokens{prefix: base64.RawURLEncoding.EncodeToString(b[:]) + "."}
}

// next returns a token no adjustment of any Middleware has had.
func (t *tokens) next() string {
	return t.prefix + strconv.FormatUint(t.seq.Add(1), 36)
}
