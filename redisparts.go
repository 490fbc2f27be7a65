package ratelimit

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/redis/go-redis/v9"
)

// redisParts decides a Composite's Redis parts: each request is one request
// of the batch script with a check per part, all or nothing, sent alone or
// coalesced with the Composite's other calls. It is immutable and safe for
// concurrent use.
type redisParts struct {
	parts []*redisLimiter
	route route
	send  *sender
}

// newRedisParts returns the Redis engine of limiters, or an error unless
// every one is a Redis limiter of this package and all share one client.
// The parts coalesce unless one of them was built WithoutCoalescing.
func newRedisParts(limiters []Limiter) (*redisParts, error) {
	rp := &redisParts{}
	specs := make([][3]any, len(limiters))
	noCoalesce := false
	for i, l := range limiters {
		var r *redisLimiter
		switch l := l.(type) {
		case *RedisTokenBucket:
			r = &l.r
		case *RedisGCRA:
			r = &l.r
		case *RedisFixedWindow:
			r = &l.r
		default:
			return nil, fmt.Errorf("part %d is a %T", i, l)
		}
		if r.client == nil {
			return nil, fmt.Errorf("part %d is a zero-value %T", i, l)
		}
		if r.tiers != nil {
			return nil, fmt.Errorf("part %d chooses its policy per key (WithPolicyFunc), which a Composite does not support", i)
		}
		if i > 0 && !sameClient(r.client, rp.parts[0].client) {
			return nil, fmt.Errorf("parts 0 and %d have different Redis clients", i)
		}
		rp.parts = append(rp.parts, r)
		specs[i] = r.spec
		noCoalesce = noCoalesce || r.send.co == nil
	}
	rp.route = routeOf(rp.parts[0].client)
	rp.send = newSender(rp.parts[0].client, specs, false, noCoalesce)
	return rp, nil
}

// observer returns part i's observer.
func (rp *redisParts) observer(i int) *observer { return &rp.parts[i].obs }

// request returns the request of the batch script for the parts' keys:
// their Redis keys, which must differ, and on a cluster or ring share a
// hash slot.
func (rp *redisParts) request(ctx context.Context, keys []string) (*pending, error) {
	p := &pending{ctx: ctx, key: rp.parts[0].prefix + keys[0]}
	if len(keys) > 1 {
		p.more = make([]string, len(keys)-1)
	}
	for i := 1; i < len(keys); i++ {
		k := rp.parts[i].prefix + keys[i]
		p.more[i-1] = k
		if k == p.key || slices.Contains(p.more[:i-1], k) {
			return nil, fmt.Errorf("%w: two parts have the same Redis key %q", ErrKeysApart, k)
		}
		if !sameShard(rp.route, k, p.key) {
			return nil, fmt.Errorf("%w: the parts' Redis keys %q and %q are in different hash slots (or ring shards), which one script call cannot touch; "+
				"give the keys one hash tag, as in \"{tenant}:user\" and \"{tenant}\" (see Part.Key)", ErrKeysApart, p.key, k)
		}
	}
	return p, nil
}

// sameClient reports whether a and b are the same client: equal values of
// one comparable type (a client of a type that cannot be compared is only
// itself).
func sameClient(a, b redis.Scripter) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// sameShard reports whether keys a and b can be touched by one script call
// on a client of route: in one hash slot on a cluster, with one hash tag on
// a ring, always on one server.
func sameShard(r route, a, b string) bool {
	switch r {
	case routeSlot:
		return hashSlot(a) == hashSlot(b)
	case routeTag:
		return hashTag(a) == hashTag(b)
	}
	return true
}

// key returns the Redis key of check i of p.
func (p *pending) checkKey(i int) string {
	if i == 0 {
		return p.key
	}
	return p.more[i-1]
}

// allow decides costs[i] for part i's key, all or nothing, and sets each
// part's Result.
func (rp *redisParts) allow(ctx context.Context, keys []string, costs []int, results []Result) error {
	p, err := rp.request(ctx, keys)
	if err != nil {
		return fmt.Errorf("ratelimit: Composite: %w", err)
	}
	p.costs = append([]int(nil), costs...) // p outlives the call's buffers
	return rp.do(p, results)
}

// settle applies to every part's key, or to none, the Settle whose cost
// minus taken is changes[i] for part i, and sets each part's Result.
func (rp *redisParts) settle(ctx context.Context, keys []string, changes []int, a adjustment, results []Result) error {
	p, err := rp.request(ctx, keys)
	if err != nil {
		return fmt.Errorf("ratelimit: Composite: %w", err)
	}
	p.costs = append([]int(nil), changes...) // p outlives the call's buffers
	p.op = newSettleOp(rp.route, p.key, a)
	return rp.do(p, results)
}

// reset empties every part's key, or none.
func (rp *redisParts) reset(ctx context.Context, keys []string) error {
	p, err := rp.request(ctx, keys)
	if err != nil {
		return fmt.Errorf("ratelimit: Composite: %w", err)
	}
	p.op = &adjustOp{reset: true}
	var buf partsBuffer
	_, _, results := buf.slices(len(keys))
	return rp.do(p, results)
}

// do sends p and sets results from its record of the reply: one check's
// record per part, all with the same verdict; or a refusal naming part i
// when its key does not hold its limiter's state.
func (rp *redisParts) do(p *pending, results []Result) error {
	if !rp.send.do(p) {
		return fmt.Errorf("ratelimit: Composite %q: %w: %w", p.key, ErrBackend, p.ctx.Err())
	}
	if p.err != nil {
		return fmt.Errorf("ratelimit: Composite %q: %w", p.key, backendErr(p.err))
	}
	line := p.line
	if i, reason, ok := refusedCheck(line); ok {
		if i >= 1 && i <= len(rp.parts) {
			r := rp.parts[i-1]
			return fmt.Errorf("ratelimit: Composite: %s %q: %w: %s", r.name, p.checkKey(i-1), ErrCorruptState, reason)
		}
		return fmt.Errorf("ratelimit: Composite %q: %w: unexpected reply from Redis script: %q", p.key, ErrBackend, line)
	}
	if len(line) != checkRecordSize*len(rp.parts) {
		return fmt.Errorf("ratelimit: Composite %q: %w: unexpected reply from Redis script: %q", p.key, ErrBackend, line)
	}
	for i, r := range rp.parts {
		res, err := parseLine(line[i*checkRecordSize:(i+1)*checkRecordSize], r.limit, true)
		if err != nil || i > 0 && res.Allowed != results[0].Allowed {
			return fmt.Errorf("ratelimit: Composite %q: %w: unexpected reply from Redis script: %q", p.key, ErrBackend, line)
		}
		results[i] = res
	}
	return nil
}
