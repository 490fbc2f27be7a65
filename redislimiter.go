package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/redis/go-redis/v9"
)

// callerNow returns the Sender's clock of a limiter built WithCallerClock(c):
// c's time in whole µs of Unix time (rounded down), or an error wrapping
// ErrInvalidConfig for a time before 1970 or at or after 2^52 µs (about
// 2112), which the script cannot decide on. Nil for a nil c: the script
// reads the server's TIME.
func callerNow(c Clock) func() (int64, error) {
	if c == nil {
		return nil
	}
	return func() (int64, error) {
		t := c.Now()
		if t.Before(time.Unix(0, 0)) || !t.Before(time.UnixMicro(redisbatch.MaxNow)) {
			return 0, fmt.Errorf("%w: the caller's clock (WithCallerClock) reads %v, outside the times a Redis limiter decides on (from 1970-01-01 UTC to 2^52 µs later, %v)",
				ErrInvalidConfig, t, time.UnixMicro(redisbatch.MaxNow).UTC())
		}
		return t.UnixMicro(), nil
	}
}

// sameCallerClock reports whether a and b are one caller's clock (nil: the
// server's TIME): both nil, or equal values of one comparable type.
func sameCallerClock(a, b Clock) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta.Comparable() && a == b
}

// redisLimiter is what the Redis limiters share: decisions on the Redis key of a key (see redisKey)
// by the batch script, one check per request on the limiter's own limit
// (or the key's, built WithPolicyFunc), sent alone or coalesced with others
// through the internal redisbatch package, and records of the reply that
// are checked before they are believed.
type redisLimiter struct {
	k      kind   // the limiter's kind
	name   string // the limiter's name in errors
	client redis.Scripter
	prefix string
	limit  int
	own    *redisbatch.Limit // the script's limit of the limiter's own policy
	send   *redisbatch.Sender
	obs    observer
	// policyFunc, when built WithPolicyFunc, gives each call's limit and param,
	// sent with it as one of limits (of the params' policyFuncKind).
	policyFunc *policyFunc
	limits     *redisbatch.LimitCache // the script's limits of the policies in use
	// resetLimit is the script's limit a Reset is sent with: nil, or, built
	// WithPolicyFunc, the limiter's own policy's, since a Reset reads the
	// key's state as its algorithm keeps it, at any policy.
	resetLimit *redisbatch.Limit
	debt       debtCap // how far a Settle may take a key into debt (WithMaxDebt)
	// clock is the caller's clock its decisions are made on
	// (WithCallerClock); nil: the server's TIME.
	clock Clock
	// segOf, set for a limiter built WithPolicyFunc whose keys name their
	// policy's window (a sliding counter), gives the seg of a key's
	// policy's param, which follows prefix in its Redis key; nil
	// otherwise.
	segOf func(param int64) string
	// segColons is the number of colons in the seg that follows prefix in
	// its Redis keys: 1 for a sliding counter, 2 for a calendar window,
	// built WithPolicyFunc (see storedName); 0 otherwise.
	segColons int
}

// redisParams is everything a Redis limiter is built from, its numbers
// already checked by its constructor.
type redisParams struct {
	constructor string // the constructor's name, in configuration errors
	name        string // the limiter's name, in Allow's errors
	// k is the limiter's kind, which names its algorithm in the script:
	// for a limiter built WithPolicyFunc, one that keeps each key's
	// interval with its state (a window keeps nothing more).
	k             kind
	defaultPrefix string // the algorithm's Default*Prefix
	limit         int    // whole units: a capacity or a window's limit
	param         int64  // the algorithm's own number: µs per unit, or a window in ms
	// check converts a policy to its limit and param.
	check func(kind string, p Policy) (limit, param int64, err error)
	// tail, when set, follows defaultPrefix in the default key prefix
	// instead of "<limit>:<param>:"; keyedTail likewise after
	// defaultPrefix + "keyed:" for a limiter built WithPolicyFunc.
	tail, keyedTail string
	// ownSeg and segOf are the seg of a kind whose keys name how their
	// state is read beyond kind, limit and param (a sliding counter's
	// window, a calendar's period and zone): ownSeg, of the limiter's own
	// policy, follows a prefix given by WithKeyPrefix, and segOf(param)
	// gives the seg of a key's policy for a limiter built WithPolicyFunc
	// (nil: its keys have none, or the limiter names them itself).
	ownSeg string
	segOf  func(param int64) string
	// clocked lets the limiter take WithClock (see onRedisClocked).
	clocked bool
}

// newRedisLimiter checks what every Redis limiter's constructor checks (the
// options and the client) and returns the limiter p describes, whole. Its
// key prefix (see redisPrefix) names its kind and its policy, so that
// limiters whose scripts would decide differently never share a key unless
// given one prefix.
func newRedisLimiter(client redis.Scripter, p redisParams, opts []RedisOption) (redisLimiter, error) {
	where := onRedis
	if p.clocked {
		where = onRedisClocked
	}
	cfg, err := applyRedisOptions(p.constructor, where, opts)
	if err != nil {
		return redisLimiter{}, err
	}
	if isNil(client) {
		return redisLimiter{}, fmt.Errorf("%w: %s: nil Redis client", ErrInvalidConfig, p.constructor)
	}
	own := redisbatch.NewLimit(p.k.letter(false), int64(p.limit), p.param)
	r := redisLimiter{k: p.k, name: p.name, client: client, prefix: redisPrefix(p, cfg), limit: p.limit, own: own, debt: cfg.maxDebt, clock: cfg.callerClock}
	// The time from empty to full: limit units of param µs each, a window
	// of param ms, a calendar period's nominal length.
	policy := Policy{Limit: p.limit, Window: p.k.redisWindow(p.limit, p.param)}
	r.obs = newObserver(cfg, p.constructor, policy, p.k.redisRule(p.param))
	if r.policyFunc, err = newPolicyFunc(cfg, p.name, policy, p.check); err != nil {
		return redisLimiter{}, err
	}
	limits := []*redisbatch.Limit{own}
	if r.policyFunc != nil {
		limits = nil // each request carries its key's
		r.limits = redisbatch.NewLimitCache(p.k.letter(true))
		r.resetLimit = r.limits.Get(r.policyFunc.defLimit, r.policyFunc.defParam)
		r.segOf = p.segOf
		if p.segOf != nil {
			r.segColons = 1
		}
	}
	r.send = newSender(client, limits, 1, !cfg.noCoalesce, r.clock, p.k.letter(false), p.k.letter(true))
	return r, nil
}

// redisPrefix returns the key prefix of the limiter p describes, built
// with cfg, which every Redis key of the limiter starts with (see
// redisKey):
//   - by default, p's defaultPrefix and "<limit>:<param>:" (or its tail);
//   - built WithPolicyFunc, defaultPrefix, "keyed:" and "<limit>:<param>:"
//     of the constructor's policy (or its keyedTail), whose keys then keep
//     their own policy's numbers with their state;
//   - given WithKeyPrefix(x), x, the name of the state its script keeps
//     (see kind.state) and ":", then, but for a limiter built
//     WithPolicyFunc, ownSeg: limiters given one x share keys whenever
//     their state means the same.
func redisPrefix(p redisParams, cfg config) string {
	keyed := cfg.policyFunc != nil
	switch {
	case cfg.prefixSet && keyed:
		return cfg.prefix + p.k.state(true) + ":"
	case cfg.prefixSet:
		return cfg.prefix + p.k.state(false) + ":" + p.ownSeg
	case keyed && p.keyedTail != "":
		return p.defaultPrefix + policyFuncPrefix + p.keyedTail
	case keyed:
		return fmt.Sprintf("%s%s%d:%d:", p.defaultPrefix, policyFuncPrefix, p.limit, p.param)
	case p.tail != "":
		return p.defaultPrefix + p.tail
	}
	return fmt.Sprintf("%s%d:%d:", p.defaultPrefix, p.limit, p.param)
}

// redisKey returns the Redis key of key for a call whose policy's param
// is param: the prefix, the seg of param for a limiter whose keys name it
// (segOf), and key in a hash tag (see redisbatch.StoredKey), so that
// every Redis key of one key, of any limiter, is in the hash slot key
// alone is in.
func (r *redisLimiter) redisKey(key string, param int64) string {
	seg := ""
	if r.segOf != nil {
		seg = r.segOf(param)
	}
	return redisbatch.StoredKey(r.prefix, seg, key)
}

// newSender returns the Sender of the batch script through client, whose
// requests of checks checks each check limits in order (nil: each request
// carries its own, of one of kinds), deciding on clock's time (nil: the
// server's TIME). Its script holds the kinds of limits and kinds only
// (see batchScriptOf).
func newSender(client redis.Scripter, limits []*redisbatch.Limit, checks int, coalesce bool, clock Clock, kinds ...redisbatch.Kind) *redisbatch.Sender {
	script := batchScriptOf(limits, clock, kinds...)
	return redisbatch.NewSender(redisbatch.Config{
		Client: client, Script: script, Limits: limits, Checks: checks, Coalesce: coalesce, TokenTTL: SettleTokenTTL,
		Now: callerNow(clock),
	})
}

// policies returns the policies of key's calls (see Decider).
func (r *redisLimiter) policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if r.policyFunc == nil {
		return r.obs.own, nil
	}
	p, _, _, err := r.policyFunc.resolve(ctx, key)
	return policyList(p, r.obs.own), err
}

// decideKeyed is decide for a call off its plain path: a limiter built
// WithPolicyFunc, whose call takes its key's policy, or a key longer than
// the limiter's WithMaxKeyLength, which it refuses.
func (r *redisLimiter) decideKeyed(ctx context.Context, key string, n int) (Result, Policy, int64, time.Duration, error) {
	if err := r.obs.keys.check(r.name, key); err != nil {
		return Result{Limit: r.limit}, r.obs.policy, 0, 0, err
	}
	limit, own, policy, param, err := r.policyOf(ctx, key)
	if err == nil {
		err = checkCost(n, limit)
	}
	if err != nil {
		return Result{Limit: limit}, policy, param, 0, err
	}
	res, next, err := r.requestNext(&redisbatch.Request{Ctx: ctx, Key: r.redisKey(key, param), N: n, Limit: own}, limit)
	return res, policy, param, next, err
}

// policyOf returns the limit of a call for key, the script's limit it is
// sent with (nil for the limiter's own), its policy and its param (0 for
// the limiter's own).
func (r *redisLimiter) policyOf(ctx context.Context, key string) (int, *redisbatch.Limit, Policy, int64, error) {
	if r.policyFunc == nil {
		return r.limit, nil, r.obs.policy, 0, nil
	}
	p, limit, param, err := r.policyFunc.resolve(ctx, key)
	return int(limit), r.limits.Get(limit, param), p, param, err
}

// policyFuncPrefix follows the algorithm's default prefix for a limiter built
// WithPolicyFunc, whose keys keep their interval: "<limit>:<param>:" of the
// other limiters starts with a digit, so the two never meet. The
// constructor's policy follows it, so that keyed limiters of one kind and
// different policies never meet either.
const policyFuncPrefix = "keyed:"

// keyName returns the Redis key of p, a request of r's, as r's errors name
// it (see storedName).
func (r *redisLimiter) keyName(p *redisbatch.Request) string { return r.storedName(p.Key) }

// unsentName returns the Redis key of p, a request of r's that Send did
// not answer, as r's errors name it: p.Key when its caller set it, and
// otherwise the key p's Prefix, Seg and Name give, since p.Key may be
// being formed by the call p was handed to (see redisbatch.Request.Key).
// A request whose key is formed carries r's prefix, which is never empty.
func (r *redisLimiter) unsentName(p *redisbatch.Request) string {
	if p.Prefix == "" {
		return r.storedName(p.Key)
	}
	return r.storedName(redisbatch.StoredKey(p.Prefix, p.Seg, p.Name))
}

// storedName returns stored, a Redis key of r's, as r's errors name it:
// quoted whole when keys are shown (WithKeysShown), and otherwise what
// comes before the caller's key quoted, "+", and the caller's key's
// digest, as events show it (see KeyDigest).
func (r *redisLimiter) storedName(stored string) string {
	form := redisbatch.FormAfter(strings.TrimPrefix(stored, r.prefix), r.segColons)
	return r.obs.keys.quoteStored(stored, len(stored)-len(form), redisbatch.KeyOf(form))
}

// settle applies a Settle of taken and cost to key. See Adjuster.
func (r *redisLimiter) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if ctx == nil {
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
	if err := r.obs.keys.check(r.name, key); err != nil {
		return Result{Limit: r.limit}, err
	}
	limit, own, _, param, err := r.policyOf(ctx, key)
	if err != nil {
		return Result{Limit: limit}, err
	}
	a, err := settleArgs(r.name, taken, cost, r.policyFunc.takenBound(limit), limit, r.obs.maxSettle, opts)
	if err != nil {
		return Result{Limit: limit}, err
	}
	p := &redisbatch.Request{Ctx: ctx, Key: r.redisKey(key, param), N: cost - taken, Limit: own}
	settleRequest(r.send, p, a, r.clock)
	p.Settlement.MaxDebt = r.debt.units(int64(limit))
	return r.request(p, limit)
}

// reset empties key: its Redis key under its policy now, for a limiter
// whose keys name their policy's window. See Adjuster.
func (r *redisLimiter) reset(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
	if err := r.obs.keys.check(r.name, key); err != nil {
		return err
	}
	var param int64
	if r.segOf != nil {
		var err error
		if _, _, _, param, err = r.policyOf(ctx, key); err != nil {
			return err
		}
	}
	p := &redisbatch.Request{Ctx: ctx, Key: r.redisKey(key, param), Op: redisbatch.Reset, Limit: r.resetLimit}
	_, err := r.request(p, r.limit)
	return err
}

// settleRequest makes p, whose N is cost minus taken, the Settle of a:
// with its age, on clock (WithCallerClock's, which the script decides on;
// nil: the system clock), and its token's key on send's client, if any.
func settleRequest(send *redisbatch.Sender, p *redisbatch.Request, a adjustment, clock Clock) {
	s := &redisbatch.Settlement{Age: -1}
	if a.hasTaken {
		// Rounded up, so that a refund never lands in a window that opened
		// after the units were taken; a zero or ancient time saturates.
		var age time.Duration
		if clock != nil {
			age = max(clock.Now().Sub(a.takenAt), 0)
		} else {
			age = max(time.Since(a.takenAt), 0)
		}
		s.Age = int64(age / time.Microsecond)
		if age%time.Microsecond != 0 {
			s.Age++
		}
	}
	if a.tokenSet {
		s.Token = send.TokenKey(p.Key, a.token)
	}
	p.Op, p.Settlement = redisbatch.Settle, s
}

// errOutOfRange is the error of a check's verdict whose numbers cannot be
// right.
var errOutOfRange = errors.New("reply from Redis script out of range")

// resultOf checks one check's verdict of the batch script and turns it
// into a Result, for a check of limit. A verdict out of range is an error:
// a script reply is never trusted to allow. With part, the check is one of
// several of a request, and may be denied with no wait of its own
// (another check denied).
func resultOf(v redisbatch.Verdict, limit int, part bool) (Result, error) {
	const maxMicros = math.MaxInt64 / int64(time.Microsecond)
	switch {
	case v.Allowed != 0 && v.Allowed != 1,
		v.Remaining < 0 || v.Remaining > int64(limit),
		v.RetryAfter < 0 || v.RetryAfter > maxMicros || v.Allowed == 1 && v.RetryAfter != 0 || v.Allowed == 0 && v.RetryAfter == 0 && !part,
		v.ResetAfter < 0 || v.ResetAfter > maxMicros:
		return Result{}, errOutOfRange
	}
	return Result{
		Allowed:    v.Allowed == 1,
		Limit:      limit,
		Remaining:  int(v.Remaining),
		RetryAfter: time.Duration(v.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(v.ResetAfter) * time.Microsecond,
	}, nil
}

// nextOf returns the wait until the next unit a check's verdict v tells
// (see Decision.NextUnit): 0 when it tells none, and an error, as
// resultOf's, for one out of range (below 1 µs or beyond what a Duration
// holds).
func nextOf(v redisbatch.Verdict) (time.Duration, error) {
	const maxMicros = math.MaxInt64 / int64(time.Microsecond)
	if !v.HasNext {
		return 0, nil
	}
	if v.Next < 1 || v.Next > maxMicros {
		return 0, errOutOfRange
	}
	return time.Duration(v.Next) * time.Microsecond, nil
}

// The path of one decision of a Redis limiter, from its method to the
// script call and back, is the part every Redis limiter type embeds
// (redisShell), then the engine's allow, decide and verdict below; the
// rest of the call is internal/redisbatch's (Sender.Send).

// redisShell is the part every Redis limiter type embeds: its engine and
// the methods they share, written once. The engine holds the limiter's
// kind as a value (redisLimiter.k).
//
// Each method is safe on a nil *redisShell and on a zero value: it returns
// an error wrapping ErrInvalidConfig (see notBuilt), which names the type
// when the shell came from its type's accessor (see unbuiltRate).
type redisShell struct {
	r redisLimiter
}

// redisRate is the part of a Redis rate limiter, every Redis kind but
// units in flight: the shared methods and Refund and Settle, which units
// in flight do not have (their units come back through their leases).
type redisRate struct {
	redisShell
}

// newRedisRate returns the shared part of a Redis rate limiter around its
// engine r.
func newRedisRate(r redisLimiter) redisRate { return redisRate{redisShell{r: r}} }

// unbuiltRate returns the part a nil or zero-value Redis limiter of kind
// k answers through: not built, and naming its type in errors.
func unbuiltRate(k kind) *redisRate { return &redisRate{redisShell{r: redisLimiter{k: k}}} }

// typeName returns the name of the limiter type: "Redis" and its kind's.
func (s *redisShell) typeName() string {
	if s == nil || s.r.k == nil {
		return "Redis limiter"
	}
	return "Redis" + s.r.k.name()
}

// built tells whether s was built by a constructor.
func (s *redisShell) built() bool { return s != nil && s.r.client != nil }

// Allow takes n units for key in Redis if the key's policy lets them be
// taken now: what that means for each kind is in its type's doc. See
// Limiter for the contract. ctx bounds the round trip; a nil ctx is an
// error. A limiter no constructor returned answers an error wrapping
// ErrInvalidConfig.
func (s *redisShell) Allow(ctx context.Context, key string, n int) (Result, error) {
	if !s.built() {
		return Result{}, notBuilt(s.typeName())
	}
	return s.r.allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (s *redisShell) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if !s.built() {
		return Decision{}, notBuilt(s.typeName())
	}
	return s.r.decideAll(ctx, key, n)
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It asks nothing of Redis, and fails only on a limiter no
// constructor returned, or when the key's policy cannot be read.
func (s *redisShell) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if !s.built() {
		return nil, notBuilt(s.typeName())
	}
	return s.r.policies(ctx, key)
}

// KeyPrefix returns what every Redis key of the limiter starts with: the
// Redis key of key is KeyPrefix() and key in a hash tag (see the package
// doc, Redis keys). Each type's doc says what its prefix holds. It is ""
// for a limiter no constructor returned.
func (s *redisShell) KeyPrefix() string {
	if s == nil {
		return ""
	}
	return s.r.prefix
}

// Reset deletes key's Redis key, so the key starts afresh. See Adjuster.
func (s *redisShell) Reset(ctx context.Context, key string) error {
	if !s.built() {
		return notBuilt(s.typeName())
	}
	return s.r.resetReported(ctx, key)
}

// Refund gives n units back to key, to what took them as far as the kind
// can tell (see the type's doc). See Adjuster; ctx bounds the round trip.
func (s *redisRate) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	if !s.built() {
		return Result{}, notBuilt(s.typeName())
	}
	return s.r.adjust(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle replaces taken by cost for key: it gives back or takes the
// difference as Refund and Allow would (see the type's doc). See Adjuster;
// ctx bounds the round trip.
func (s *redisRate) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	if !s.built() {
		return Result{}, notBuilt(s.typeName())
	}
	return s.r.adjust(ctx, AdjustSettle, key, taken, cost, opts)
}

// remote returns the engine; nil for a nil s, whose fields are empty for
// a zero value (see redisLimiter.engineObserver).
func (s *redisShell) remote() *redisLimiter {
	if s == nil {
		return nil
	}
	return &s.r
}

// nodes returns the function that names the server of key's Redis keys
// (see redisbatch.Sender.Node), or nil for a client of one server or of
// unknown routing.
func (s *redisShell) nodes() func(key string) string { return s.r.nodes() }

// allow decides n for key. See Limiter for the contract. With coalescing,
// the call may travel in one script call with others (see
// redisbatch.Sender); without, it is one call of its own.
func (r *redisLimiter) allow(ctx context.Context, key string, n int) (Result, error) {
	if ctx == nil {
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
	if r.obs.hooks == nil {
		res, _, _, _, err := r.decide(ctx, key, n)
		return res, err
	}
	start := time.Now()
	res, p, _, next, err := r.decide(ctx, key, n)
	r.obs.reportNext(p, key, n, res, next, err, time.Since(start))
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
	res, p, param, next, err := r.decide(ctx, key, n)
	rl := r.obs.rules
	if param != 0 && r.policyFunc != nil && param != r.policyFunc.defParam {
		rl = []rule{r.k.redisRule(param)}
	}
	d := withNext(r.obs.decision(res, p, rl), next)
	if r.obs.hooks != nil {
		r.obs.report(key, n, d, err, time.Since(start))
	}
	return d, err
}

// decide decides n for key, after allow's checks, and also returns the
// policy of the call, its param (0 for the limiter's own), and the wait
// until its next unit when the script tells it (a sliding window with
// units taken; 0 otherwise). A call on a key of allowed length of a
// limiter without a PolicyFunc stays on this file's path: its key's
// length is a compare, its policy the limiter's own, and its Redis key
// is formed when the call is encoded (see redisbatch.Request.Key); any
// other goes through decideKeyed.
func (r *redisLimiter) decide(ctx context.Context, key string, n int) (Result, Policy, int64, time.Duration, error) {
	if r.policyFunc == nil && (r.obs.keys.max <= 0 || len(key) <= r.obs.keys.max) {
		if err := checkCost(n, r.limit); err != nil {
			return Result{Limit: r.limit}, r.obs.policy, 0, 0, err
		}
		res, next, err := r.requestNext(&redisbatch.Request{Ctx: ctx, Prefix: r.prefix, Name: key, N: n}, r.limit)
		return res, r.obs.policy, 0, next, err
	}
	return r.decideKeyed(ctx, key, n)
}

// request sends p and turns its record of the reply into its answer, for
// a call whose limit is limit.
func (r *redisLimiter) request(p *redisbatch.Request, limit int) (Result, error) {
	res, _, err := r.requestNext(p, limit)
	return res, err
}

// requestNext is request, which also returns the wait until the next unit
// the record tells (0 when it tells none; see Decision.NextUnit). The
// verdict was checked against p's limit when the reply was read (see
// redisbatch.Request.Fault): its numbers are in range.
func (r *redisLimiter) requestNext(p *redisbatch.Request, limit int) (Result, time.Duration, error) {
	v, err := r.verdict(p)
	if err != nil {
		return Result{Limit: limit}, 0, err
	}
	return Result{
		Allowed:    v.Allowed == 1,
		Limit:      limit,
		Remaining:  int(v.Remaining),
		RetryAfter: time.Duration(v.RetryAfter) * time.Microsecond,
		ResetAfter: time.Duration(v.ResetAfter) * time.Microsecond,
	}, time.Duration(v.Next) * time.Microsecond, nil
}

// verdict sends p, a request of one check, and returns the check's
// verdict as the reply was read (checked, but for a Release's or an
// Extend's; see redisbatch.Request.Verdict), or the error of a request
// that failed: ErrBackend for a send or a reply that failed, or a verdict
// out of range, ErrCorruptState for a key the script refused.
func (r *redisLimiter) verdict(p *redisbatch.Request) (redisbatch.Verdict, error) {
	if !r.send.Send(p) {
		return redisbatch.Verdict{}, fmt.Errorf("ratelimit: %s %s: %w: %w", r.name, r.unsentName(p), ErrBackend, p.Ctx.Err())
	}
	switch {
	case p.Err != nil:
		return redisbatch.Verdict{}, fmt.Errorf("ratelimit: %s %s: %w", r.name, r.keyName(p), backendErr(p.Err))
	case p.Fault == redisbatch.Refused:
		// The script refused a key that does not hold its state: that
		// concerns this key's data, not the backend.
		_, reason, _ := p.Record.Refusal()
		return redisbatch.Verdict{}, fmt.Errorf("ratelimit: %s %s: %w: %s", r.name, r.keyName(p), ErrCorruptState, reason)
	case p.Fault == redisbatch.OutOfRange:
		return redisbatch.Verdict{}, fmt.Errorf("ratelimit: %s %s: %w: %w: %q", r.name, r.keyName(p), ErrBackend, errOutOfRange, p.Record)
	case p.Fault != redisbatch.Believed:
		return redisbatch.Verdict{}, fmt.Errorf("ratelimit: %s %s: %w: unexpected reply from Redis script: %q", r.name, r.keyName(p), ErrBackend, p.Record)
	}
	return p.Verdict, nil
}

// adjust applies a Refund or Settle (op) of taken and cost to key, and
// reports it to the adjust hooks, if any.
func (r *redisLimiter) adjust(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if r.obs.adjust == nil {
		return r.settle(ctx, key, taken, cost, opts)
	}
	start := time.Now()
	res, err := r.settle(ctx, key, taken, cost, opts)
	r.obs.reportAdjust(op, key, taken, cost, opts, res, err, time.Since(start))
	return res, err
}

// resetReported empties key, and reports it to the adjust hooks, if any.
func (r *redisLimiter) resetReported(ctx context.Context, key string) error {
	if r.obs.adjust == nil {
		return r.reset(ctx, key)
	}
	start := time.Now()
	err := r.reset(ctx, key)
	r.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, err, time.Since(start))
	return err
}

// nodes returns the function that names the server of key's Redis keys
// (see redisbatch.Sender.Node), or nil for a client of one server or of
// unknown routing.
func (r *redisLimiter) nodes() func(key string) string {
	if r.send == nil || !r.send.ByNode() {
		return nil
	}
	return r.send.Node
}

// engineObserver returns r's observer; nil for a nil r or one whose client is nil
// (a zero-value limiter's).
func (r *redisLimiter) engineObserver() *observer {
	if r == nil || r.client == nil {
		return nil
	}
	return &r.obs
}
