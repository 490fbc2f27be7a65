package ratelimit

import (
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// kind declares one limiter kind: what the rest of the stack (the Redis
// keys and rules, a Fleet's fallback, a Prefetch) asks of the kind beyond
// its per-call arithmetic, so that none of them tells the kinds apart by
// hand. Each kind is a zero-size type with value methods, declared in a
// file of its own (bucketkind.go, …) with the engine methods of its two
// limiters, in process and on Redis; kinds.go lists them. Nothing on a hot
// path calls them: the limiters keep the numbers they need.
type kind interface {
	// name returns the kind's in-process type name, "SlidingLog"; its
	// Redis twin's is "Redis" + name.
	name() string

	// letter returns the batch script's name of the kind's algorithm; keyed
	// for a limiter built WithPolicyFunc, whose keys may have to keep their
	// policy's numbers with their state.
	letter(keyed bool) redisbatch.Kind
	// state returns the name of the state the batch script keeps for the
	// kind (keyed: built WithPolicyFunc), which follows a prefix given by
	// WithKeyPrefix in a key: "tb" (a token bucket), "tb-i" (one that
	// keeps its interval, built WithPolicyFunc), "gcra", "gcra-i", "fw" (a
	// fixed window), "sl" (a sliding log), "sc" (a sliding counter), "cal"
	// (a calendar window) and "inflight" (units in flight). No two kinds,
	// nor a kind keyed and not when its keys keep different states, share
	// a name: the script tells some states apart (ErrCorruptState), not
	// all (a GCRA's and a fixed window's are both a STRING of digits).
	state(keyed bool) string
	// redisWindow returns the Window of the policy of limit and param on
	// Redis, param in the script's units (µs per unit, a window in ms, a
	// lease TTL in µs, a calendar period).
	redisWindow(limit int, param int64) time.Duration
	// redisRule returns how a key's state moves under a Redis policy of
	// param, in the script's units (see redisWindow).
	redisRule(param int64) rule

	// inFlight reports a kind of units in flight, held by leases: it has
	// neither debt nor Settle, and a fleet shares its limit, not its rate.
	inFlight() bool
	// blocks tells how a Prefetch leases the kind's units.
	blocks() blocks
	// share returns a fleet replica's share of p among live replicas.
	share(p Policy, live int) Policy
	// twin returns the in-process limiter of the kind that decides as
	// backend, a Redis limiter of the kind whose constructor's policy is
	// def, does, built with opts: a Fleet's mirror of backend.
	twin(def Policy, backend Limiter, opts []Option) (Limiter, error)
}

// blocks is how a Prefetch leases a kind's units.
type blocks int

const (
	// noBlocks: a Prefetch cannot lease the kind.
	noBlocks blocks = iota
	// blocksByUnit: the kind's units come back one by one at a steady
	// rate (a token bucket, GCRA), and a block's unused units decay.
	blocksByUnit
	// blocksByWindow: the kind's units come back when its window ends (a
	// fixed window).
	blocksByWindow
)

// engine is a limiter of this package, of any kind, as the rest of the
// stack finds it without knowing its type: every in-process and Redis
// limiter implements it. Use engineOf, which tells a limiter of this
// package from a type of another package that embeds one.
type engine interface {
	// kindOf returns the limiter's kind.
	kindOf() kind
	// engineObserver returns the limiter's observer; nil unless the limiter was
	// built by its constructor.
	engineObserver() *observer
	// limiter returns the limiter itself, so that engineOf can tell it
	// from a type that embeds it.
	limiter() Limiter
}

// localEngine is an in-process limiter of this package.
type localEngine interface {
	engine
	// clockBase returns the clock the limiter decides on; nil unless the
	// limiter was built by its constructor.
	clockBase() *clockBase
}

// remoteEngine is a Redis limiter of this package.
type remoteEngine interface {
	engine
	// remote returns the limiter's Redis engine; nil for a nil limiter,
	// one whose client is nil for a zero value.
	remote() *redisLimiter
}

// engineOf returns l as an engine when l is one of the limiters of this
// package itself: not a type of another package that embeds one, whose
// methods may answer otherwise.
func engineOf(l Limiter) (engine, bool) {
	e, ok := l.(engine)
	if !ok || e.limiter() != l {
		return nil, false
	}
	return e, true
}

// unitsWindow returns the time limit units of param µs each take.
func unitsWindow(limit int, param int64) time.Duration {
	return time.Duration(int64(limit)*param) * time.Microsecond
}
