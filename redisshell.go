package ratelimit

import "context"

// redisShell is the part every Redis limiter type embeds: its engine and
// the methods they share, written once. K is the limiter's kind, so that a
// zero value, whose engine is empty, still names its type in errors.
//
// Each method is safe on a nil *redisShell and on a zero value: it returns
// an error wrapping ErrInvalidConfig that names the type (see notBuilt).
type redisShell[K kind] struct {
	r redisLimiter
}

// redisRate is the part of a Redis rate limiter, every Redis kind but
// units in flight: the shared methods and Refund and Settle, which units
// in flight do not have (their units come back through their leases).
type redisRate[K kind] struct {
	redisShell[K]
}

// typeName returns the name of the limiter type: "Redis" and its kind's.
func (s *redisShell[K]) typeName() string {
	var k K
	return "Redis" + k.name()
}

// built tells whether s was built by a constructor.
func (s *redisShell[K]) built() bool { return s != nil && s.r.client != nil }

// Allow takes n units for key in Redis if the key's policy lets them be
// taken now: what that means for each kind is in its type's doc. See
// Limiter for the contract. ctx bounds the round trip; a nil ctx is an
// error. A limiter no constructor returned answers an error wrapping
// ErrInvalidConfig.
func (s *redisShell[K]) Allow(ctx context.Context, key string, n int) (Result, error) {
	if !s.built() {
		return Result{}, notBuilt(s.typeName())
	}
	return s.r.allow(ctx, key, n)
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", and is the key's for a
// limiter built WithPolicyFunc.
func (s *redisShell[K]) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if !s.built() {
		return Decision{}, notBuilt(s.typeName())
	}
	return s.r.decideAll(ctx, key, n)
}

// Policies returns the one policy of key's calls, named "default": the
// limiter's own, or the key's for a limiter built WithPolicyFunc (see
// Decider). It asks nothing of Redis, and fails only on a limiter no
// constructor returned, or when the key's policy cannot be read.
func (s *redisShell[K]) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if !s.built() {
		return nil, notBuilt(s.typeName())
	}
	return s.r.policies(ctx, key)
}

// KeyPrefix returns what every Redis key of the limiter starts with: the
// Redis key of key is KeyPrefix() and key in a hash tag (see the package
// doc, Redis keys). Each type's doc says what its prefix holds. It is ""
// for a limiter no constructor returned.
func (s *redisShell[K]) KeyPrefix() string {
	if s == nil {
		return ""
	}
	return s.r.prefix
}

// Reset deletes key's Redis key, so the key starts afresh. See Adjuster.
func (s *redisShell[K]) Reset(ctx context.Context, key string) error {
	if !s.built() {
		return notBuilt(s.typeName())
	}
	return s.r.resetReported(ctx, key)
}

// Refund gives n units back to key, to what took them as far as the kind
// can tell (see the type's doc). See Adjuster; ctx bounds the round trip.
func (s *redisRate[K]) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	if !s.built() {
		return Result{}, notBuilt(s.typeName())
	}
	return s.r.adjust(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle replaces taken by cost for key: it gives back or takes the
// difference as Refund and Allow would (see the type's doc). See Adjuster;
// ctx bounds the round trip.
func (s *redisRate[K]) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	if !s.built() {
		return Result{}, notBuilt(s.typeName())
	}
	return s.r.adjust(ctx, AdjustSettle, key, taken, cost, opts)
}

// remote returns the engine; nil for a nil s, whose fields are empty for
// a zero value (see redisLimiter.engineObserver).
func (s *redisShell[K]) remote() *redisLimiter {
	if s == nil {
		return nil
	}
	return &s.r
}

// nodes returns the function that names the server of key's Redis keys
// (see redisbatch.Sender.Node), or nil for a client of one server or of
// unknown routing.
func (s *redisShell[K]) nodes() func(key string) string { return s.r.nodes() }

// newRedisRate returns the shared part of a Redis rate limiter of kind K
// around its engine r.
func newRedisRate[K kind](r redisLimiter) redisRate[K] {
	return redisRate[K]{redisShell[K]{r: r}}
}
