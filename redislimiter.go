package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisLimiter is what the Redis limiters share: decisions on prefix + key
// by the batch script, one check per request with the algorithm's name, the
// limit and one more number of the algorithm's as arguments, sent alone or
// coalesced with others, and replies that are checked before they are
// believed.
type redisLimiter struct {
	name   string // the limiter's name in errors
	client redis.Scripter
	prefix string
	limit  int
	spec   [3]any // the batch script's limit: algorithm ("t", "g" or "w"), limit and param, formatted
	send   *sender
	obs    observer
	// tiers, when built WithPolicyFunc, gives each call's limit and param,
	// sent with it as one of specs (under the spec's keyedAlgo).
	tiers *tiers
	specs *specCache // the script's limits of the policies in use
	// resetSpec is the script's limit a Reset is sent with: nil, or, built
	// WithPolicyFunc, the limiter's own policy's, since a Reset reads the
	// key's state as its algorithm keeps it, at any policy.
	resetSpec *[3]any
}

// redisSpec is everything a Redis limiter is built from, its numbers already
// checked by its constructor.
type redisSpec struct {
	kind          string // the constructor's name, in configuration errors
	name          string // the limiter's name, in Allow's errors
	algo          string // the batch script's name of the algorithm: "t", "g" or "w"
	defaultPrefix string // the algorithm's Default*Prefix
	limit         int    // the script's first argument
	param         int64  // the script's second argument, the algorithm's own number
	// keyedAlgo is the batch script's name of the algorithm for a limiter
	// built WithPolicyFunc, which keeps each key's interval with its state:
	// "T", "G", or "w" (a window keeps nothing more); check converts a
	// policy to its limit and param.
	keyedAlgo string
	check     func(kind string, p Policy) (limit, param int64, err error)
}

// newRedisLimiter checks what every Redis limiter's constructor checks (the
// options and the client) and returns the limiter spec describes, whole. Its
// key prefix is the one WithKeyPrefix gives, exactly; by default, the
// algorithm's default prefix followed by "<limit>:<param>:", so that limiters
// of one algorithm whose scripts would decide differently never share a key
// unless told to.
func newRedisLimiter(client redis.Scripter, spec redisSpec, opts []Option) (redisLimiter, error) {
	cfg, err := applyOptions(spec.kind, onRedis, opts)
	if err != nil {
		return redisLimiter{}, err
	}
	if isNil(client) {
		return redisLimiter{}, fmt.Errorf("%w: %s: nil Redis client", ErrInvalidConfig, spec.kind)
	}
	limit, param := strconv.Itoa(spec.limit), strconv.FormatInt(spec.param, 10)
	prefix := spec.defaultPrefix + limit + ":" + param + ":"
	if cfg.prefixSet {
		prefix = cfg.prefix
	}
	r := redisLimiter{
		name:   spec.name,
		client: client,
		prefix: prefix,
		limit:  spec.limit,
		spec:   [3]any{spec.algo, limit, param},
	}
	// The time from empty to full: limit units of param µs each, or a
	// window of param ms.
	window := time.Duration(int64(spec.limit)*spec.param) * time.Microsecond
	if spec.algo == "w" {
		window = time.Duration(spec.param) * time.Millisecond
	}
	policy := Policy{Limit: spec.limit, Window: window}
	r.obs = newObserver(cfg, spec.kind, policy, redisRule(spec.algo, spec.param))
	if r.tiers, err = newTiers(cfg.policyFunc, spec.name, policy, spec.check); err != nil {
		return redisLimiter{}, err
	}
	if r.tiers != nil {
		r.specs = &specCache{algo: spec.keyedAlgo}
		r.resetSpec = r.specs.spec(r.tiers.defLimit, r.tiers.defParam)
		if !cfg.prefixSet {
			r.prefix = spec.defaultPrefix + keyedPrefix
		}
	}
	r.send = newSender(client, [][3]any{r.spec}, r.tiers != nil, cfg.noCoalesce)
	return r, nil
}

// allow decides n for key. See Limiter for the contract. With coalescing,
// the call may travel in one script call with others (see coalescer);
// without, it is one call of its own.
func (r *redisLimiter) allow(ctx context.Context, key string, n int) (Result, error) {
	if ctx == nil {
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
	if r.obs.hooks != nil {
		start := time.Now()
		res, p, _, err := r.decide(ctx, key, n)
		r.obs.reportPolicy(p, key, n, res, err, time.Since(start))
		return res, err
	}
	res, _, _, err := r.decide(ctx, key, n)
	return res, err
}

// decideAll decides n for key and returns the whole Decision (see
// Decider), and reports it to the hooks, if any.
func (r *redisLimiter) decideAll(ctx context.Context, key string, n int) (Decision, error) {
	if ctx == nil {
		return r.obs.decision(Result{Limit: r.limit}, r.obs.policy, nil), fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
	var start time.Time
	if r.obs.hooks != nil {
		start = time.Now()
	}
	res, p, param, err := r.decide(ctx, key, n)
	rl := r.obs.rules
	if param != 0 && r.tiers != nil && param != r.tiers.defParam {
		rl = []rule{redisRule(r.spec[0].(string), param)}
	}
	d := r.obs.decision(res, p, rl)
	if r.obs.hooks != nil {
		r.obs.report(key, n, d, err, time.Since(start))
	}
	return d, err
}

// policies returns the policies of key's calls (see Decider).
func (r *redisLimiter) policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if r.tiers == nil {
		return r.obs.own, nil
	}
	p, _, _, err := r.tiers.resolve(ctx, key)
	return policyList(p, r.obs.own), err
}

// redisRule is the rule of a Redis limiter's decisions with the batch
// script's algorithm algo and its param: an interval in µs for a token
// bucket or GCRA, a window for a fixed window.
func redisRule(algo string, param int64) rule {
	if algo == "w" || algo == "W" {
		return rule{}
	}
	return rule{unit: param * int64(time.Microsecond)}
}

// decide decides n for key, after allow's checks, and also returns the
// policy of the call and its param (0 for the limiter's own).
func (r *redisLimiter) decide(ctx context.Context, key string, n int) (Result, Policy, int64, error) {
	limit, spec, policy, param, err := r.policyOf(ctx, key)
	if err == nil {
		err = checkCost(n, limit)
	}
	if err != nil {
		return Result{Limit: limit}, policy, param, err
	}
	res, err := r.request(&pending{ctx: ctx, key: r.prefix + key, n: n, spec: spec}, limit)
	return res, policy, param, err
}

// policyOf returns the limit of a call for key, the script's limit it is
// sent with (nil for the limiter's own), its policy and its param (0 for
// the limiter's own).
func (r *redisLimiter) policyOf(ctx context.Context, key string) (int, *[3]any, Policy, int64, error) {
	if r.tiers == nil {
		return r.limit, nil, r.obs.policy, 0, nil
	}
	p, limit, param, err := r.tiers.resolve(ctx, key)
	return int(limit), r.specs.spec(limit, param), p, param, err
}

// keyedPrefix follows the algorithm's default prefix for a limiter built
// WithPolicyFunc, whose keys keep their interval: "<limit>:<param>:" of the
// other limiters starts with a digit, so the two never meet.
const keyedPrefix = "keyed:"

// request sends p and turns its line of the reply into its answer, for a
// call whose limit is limit.
func (r *redisLimiter) request(p *pending, limit int) (Result, error) {
	if !r.send.do(p) {
		return Result{Limit: limit}, fmt.Errorf("ratelimit: %s %q: %w: %w", r.name, p.key, ErrBackend, p.ctx.Err())
	}
	if p.err != nil {
		return Result{Limit: limit}, fmt.Errorf("ratelimit: %s %q: %w", r.name, p.key, backendErr(p.err))
	}
	return r.decision(p.key, p.line, limit)
}

// settle applies a Settle of taken and cost to key. See Adjuster.
func (r *redisLimiter) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if ctx == nil {
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
	limit, spec, _, _, err := r.policyOf(ctx, key)
	if err != nil {
		return Result{Limit: limit}, err
	}
	a, err := settleArgs(r.name, taken, cost, r.tiers.takenBound(limit), opts)
	if err != nil {
		return Result{Limit: limit}, err
	}
	p := &pending{ctx: ctx, key: r.prefix + key, n: cost - taken, spec: spec}
	p.op = newSettleOp(routeOf(r.client), p.key, a)
	return r.request(p, limit)
}

// reset empties key. See Adjuster.
func (r *redisLimiter) reset(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
	p := &pending{ctx: ctx, key: r.prefix + key, op: &adjustOp{reset: true}, spec: r.resetSpec}
	_, err := r.request(p, r.limit)
	return err
}

// decision turns one request's record of the batch script's reply into
// its answer.
func (r *redisLimiter) decision(key string, line string, limit int) (Result, error) {
	if _, reason, refused := refusedCheck(line); refused {
		// The script refused a key that does not hold its state: that
		// concerns this key's data, not the backend.
		return Result{Limit: limit}, fmt.Errorf("ratelimit: %s %q: %w: %s", r.name, key, ErrCorruptState, reason)
	}
	res, err := decisionFromLine(line, limit)
	if err != nil {
		return Result{Limit: limit}, fmt.Errorf("ratelimit: %s %q: %w: %w", r.name, key, ErrBackend, err)
	}
	return res, nil
}

// specCache holds the batch script's limits (algorithm, limit and param)
// of the policies a limiter built WithPolicyFunc used last, so that a call
// of a policy in use allocates none: one entry per slot, replaced by the
// next policy that lands there, so its memory is bounded whatever the
// number of policies. It is safe for concurrent use.
type specCache struct {
	algo  string
	slots [specSlots]atomic.Pointer[cachedSpec]
}

// specSlots is how many policies a specCache holds: enough for the plans
// of a service; per-customer overrides beyond it cost a small allocation
// per call.
const specSlots = 16

// cachedSpec is one policy's limit and param, and its script limit.
type cachedSpec struct {
	limit, param int64
	spec         [3]any
}

// spec returns the script's limit for limit and param.
func (c *specCache) spec(limit, param int64) *[3]any {
	slot := &c.slots[uint64(limit*31+param)%specSlots]
	if s := slot.Load(); s != nil && s.limit == limit && s.param == param {
		return &s.spec
	}
	s := &cachedSpec{limit: limit, param: param, spec: [3]any{c.algo, limit, param}}
	slot.Store(s)
	return &s.spec
}
