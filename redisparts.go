package ratelimit

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/redis/go-redis/v9"
)

// redisParts decides a Composite's Redis parts: each request is one request
// of the batch script with a check per part, all or nothing, sent alone or
// coalesced with the Composite's other calls. It is immutable and safe for
// concurrent use.
type redisParts struct {
	parts []*redisLimiter
	send  *redisbatch.Sender
	// keyed is whether a part was built WithPolicyFunc: each request then
	// carries the limit of each of its checks (the part's own, or its
	// key's), and a Reset resetLimits.
	keyed       bool
	resetLimits []*redisbatch.Limit
}

// newRedisParts returns the Redis engine of limiters, or an error unless
// every one is a Redis limiter of this package and all share one client.
// The parts coalesce unless one of them was built WithoutCoalescing.
func newRedisParts(limiters []Limiter) (*redisParts, error) {
	rp := &redisParts{}
	limits := make([]*redisbatch.Limit, len(limiters))
	coalesce := true
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
		if i > 0 && !sameClient(r.client, rp.parts[0].client) {
			return nil, fmt.Errorf("parts 0 and %d have different Redis clients", i)
		}
		rp.parts = append(rp.parts, r)
		limits[i] = r.own
		coalesce = coalesce && r.send.Coalesces()
		rp.keyed = rp.keyed || r.policyFunc != nil
	}
	if rp.keyed {
		rp.resetLimits = make([]*redisbatch.Limit, len(limits))
		for i, r := range rp.parts {
			rp.resetLimits[i] = r.own
			if r.policyFunc != nil {
				rp.resetLimits[i] = r.resetLimit
			}
		}
		limits = nil // each request carries its checks' limits
	}
	rp.send = newSender(rp.parts[0].client, limits, len(rp.parts), coalesce)
	return rp, nil
}

// policyFunc returns part i's PolicyFunc resolver; nil for a part of one
// policy.
func (rp *redisParts) policyFunc(i int) *policyFunc { return rp.parts[i].policyFunc }

// own returns part i's own policy in the script's numbers: its limit, and
// its param (µs per unit, or a window in ms).
func (rp *redisParts) own(i int) partRate {
	r := rp.parts[i]
	return partRate{limit: int64(r.limit), param: r.own.Param}
}

// limitsOf returns the script's limits of a request's checks whose parts'
// policies are rates, when a part was built WithPolicyFunc; nil otherwise.
func (rp *redisParts) limitsOf(rates []partRate) []*redisbatch.Limit {
	if !rp.keyed {
		return nil
	}
	limits := make([]*redisbatch.Limit, len(rp.parts))
	for i, r := range rp.parts {
		limits[i] = r.own
		if r.policyFunc != nil {
			limits[i] = r.limits.Get(rates[i].limit, rates[i].param)
		}
	}
	return limits
}

// observer returns part i's observer.
func (rp *redisParts) observer(i int) *observer { return &rp.parts[i].obs }

// request returns the request of the batch script for the parts' keys:
// their Redis keys, which must differ, and on a cluster or ring share a
// hash slot.
func (rp *redisParts) request(ctx context.Context, keys []string) (*redisbatch.Request, error) {
	p := &redisbatch.Request{Ctx: ctx, Key: rp.parts[0].prefix + keys[0]}
	if len(keys) > 1 {
		p.More = make([]string, len(keys)-1)
	}
	for i := 1; i < len(keys); i++ {
		k := rp.parts[i].prefix + keys[i]
		p.More[i-1] = k
		if k == p.Key || slices.Contains(p.More[:i-1], k) {
			return nil, fmt.Errorf("%w: two parts have the same Redis key %q", ErrKeysApart, k)
		}
		if !rp.send.SameShard(k, p.Key) {
			return nil, fmt.Errorf("%w: the parts' Redis keys %q and %q are in different hash slots (or ring shards), which one script call cannot touch; "+
				"give the keys one hash tag, as in \"{tenant}:user\" and \"{tenant}\" (see Part.Key)", ErrKeysApart, p.Key, k)
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

// checkKey returns the Redis key of check i of p.
func checkKey(p *redisbatch.Request, i int) string {
	if i == 0 {
		return p.Key
	}
	return p.More[i-1]
}

// allow decides costs[i] for part i's key, all or nothing, each part by
// its policy in rates (nil: each part's own), and sets each part's Result.
func (rp *redisParts) allow(ctx context.Context, keys []string, costs []int, rates []partRate, results []Result) error {
	p, err := rp.request(ctx, keys)
	if err != nil {
		return fmt.Errorf("ratelimit: Composite: %w", err)
	}
	p.Costs = append([]int(nil), costs...) // p outlives the call's buffers
	p.Limits = rp.limitsOf(rates)
	return rp.do(p, rates, results)
}

// settle applies to every part's key, or to none, the Settle whose cost
// minus taken is changes[i] for part i, each part by its policy in rates
// (nil: each part's own), and sets each part's Result.
func (rp *redisParts) settle(ctx context.Context, keys []string, changes []int, a adjustment, rates []partRate, results []Result) error {
	p, err := rp.request(ctx, keys)
	if err != nil {
		return fmt.Errorf("ratelimit: Composite: %w", err)
	}
	p.Costs = append([]int(nil), changes...) // p outlives the call's buffers
	p.Limits = rp.limitsOf(rates)
	settleRequest(rp.send, p, a)
	return rp.do(p, rates, results)
}

// reset empties every part's key, or none.
func (rp *redisParts) reset(ctx context.Context, keys []string) error {
	p, err := rp.request(ctx, keys)
	if err != nil {
		return fmt.Errorf("ratelimit: Composite: %w", err)
	}
	p.Op, p.Limits = redisbatch.Reset, rp.resetLimits
	var buf partsBuffer
	_, _, results := buf.slices(len(keys))
	return rp.do(p, nil, results)
}

// do sends p and sets results from its record of the reply: one check's
// verdict per part, all with the same verdict, of the part's limit in
// rates (nil: its own); or a refusal naming part i when its key does not
// hold its limiter's state.
func (rp *redisParts) do(p *redisbatch.Request, rates []partRate, results []Result) error {
	if !rp.send.Do(p) {
		return fmt.Errorf("ratelimit: Composite %q: %w: %w", p.Key, ErrBackend, p.Ctx.Err())
	}
	if p.Err != nil {
		return fmt.Errorf("ratelimit: Composite %q: %w", p.Key, backendErr(p.Err))
	}
	record := p.Record
	if i, reason, ok := record.Refusal(); ok {
		if i >= 1 && i <= len(rp.parts) {
			r := rp.parts[i-1]
			return fmt.Errorf("ratelimit: Composite: %s %q: %w: %s", r.name, checkKey(p, i-1), ErrCorruptState, reason)
		}
		return fmt.Errorf("ratelimit: Composite %q: %w: unexpected reply from Redis script: %q", p.Key, ErrBackend, record)
	}
	if n, ok := record.Checks(); !ok || n != len(rp.parts) {
		return fmt.Errorf("ratelimit: Composite %q: %w: unexpected reply from Redis script: %q", p.Key, ErrBackend, record)
	}
	for i, r := range rp.parts {
		limit := r.limit
		if rates != nil {
			limit = int(rates[i].limit)
		}
		res, err := resultOf(record.Check(i), limit, true)
		if err != nil || i > 0 && res.Allowed != results[0].Allowed {
			return fmt.Errorf("ratelimit: Composite %q: %w: unexpected reply from Redis script: %q", p.Key, ErrBackend, record)
		}
		results[i] = res
	}
	return nil
}
