package ratelimit

import (
	"context"
	"fmt"
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
// a client of route. A token goes in a key of the same hash slot as key (see
// tokenKey), which a cluster or ring requires.
func newSettleOp(r route, key string, a adjustment) (*adjustOp, error) {
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
		op.token = tokenKey(key, a.token)
		if !sameShard(r, op.token, key) {
			return nil, fmt.Errorf("key %q cannot carry a WithToken token on a Redis Cluster or Ring: "+
				"it has a '}' but no hash tag; give it one, as in \"{%s}\"", key, strings.ReplaceAll(key, "}", ""))
		}
	}
	return op, nil
}

// tokenKey returns the name of the Redis key that remembers token for key:
// tokenPrefix, key, ":" and token, with key put in braces when it has no
// hash tag of its own, so that both are in one hash slot (tokenPrefix has
// no braces). A key that has a '}' but no hash tag cannot be put in braces;
// its token key is then in another slot, which only a cluster or ring
// minds.
func tokenKey(key, token string) string {
	if hashTag(key) != key || strings.IndexByte(key, '}') >= 0 {
		return tokenPrefix + key + ":" + token
	}
	return tokenPrefix + "{" + key + "}:" + token
}

// Refund gives n units back to key's bucket. See Adjuster; ctx bounds the
// round trip.
func (b *RedisTokenBucket) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return b.Settle(ctx, key, n, 0, opts...)
}

// Settle replaces taken by cost on key's bucket. See Adjuster; ctx bounds
// the round trip.
func (b *RedisTokenBucket) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	if b == nil || b.r.client == nil {
		return Result{}, notBuilt("RedisTokenBucket")
	}
	return b.r.settle(ctx, key, taken, cost, opts)
}

// Reset fills key's bucket, deleting its Redis key. See Adjuster.
func (b *RedisTokenBucket) Reset(ctx context.Context, key string) error {
	if b == nil || b.r.client == nil {
		return notBuilt("RedisTokenBucket")
	}
	return b.r.reset(ctx, key)
}

// Refund gives n units back to key. See Adjuster; ctx bounds the round
// trip.
func (g *RedisGCRA) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return g.Settle(ctx, key, n, 0, opts...)
}

// Settle replaces taken by cost on key. See Adjuster; ctx bounds the round
// trip.
func (g *RedisGCRA) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	if g == nil || g.r.client == nil {
		return Result{}, notBuilt("RedisGCRA")
	}
	return g.r.settle(ctx, key, taken, cost, opts)
}

// Reset returns key to its full limit, deleting its Redis key. See
// Adjuster.
func (g *RedisGCRA) Reset(ctx context.Context, key string) error {
	if g == nil || g.r.client == nil {
		return notBuilt("RedisGCRA")
	}
	return g.r.reset(ctx, key)
}

// Refund gives n units back to key's window, if it is the one that took
// them. See Adjuster and TakenAt; ctx bounds the round trip.
func (w *RedisFixedWindow) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return w.Settle(ctx, key, n, 0, opts...)
}

// Settle replaces taken by cost in key's window. See Adjuster; ctx bounds
// the round trip.
func (w *RedisFixedWindow) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	if w == nil || w.r.client == nil {
		return Result{}, notBuilt("RedisFixedWindow")
	}
	return w.r.settle(ctx, key, taken, cost, opts)
}

// Reset ends key's window, deleting its Redis key. See Adjuster.
func (w *RedisFixedWindow) Reset(ctx context.Context, key string) error {
	if w == nil || w.r.client == nil {
		return notBuilt("RedisFixedWindow")
	}
	return w.r.reset(ctx, key)
}
