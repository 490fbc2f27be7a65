package httplimit

import (
	"fmt"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
)

// minPartitionSecret is the shortest secret WithPartitionKey takes.
const minPartitionSecret = ratefields.MinSecret

// WithPartitionKey makes every item of RateLimit (and of RateLimit-Shadow)
// carry the draft's partition key, pk
// (draft-ietf-httpapi-ratelimit-headers-11, sections 3.1.4 and 4.1.3): a
// byte sequence that names the quota partition the request counted in, so
// that a client acting for several users or resources can tell their
// quotas apart. It is never the rate-limit key itself, which may be a
// secret (an API key) or personal (an address, a user id), as the draft's
// section 6.1 asks: pk is the first 16 bytes of HMAC-SHA256 under secret of
// the key the KeyFunc returned, so
//
//	RateLimit: "default";r=3;t=1;pk=:3q2+7wXb8cS1t0tE0m1lZA==:
//
// Replicas given the same secret send the same pk for a key, and a key's
// pk changes with the secret. Without the secret, nobody can tell a key
// from its pk, nor find it by trying candidates (every IPv4 address, say).
// A Composite's parts keyed by Part.Key count in partitions derived from
// the request's key; pk names that key. A secret shorter than 16 bytes is
// an error; the option copies it.
//
// It costs an HMAC per decided request (about a microsecond and four
// allocations). Without it, no pk is sent.
func WithPartitionKey(secret []byte) Option {
	return func(s *settings) error {
		if len(secret) < minPartitionSecret {
			return fmt.Errorf("%w: httplimit: WithPartitionKey: a secret of %d bytes; at least %d", ratelimit.ErrInvalidConfig, len(secret), minPartitionSecret)
		}
		s.partition = &partitioner{secret: append([]byte(nil), secret...)}
		return nil
	}
}

// partitioner makes the pk parameter of a Middleware's items. It is
// immutable.
type partitioner struct {
	secret []byte
}

// param returns the pk parameter of key, ";pk=:...:", or "" for a nil p.
func (p *partitioner) param(key string) string {
	if p == nil {
		return ""
	}
	return ratefields.PartitionKey(p.secret, key)
}
