package ratelimit

import (
	"log/slog"
	"time"
)

// FailurePolicy says how a Guard answers while its backend is failing.
type FailurePolicy int

const (
	// FailOpen allows requests while the backend fails: the limit is
	// lifted, the service stays up. The Decision says Allowed, naming the
	// tightest of the backend's policies for the key (see Guard), with its
	// Limit and zeros for the rest. Choose it when an outage of the
	// limiter must not become an outage of the service, as for most APIs.
	FailOpen FailurePolicy = iota
	// FailClosed denies requests while the backend fails, with a
	// RetryAfter (and ResetAfter) of FailClosedRetryAfter, or the rest of
	// the breaker's cool-down while it is open, and the backend's Limit.
	// Choose it when the limit protects something that must not be overrun
	// (a paid upstream, a login endpoint under attack).
	FailClosed
	// FailOver asks the Guard's Fallback limiter instead: an in-process
	// limiter of one replica's share of the limit, which Fleet.Fallback
	// builds and sizes by the replicas alive (the shared limit ÷ live
	// replicas, following the fleet as it grows or shrinks), and which
	// starts each key from its share of what the backend last said was
	// left (see Guard, Fallbacks start from the backend's state).
	// Choose it for a middle way: still limited, roughly. A cost within the
	// backend's limit that the fallback can never take (it exceeds the
	// fallback's limit) is denied, with the RetryAfter FailClosed would
	// give, rather than answered with ErrCostExceedsLimit.
	FailOver
)

// GuardConfig configures a Guard. The zero value means: no timeout of its
// own, fail open, no circuit breaker.
type GuardConfig struct {
	// Timeout bounds each backend call through its context; 0 leaves
	// only the caller's deadline. The Redis limiters of this package hold
	// to it whatever the go-redis client's options: through a client
	// built with ContextTimeoutEnabled the client stops the command at the
	// deadline; through one without it (or a redis.Scripter of another
	// package), the call stops waiting at the deadline while its script
	// call runs on, on a goroutine of its own, to the client's
	// ReadTimeout (see docs/redis.md). A Limiter of another package must
	// honour its ctx's deadline itself.
	Timeout time.Duration
	// OnFailure is the policy for calls the backend fails or the open
	// breaker keeps from it.
	OnFailure FailurePolicy
	// Fallback answers under FailOver, and must be nil when no part fails
	// over. For a Redis backend shared by several replicas, build it with
	// Fleet.Fallback, which gives each replica its share of the backend's
	// policy, by the number of replicas alive. For a backend that holds
	// leases (see Acquirer), give an in-process Concurrency (or a
	// Composite holding one): its leases are its own (see Guard). When
	// some parts of a Composite fail over and others do not (see
	// PartFailure), it must be a Composite with a part of the name of each
	// part that fails over, as Fleet.Fallback builds; those parts of it
	// answer.
	Fallback Limiter
	// PartFailure gives parts of a Composite backend (found through a
	// DenyCache, Shadow or Prefetch) a failure policy of their own, by part
	// Name; the parts it does not name follow OnFailure. A call the
	// backend fails is then answered part by part (see Guard, A policy
	// per part): denied when a part that fails closed has its say,
	// otherwise decided by the Fallback's parts that fail over, while the
	// parts that fail open allow it. nil: every part follows OnFailure.
	PartFailure map[string]FailurePolicy
	// RememberKeys bounds how many keys' latest backend answers a Guard
	// with parts that fail over remembers, so that its Fallback starts
	// from what the backend had left (see Guard, Fallbacks start from the
	// backend's state); 0 means DefaultRememberKeys. A key answered while
	// that many are held is not remembered until some are forgotten (a
	// memory is forgotten once every policy of its key is full again).
	RememberKeys int
	// FailClosedRetryAfter is the RetryAfter of a fail-closed denial
	// while the breaker is closed; 0 means 1 s. While the breaker is open,
	// a fail-closed denial's RetryAfter is the rest of the cool-down.
	FailClosedRetryAfter time.Duration
	// BreakerFailures is how many consecutive backend failures open the
	// circuit breaker; 0 means no breaker. In front of a Redis limiter (or
	// a Composite of Redis parts, through DenyCache, Shadow and Prefetch)
	// on a *redis.ClusterClient or *redis.Ring, the breaker is one per
	// node: the failures of the calls whose key the client routes to one
	// master (of its hash slot, in the client's latest view of the
	// cluster) or ring shard count toward that node's breaker alone, so
	// that one master down opens its breaker and the keys of the others
	// stay on Redis. Keys routed before the cluster client has its first
	// view share one breaker, as every key of a backend on one server
	// does.
	BreakerFailures int
	// BreakerCoolDown is how long the breaker stays open before it lets
	// one probe call through; it must be > 0 when BreakerFailures is.
	BreakerCoolDown time.Duration
	// Breaker, when not nil, is a circuit breaker this Guard shares with
	// others (see Breaker), in place of one of its own: BreakerFailures
	// and BreakerCoolDown must then be 0, and the breaker's changes go to
	// the Breaker's Hooks, not to this Guard's.
	Breaker *Breaker
	// Hooks receives each decision, and the changes of the Guard's own
	// breaker (a shared Breaker reports to its own Hooks); nil means
	// NopHooks. When it implements AdjustHooks, it also receives every
	// Refund, Settle and Reset the Guard forwards.
	Hooks Hooks
	// Name names the Guard in what it reports to Hooks (Decision's
	// Limiter); "" means "Guard".
	Name string
	// Clock times calls and the breaker's cool-down; nil means the system
	// clock.
	Clock Clock
	// Logger hears of the backend's outages, so that a failure answered
	// by the policy is not silent: one line at Warn when the backend
	// starts failing (a call it fails or the open breaker keeps from it),
	// with the Guard's Name, its failure policy and the error; one at
	// Warn the first time in the outage that the breaker (its own or a
	// shared one) opens; and one at Info once the backend has answered
	// again with no failure for 10 s, with how long the outage lasted
	// (its first failure to its latest) and how many calls the failure
	// policy answered. Never a line per call, and never a key (this
	// package's errors show keys as digests unless the backend was built
	// WithKeysShown); a backend that flaps gives at most one outage's
	// lines per 10 s. nil means slog.Default(), read at each line. To log
	// nothing, give slog.New(slog.DiscardHandler).
	Logger *slog.Logger
}
