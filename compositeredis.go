package ratelimit

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/redis/go-redis/v9"
)

// redisParts decides a Composite's Redis parts: each request is one request
// of the batch script with a check per part, all or nothing, sent alone or
// coalesced with the Composite's other calls. A part that limits units in
// flight (its kind's inFlight) is one check among them, which takes its
// units under a lease of that limiter's naming. It asks each part's
// redisPart and tells no kind from another. It is immutable and safe for
// concurrent use.
type redisParts struct {
	parts []*redisLimiter
	asks  []redisPart // each part's limiter as a part (see redisPart)
	owns  []partRate  // each part's own policy in the script's numbers
	send  *redisbatch.Sender
	debts []int64 // each part's most debt in units under its own policy
	// inFlight is the index of the part that limits units in flight, -1
	// without one; holder is that part's limiter, which names and
	// releases its leases.
	inFlight int
	holder   leaseNamer
	// keyed is whether a part was built WithPolicyFunc or its limit
	// changes with its window (see redisPart.windowed): each request then
	// carries the limit of each of its checks (the part's own, or its
	// key's, or its window's).
	keyed bool
	// keys shows keys in errors as the Composite does: whole only when
	// every part shows them (see WithKeysShown).
	keys keyRules
}

// redisPartLimiter is a Redis limiter that can be a Composite's part: every
// Redis limiter of this package, each in its kind's declaration file.
type redisPartLimiter interface {
	remoteEngine
	// redisPart returns the limiter as a Composite's part; call it on a
	// built limiter only.
	redisPart() redisPart
}

// redisPart is a Redis limiter as a Composite's part, as its kind's
// declaration file gives it (redisPartLimiter.redisPart): what a Composite's
// request asks of it beyond its redisLimiter, each for a policy r in the
// script's numbers (the part's own, or its key's).
type redisPart interface {
	// own returns the part's own policy: its limit, and its param (µs per
	// unit, a window in ms, a lease TTL in µs, or a calendar period, with
	// its zone).
	own() partRate
	// key returns the Redis key of key under r, as the limiter alone
	// names it.
	key(key string, r partRate) string
	// segmented reports whether the part's Redis keys name their key's
	// policy, so that they have no fixed prefix.
	segmented() bool
	// windowed reports whether the part's limit in the script changes
	// with its window, so that every request must carry it.
	windowed() bool
	// limit returns the script's limit of a request under r; resetLimit a
	// Reset's.
	limit(r partRate) *redisbatch.Limit
	resetLimit(r partRate) *redisbatch.Limit
	// age returns the µs from takenAt to now on the part's own clock, and
	// true, when the part reads its windows from a clock of its own; 0 and
	// false otherwise, the script's time being the request's.
	age(takenAt time.Time) (int64, bool)
}

// plainPart is a Redis limiter whose policy is its limit and param alone
// (see redisPart).
type plainPart struct{ r *redisLimiter }

func (p plainPart) own() partRate                     { return partRate{limit: int64(p.r.limit), param: p.r.own.Param} }
func (p plainPart) key(key string, r partRate) string { return p.r.redisKey(key, r.param) }
func (p plainPart) segmented() bool                   { return p.r.segOf != nil }
func (p plainPart) windowed() bool                    { return false }
func (p plainPart) age(time.Time) (int64, bool)       { return 0, false }

func (p plainPart) limit(r partRate) *redisbatch.Limit {
	if p.r.policyFunc == nil {
		return p.r.own
	}
	return p.r.limits.Get(r.limit, r.param)
}

// resetLimit is the limiter's own: a Reset reads the key's state whatever
// its policy (see redisLimiter.resetLimit).
func (p plainPart) resetLimit(partRate) *redisbatch.Limit {
	if p.r.policyFunc == nil {
		return p.r.own
	}
	return p.r.resetLimit
}

// leaseNamer is a Redis limiter of units in flight: it names the leases a
// Composite's request takes its units under, and releases them.
type leaseNamer interface {
	leaseHolder
	newLease() (id uint64, name string)
}

// newRedisParts returns the Redis engine of limiters, or an error unless
// every one is a Redis limiter of this package and all share one client.
// The parts coalesce unless one of them was built WithoutCoalescing.
func newRedisParts(limiters []Limiter) (*redisParts, error) {
	rp := &redisParts{inFlight: -1}
	limits := make([]*redisbatch.Limit, len(limiters))
	coalesce := true
	for i, l := range limiters {
		e, ok := engineOf(l)
		re, remote := e.(redisPartLimiter)
		if !ok || !remote {
			return nil, fmt.Errorf("part %d is a %T", i, l)
		}
		r := re.remote()
		if r == nil || r.client == nil {
			return nil, fmt.Errorf("part %d is a zero-value %T", i, l)
		}
		if i > 0 && !sameClient(r.client, rp.parts[0].client) {
			return nil, fmt.Errorf("parts 0 and %d have different Redis clients", i)
		}
		if i > 0 && !sameCallerClock(r.clock, rp.parts[0].clock) {
			// One script call decides every part on one time: the parts
			// must agree on whose clock that is.
			return nil, fmt.Errorf("parts 0 and %d decide on different clocks (%s and %s)", i, clockName(rp.parts[0].clock), clockName(r.clock))
		}
		if h, ok := l.(leaseNamer); ok && e.kindOf().inFlight() && rp.inFlight < 0 { // NewComposite refuses a second one
			rp.inFlight, rp.holder = i, h
		}
		if i == 0 {
			rp.keys = r.obs.keys
		} else {
			rp.keys = rp.keys.both(r.obs.keys)
		}
		part := re.redisPart()
		rp.parts = append(rp.parts, r)
		rp.asks = append(rp.asks, part)
		rp.owns = append(rp.owns, part.own())
		rp.debts = append(rp.debts, r.debt.units(int64(r.limit)))
		limits[i] = r.own
		coalesce = coalesce && r.send.Coalesces()
		rp.keyed = rp.keyed || r.policyFunc != nil || part.windowed()
	}
	if rp.keyed {
		limits = nil // each request carries its checks' limits
	}
	kinds := make([]redisbatch.Kind, len(rp.parts)) // its script's: the parts' own (a per-key policy's is of the same file)
	for i, r := range rp.parts {
		kinds[i] = r.own.Kind
	}
	rp.send = newSender(rp.parts[0].client, limits, len(rp.parts), coalesce, rp.parts[0].clock, kinds...)
	return rp, nil
}

// policyFunc returns part i's PolicyFunc resolver; nil for a part of one
// policy.
func (rp *redisParts) policyFunc(i int) *policyFunc { return rp.parts[i].policyFunc }

// own returns part i's own policy in the script's numbers (see
// redisPart.own).
func (rp *redisParts) own(i int) partRate { return rp.owns[i] }

// rateOf returns part i's policy for a call whose parts' policies are
// rates (nil: each part's own): its key's when it was built
// WithPolicyFunc, its own otherwise.
func (rp *redisParts) rateOf(i int, rates []partRate) partRate {
	if rates == nil || rp.parts[i].policyFunc == nil {
		return rp.owns[i]
	}
	return rates[i]
}

// redisKey returns the Redis key of part i for its key, key, for a call
// whose parts' policies are rates (nil: each part's own), as the part's
// limiter alone names it.
func (rp *redisParts) redisKey(i int, key string, rates []partRate) string {
	return rp.asks[i].key(key, rp.rateOf(i, rates))
}

// fixedPrefix returns what every Redis key of part i has before its key's
// form in a hash tag (see redisbatch.StoredKey), and true; false for a
// part whose keys name their key's policy (see segmented).
func (rp *redisParts) fixedPrefix(i int) (string, bool) {
	if rp.asks[i].segmented() {
		return "", false
	}
	return rp.parts[i].prefix, true
}

// segmented reports whether a part's Redis keys name their key's policy
// (a sliding counter's or a calendar window's built WithPolicyFunc).
func (rp *redisParts) segmented() bool {
	for _, a := range rp.asks {
		if a.segmented() {
			return true
		}
	}
	return false
}

// setLimits sets p's Limits, when a request carries them (rp.keyed), to
// the script's limits of the parts' policies, rates.
func (rp *redisParts) setLimits(p *redisbatch.Request, rates []partRate) {
	if !rp.keyed {
		return
	}
	for i, a := range rp.asks {
		p.Limits[i] = a.limit(rp.rateOf(i, rates))
	}
}

// maxDebts returns the most debt, in units, a Settle may leave on each
// part's key: under its own policy (rp.debts, read only), or, for a keyed
// part, under its key's policy in rates.
func (rp *redisParts) maxDebts(rates []partRate) []int64 {
	if !rp.keyed || rates == nil {
		return rp.debts
	}
	debts := make([]int64, len(rp.parts))
	for i, r := range rp.parts {
		debts[i] = rp.debts[i]
		if r.policyFunc != nil {
			debts[i] = r.debt.units(rates[i].limit)
		}
	}
	return debts
}

// observer returns part i's observer.
func (rp *redisParts) observer(i int) *observer { return &rp.parts[i].obs }

// request returns the request of the batch script for the parts' keys,
// for a call whose parts' policies are rates (nil: each part's own): their
// Redis keys, which must differ, and on a cluster or ring share a hash
// slot.
func (rp *redisParts) request(ctx context.Context, keys []string, rates []partRate) (*redisbatch.Request, error) {
	p := rp.newRequest()
	p.Ctx, p.Key = ctx, rp.redisKey(0, keys[0], rates)
	for i := 1; i < len(keys); i++ {
		k := rp.redisKey(i, keys[i], rates)
		p.More[i-1] = k
		if k == p.Key || slices.Contains(p.More[:i-1], k) {
			return nil, fmt.Errorf("%w: two parts have the same Redis key %s", ErrKeysApart, rp.keyName(p, i))
		}
		if !rp.send.SameShard(k, p.Key) {
			return nil, fmt.Errorf("%w: the parts' Redis keys %s and %s are in different hash slots (or ring shards), which one script call cannot touch; "+
				"give the keys one hash tag, as in \"{tenant}:user\" and \"{tenant}\" (see Part.Key)", ErrKeysApart, rp.keyName(p, 0), rp.keyName(p, i))
		}
	}
	return p, nil
}

// partsRequest is a request of up to four parts with its slices, in one
// allocation: a request outlives the call that made it (it may wait in a
// batch after its caller gave up), so it cannot use the call's buffers.
type partsRequest struct {
	req    redisbatch.Request
	more   [3]string
	costs  [4]int
	limits [4]*redisbatch.Limit
}

// newRequest returns an empty request with More, Costs and, when a part
// was built WithPolicyFunc, Limits of the parts' length.
func (rp *redisParts) newRequest() *redisbatch.Request {
	n := len(rp.parts)
	if n > len(partsRequest{}.costs) {
		p := &redisbatch.Request{More: make([]string, n-1), Costs: make([]int, n)}
		if rp.keyed {
			p.Limits = make([]*redisbatch.Limit, n)
		}
		return p
	}
	b := &partsRequest{}
	b.req.More, b.req.Costs = b.more[:n-1], b.costs[:n]
	if rp.keyed {
		b.req.Limits = b.limits[:n]
	}
	return &b.req
}

// clockName names a Redis limiter's clock in errors: the server's TIME
// (nil), or the caller's clock's type.
func clockName(c Clock) string {
	if c == nil {
		return "the server's TIME"
	}
	return fmt.Sprintf("WithCallerClock of a %T", c)
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

// keyName returns the Redis key of check i of p, a request of the parts,
// as errors name it (see keyRules.quoteRedis).
func (rp *redisParts) keyName(p *redisbatch.Request, i int) string {
	r := rp.parts[i]
	stored := checkKey(p, i)
	form := redisbatch.FormAfter(strings.TrimPrefix(stored, r.prefix), r.segColons)
	return rp.keys.quoteStored(stored, len(stored)-len(form), redisbatch.KeyOf(form))
}

// allow decides costs[i] for part i's key, all or nothing, each part by
// its policy in rates (nil: each part's own), and sets each part's Result.
// A part of units in flight takes its units, when the request is allowed,
// under a lease of its limiter's naming for its TTL; allow returns the
// Lease that holds them when leased, and a Lease that holds nothing
// otherwise (its units then come back at the TTL). nexts, when not nil,
// gets each part's next unit where the script tells it (see
// Decision.partNext), 0 elsewhere.
func (rp *redisParts) allow(ctx context.Context, keys []string, costs []int, rates []partRate, results []Result, nexts []time.Duration, leased bool) (Lease, error) {
	p, err := rp.request(ctx, keys, rates)
	if err != nil {
		return Lease{}, fmt.Errorf("ratelimit: Composite: %w", err)
	}
	copy(p.Costs, costs)
	rp.setLimits(p, rates)
	i := rp.inFlight
	if i < 0 || costs[i] == 0 {
		return Lease{}, rp.do(p, rates, results, nexts)
	}
	id, name := rp.holder.newLease()
	p.Lease = name
	if err := rp.do(p, rates, results, nexts); err != nil || !results[i].Allowed || !leased {
		return Lease{}, err
	}
	micros := rp.parts[i].own.Param
	if rates != nil {
		micros = rates[i].param
	}
	return Lease{holder: rp.holder, key: keys[i], id: id, units: costs[i], ttl: time.Duration(micros) * time.Microsecond}, nil
}

// settle applies to every part's key, or to none, the Settle whose cost
// minus taken is changes[i] for part i, each part by its policy in rates
// (nil: each part's own), and sets each part's Result.
func (rp *redisParts) settle(ctx context.Context, keys []string, changes []int, a adjustment, rates []partRate, results []Result) error {
	p, err := rp.request(ctx, keys, rates)
	if err != nil {
		return fmt.Errorf("ratelimit: Composite: %w", err)
	}
	copy(p.Costs, changes)
	if rp.inFlight >= 0 {
		// Units in flight come back by their leases alone: the script
		// changes nothing on that check whatever its change, so it is
		// sent none.
		p.Costs[rp.inFlight] = 0
	}
	rp.setLimits(p, rates)
	settleRequest(rp.send, p, a, rp.parts[0].clock)
	if a.hasTaken {
		for _, part := range rp.asks {
			if age, ok := part.age(a.takenAt); ok {
				// The age on the clock a part reads its windows from
				// (WithClock), as its own Settle takes it.
				p.Settlement.Age = age
				break
			}
		}
	}
	p.Settlement.MaxDebts = rp.maxDebts(rates)
	return rp.do(p, rates, results, nil)
}

// reset empties every part's key, or none, for a call whose parts'
// policies are rates (nil: each part's own), which name the Redis keys of
// the parts whose keys name their policy.
func (rp *redisParts) reset(ctx context.Context, keys []string, rates []partRate) error {
	p, err := rp.request(ctx, keys, rates)
	if err != nil {
		return fmt.Errorf("ratelimit: Composite: %w", err)
	}
	p.Op, p.Costs = redisbatch.Reset, nil
	if rp.keyed {
		for i, a := range rp.asks {
			p.Limits[i] = a.resetLimit(rp.rateOf(i, rates))
		}
	}
	var buf [4]Result // the Results a Reset does not return
	results := buf[:min(len(keys), len(buf))]
	if len(keys) > len(buf) {
		results = make([]Result, len(keys))
	}
	return rp.do(p, nil, results, nil)
}

// do sends p and sets results from its record of the reply: one check's
// verdict per part, all with the same verdict, of the part's limit in
// rates (nil: its own); or a refusal naming part i when its key does not
// hold its limiter's state. nexts, when not nil, gets each part's next
// unit where its verdict tells it, 0 elsewhere.
func (rp *redisParts) do(p *redisbatch.Request, rates []partRate, results []Result, nexts []time.Duration) error {
	if !rp.send.Send(p) {
		return fmt.Errorf("ratelimit: Composite %s: %w: %w", rp.keyName(p, 0), ErrBackend, p.Ctx.Err())
	}
	if p.Err != nil {
		return fmt.Errorf("ratelimit: Composite %s: %w", rp.keyName(p, 0), backendErr(p.Err))
	}
	record := p.Record
	if i, reason, ok := record.Refusal(); ok {
		if i >= 1 && i <= len(rp.parts) {
			r := rp.parts[i-1]
			return fmt.Errorf("ratelimit: Composite: %s %s: %w: %s", r.name, rp.keyName(p, i-1), ErrCorruptState, reason)
		}
		return fmt.Errorf("ratelimit: Composite %s: %w: unexpected reply from Redis script: %q", rp.keyName(p, 0), ErrBackend, record)
	}
	if n, ok := record.Checks(); !ok || n != len(rp.parts) {
		return fmt.Errorf("ratelimit: Composite %s: %w: unexpected reply from Redis script: %q", rp.keyName(p, 0), ErrBackend, record)
	}
	for i, r := range rp.parts {
		limit := r.limit
		if rates != nil {
			limit = int(rates[i].limit)
		}
		v := record.Check(i)
		res, err := resultOf(v, limit, true)
		var next time.Duration
		if err == nil {
			next, err = nextOf(v)
		}
		if err != nil || i > 0 && res.Allowed != results[0].Allowed {
			return fmt.Errorf("ratelimit: Composite %s: %w: unexpected reply from Redis script: %q", rp.keyName(p, 0), ErrBackend, record)
		}
		results[i] = res
		if nexts != nil {
			nexts[i] = next
		}
	}
	return nil
}

// unit returns the ns one unit of part i's param makes in its rule: 1 µs
// for a token bucket or GCRA, 0 for a window, a sliding log or a
// RedisConcurrency.
func (rp *redisParts) unit(i int) int64 {
	if i == rp.inFlight || rp.parts[i].k.redisRule(1).unit == 0 {
		return 0
	}
	return int64(time.Microsecond)
}
