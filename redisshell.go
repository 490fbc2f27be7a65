package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// This file holds the path of one decision of a Redis limiter, from its
// method to the script call and back: the part every Redis limiter type
// embeds, and the engine's allow, decide and verdict. What a call off the
// plain path needs (a key too long, a PolicyFunc's policy, the names of
// keys in errors) and how an engine is built are in redislimiter.go.

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
