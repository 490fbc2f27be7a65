package ratelimit

import (
	"fmt"
	"strings"
)

// Option configures an in-process limiter at construction (NewTokenBucket,
// NewGCRA, NewFixedWindow, NewSlidingLog, NewSlidingCounter,
// NewCalendarWindow, NewConcurrency) and a Fleet's fallback. RedisOption
// configures a Redis limiter. The options that apply to both return a
// SharedOption, which is each: WithHooks, WithName, WithPolicyFunc,
// WithMaxDebt, WithMaxSettle, WithMaxKeyLength, WithKeysShown and
// WithClock. The Redis-only options (WithKeyPrefix, WithoutCoalescing,
// WithCallerClock) return a RedisOption, so passing one to an in-process
// constructor does not compile. What the types cannot say is refused at
// construction, with an error wrapping ErrInvalidConfig that names the
// option: WithClock on a Redis limiter other than RedisCalendarWindow,
// WithMaxDebt and WithMaxSettle on a concurrency limiter, WithPolicyFunc on
// a Fleet's fallback. A nil Option or RedisOption, or a zero SharedOption,
// is an error as well.
type Option interface {
	applyLocal(cfg *config) error
}

// RedisOption configures a Redis limiter at construction (NewRedisTokenBucket
// and the other NewRedis constructors); see Option for which options are
// which.
type RedisOption interface {
	applyRedis(cfg *config) error
}

// SharedOption is an option that applies to in-process and Redis limiters
// alike: it is both an Option and a RedisOption, so either kind of
// constructor takes it. Options kept for both kinds in one []SharedOption
// are passed element by element, or copied into a []Option or a
// []RedisOption for opts... (Go does not convert one slice type to
// another). Its zero value is not an option: a constructor given one
// returns an error wrapping ErrInvalidConfig.
type SharedOption struct {
	set func(*config) error
}

func (o SharedOption) applyLocal(cfg *config) error { return o.apply(cfg) }
func (o SharedOption) applyRedis(cfg *config) error { return o.apply(cfg) }

func (o SharedOption) apply(cfg *config) error {
	if o.set == nil {
		return fmt.Errorf("%w: a zero SharedOption; build one with a With function", ErrInvalidConfig)
	}
	return o.set(cfg)
}

// redisOnly is a RedisOption that is not an Option.
type redisOnly func(*config) error

func (f redisOnly) applyRedis(cfg *config) error { return f(cfg) }

// config collects what the options set.
type config struct {
	clock      Clock
	clockSet   bool
	prefix     string
	prefixSet  bool
	noCoalesce bool
	hooks      Hooks
	name       string
	policyFunc PolicyFunc
	maxDebt    debtCap // see WithMaxDebt; DefaultMaxDebt unless maxDebtSet
	maxDebtSet bool
	// maxSettle is WithMaxSettle's bound; DefaultMaxSettle unless
	// maxSettleSet.
	maxSettle    settleCap
	maxSettleSet bool
	// callerClock is WithCallerClock's clock (systemClock for a nil one);
	// nil without it.
	callerClock Clock
	// keys bounds keys and says how they are shown (WithMaxKeyLength,
	// WithKeysShown); its max is DefaultMaxKeyLength unless set.
	keys keyRules
}

// WithClock makes an in-process limiter read time from c instead of the
// system clock. It does not apply to the Redis limiters, which use the
// server's TIME, but for RedisCalendarWindow, which computes its windows'
// bounds from c (the server's TIME still picks the window). It is a
// SharedOption, so that one RedisCalendarWindow takes it; the other Redis
// constructors refuse it with an error wrapping ErrInvalidConfig that names
// it. A nil c is an error. In tests, c is typically a ratelimittest.Clock,
// which moves only when told to.
func WithClock(c Clock) SharedOption {
	return SharedOption{func(cfg *config) error {
		if isNil(c) {
			return fmt.Errorf("%w: WithClock: nil clock", ErrInvalidConfig)
		}
		cfg.clock, cfg.clockSet = c, true
		return nil
	}}
}

// WithKeyPrefix sets the string that starts every Redis key of a Redis
// limiter, in place of its default prefix. It is a RedisOption: it applies
// to the Redis limiters only, and passing it to an in-process limiter's
// constructor does not compile. Without it, each Redis limiter uses a
// default prefix naming its algorithm and configuration (DefaultKeyPrefix,
// the state's name and ":", followed by "<limit>:<param>:", or
// "keyed:<limit>:<param>:" of its own policy when built WithPolicyFunc), so
// limiters that decide differently never share a key by accident.
//
// Given p, a limiter's keys are p, the name of the state its script keeps
// ("tb", "tb-i" for a token bucket built WithPolicyFunc, "gcra", "gcra-i",
// "fw", "sl", "sc", "cal", "inflight") and ":", then what its state is read
// by beyond its limit (a sliding counter's window in ms, a calendar's
// period and zone, see KeyPrefix), then the key in a hash tag (see the
// package doc, Redis keys). Limiters given the same p thus share their
// keys on purpose when their state means the same, whatever their limits,
// so a redeploy with a new limit keeps each key's state: a window's
// count, a sliding log's entries, and a token bucket's or GCRA's time
// until full, which is the same units used only while the time per unit is
// unchanged (5 used of 10 a minute are 50 of 100 a minute); a fixed
// window's and a sliding log's window may change too, read as a change of
// a key's policy is (see WithPolicyFunc). They never share a key across
// kinds (a GCRA's state and a fixed window's are both a STRING of digits,
// which the script could not tell apart), nor across the windows of a
// sliding counter, or the periods, zones or first weekdays of a calendar,
// whose counts mean nothing in another window. A prefix that starts
// another limiter's shares nothing by design, but may meet its keys: give
// distinct limiters prefixes none of which starts another, without braces
// (a hash tag in a prefix puts all its keys in one slot). A limiter's
// KeyPrefix method returns what its keys start with.
func WithKeyPrefix(p string) RedisOption {
	return redisOnly(func(cfg *config) error {
		cfg.prefix, cfg.prefixSet = p, true
		return nil
	})
}

// WithoutCoalescing makes a Redis limiter send every decision as a script
// call of its own, instead of gathering the calls that arrive while others
// are in flight into one call (see the package doc, Coalescing). Coalescing
// adds no latency when calls do not overlap, and multiplies the decisions
// one Redis server can make; turn it off when each decision must travel
// alone: when a lost reply must put at most one decision in doubt, or when
// tracing or command metrics must show one script call per decision. It is
// a RedisOption: it applies to the Redis limiters only, and passing it to an
// in-process limiter's constructor does not compile.
func WithoutCoalescing() RedisOption {
	return redisOnly(func(cfg *config) error {
		cfg.noCoalesce = true
		return nil
	})
}

// WithHooks makes a limiter report every Allow call to h (Hooks.Decided),
// with its name (see WithName) and Policy, so that any limiter is observed
// without a decorator. A limiter without hooks pays one check of a nil
// field per call. It applies to the fourteen limiters of this package (the
// twelve rate limiters, Concurrency and RedisConcurrency); a limiter
// used as a part of a Composite reports, for each of the Composite's calls,
// its own part's key, cost and Result (a part that would have allowed a
// denied call reports its untouched state, with RetryAfter 0), and the
// call's time. When h also implements AdjustHooks, the limiter reports
// every Refund, Settle and Reset to it as well (Adjusted), and a
// concurrency limiter every Release and Extend of its leases, a part of a
// Composite its own share of the Composite's; a limiter whose hooks do not
// pays one check of a nil field per adjustment. A nil h is an error. It is a
// SharedOption.
func WithHooks(h Hooks) SharedOption {
	return SharedOption{func(cfg *config) error {
		if isNil(h) {
			return fmt.Errorf("%w: WithHooks: nil hooks", ErrInvalidConfig)
		}
		cfg.hooks = h
		return nil
	}}
}

// WithName names a limiter in what it reports to its hooks (Decision's
// Limiter), for metrics labels; without it, the name is the limiter's
// type, such as "TokenBucket" or "RedisGCRA". An empty name is an error.
// It is a SharedOption and applies to every limiter of this package.
func WithName(name string) SharedOption {
	return SharedOption{func(cfg *config) error {
		if name == "" {
			return fmt.Errorf("%w: WithName: empty name", ErrInvalidConfig)
		}
		cfg.name = name
		return nil
	}}
}

// WithMaxKeyLength sets the longest key, in bytes, that a limiter takes:
// a call on a longer key (a Composite's part's key, after Part.Key,
// included) fails with an error wrapping ErrInvalidKey that gives its
// length, not the key. Without it, the bound is DefaultMaxKeyLength. The
// bound is on the caller's key; a Redis limiter's key prefix comes on top.
// It is a SharedOption and applies to every limiter of this package, in
// process and on Redis; a Prefetch refuses such keys
// as its backend does, before it keeps anything of them, and a Guard,
// DenyCache or Shadow returns its backend's error. An n below 1 is an
// error wrapping ErrInvalidConfig.
func WithMaxKeyLength(n int) SharedOption {
	return SharedOption{func(cfg *config) error {
		if n < 1 {
			return fmt.Errorf("%w: WithMaxKeyLength: %d; want >= 1", ErrInvalidConfig, n)
		}
		cfg.keys.max = n
		return nil
	}}
}

// WithKeysShown makes a limiter show keys whole in its errors and in
// what it reports to its hooks (Event.Key, AdjustEvent.Key). Without it,
// a key appears as KeyDigest gives it, so that an API key or a token used
// as a rate-limit key never reaches a log through an error or a hook.
// Give it when keys are not secrets (user ids, addresses) and logs should
// name them. It is a SharedOption and applies to every limiter of this
// package. A Composite
// shows keys when all its parts were built with it (each part reports as
// it was built); a Guard, DenyCache, Shadow or Prefetch shows them as its
// backend does, and never does over a Limiter of another package.
func WithKeysShown() SharedOption {
	return SharedOption{func(cfg *config) error {
		cfg.keys.shown = true
		return nil
	}}
}

// keyOptions returns the options that give a limiter the key rules k: a
// Fleet's mirror takes its backend's.
func keyOptions(k keyRules) []Option {
	opts := []Option{WithMaxKeyLength(k.max)}
	if k.max <= 0 {
		opts = opts[:0]
	}
	if k.shown {
		opts = append(opts, WithKeysShown())
	}
	return opts
}

// WithMaxDebt bounds how far a Settle may drive a key into debt: after a
// Settle, a key owes at most limits times its limit beyond empty (its
// policy's limit: the key's own, for a limiter built WithPolicyFunc). 0
// means a Settle never takes a key below empty, and UnboundedDebt keeps no
// bound but the store's own; without the option, the bound is
// DefaultMaxDebt (1).
//
// What the bound means in time, for a key of limit L and Window W left
// alone after the Settle (d = limits):
//   - TokenBucket, GCRA (in process and on Redis): a debt of D units is
//     paid at the rate, D × W/L: the key allows its next unit within
//     (d × L + 1) × W/L and is full within (1 + d) × W (two Windows by
//     default).
//   - FixedWindow: the window counts at most (1 + d) × L, and its count,
//     debt included, ends with the window: at most W after the Settle,
//     whatever d.
//   - CalendarWindow: as a fixed window, until the calendar window open
//     now ends: up to a minute, an hour, a day, a week or a month,
//     whatever d (a monthly quota spent by a Settle on the 3rd stays spent
//     until the month ends; see WithMaxSettle).
//   - SlidingLog: the units in the window are at most (1 + d) × L; a
//     Settle's units are an entry of the log at the time of the Settle,
//     which leaves it W later, so the key is full at most W after it.
//   - SlidingCounter: the window open now counts at most (1 + d) × L; that
//     count weighs on the next window too, a falling share of it, so the
//     key is full at most 2 × W after the window it was counted in began.
//   - Composite: each part by its own kind and its own limiter's bound; a
//     call waits until every part allows it, so its RetryAfter is the
//     longest of its parts' (the month's end, for a spent monthly part).
//
// A Settle whose cost would go beyond the bound takes what fits and
// forgets the rest: its Result, as every Settle's, describes the key after
// it (Remaining 0, ResetAfter the wait until full with the debt as
// bounded), and does not say that units were forgotten. A key already
// further in debt (after its policy was lowered, say) keeps its debt: a
// Settle never lowers it. Refund, Allow and Reset are unaffected. A Settle
// above WithMaxSettle's bound (ten limits by default) is refused before
// this bound applies. It is a SharedOption and applies to the twelve rate
// limiters of this package (a concurrency limiter, which has no debt,
// refuses it with an error wrapping ErrInvalidConfig that names it), and
// to a Composite through its parts: each part's key is
// bounded by its own limiter's option. On
// Redis the bound travels with the Settle in its one script call, and
// decides exactly as in process. A limits below 0 other than
// UnboundedDebt is an error wrapping ErrInvalidConfig; a very large one
// is the same as UnboundedDebt.
func WithMaxDebt(limits int) SharedOption {
	return SharedOption{func(cfg *config) error {
		if limits < 0 && limits != UnboundedDebt {
			return fmt.Errorf("%w: WithMaxDebt: %d limits; want >= 0, or UnboundedDebt", ErrInvalidConfig, limits)
		}
		cfg.maxDebt, cfg.maxDebtSet = debtCap(limits), true
		return nil
	}}
}

// backend says whether a Redis limiter reads a clock of the client's, which
// decides whether it takes WithClock.
type backend int

const (
	onRedis backend = iota
	// onRedisClocked is a Redis limiter that also reads a Clock of the
	// client's (a RedisCalendarWindow's, for its windows' bounds).
	onRedisClocked
)

// applyOptions runs the options of an in-process limiter named kind over a
// config.
func applyOptions(kind string, opts []Option) (config, error) {
	var cfg config
	for i, opt := range opts {
		if opt == nil {
			return cfg, fmt.Errorf("%w: %s: option %d is nil", ErrInvalidConfig, kind, i)
		}
		if err := opt.applyLocal(&cfg); err != nil {
			return cfg, fmt.Errorf("%s: %w", kind, err)
		}
	}
	return withDefaults(cfg), nil
}

// applyRedisOptions runs the options of a Redis limiter named kind kept in
// where over a config, and refuses WithClock but where the limiter reads a
// clock of the client's.
func applyRedisOptions(kind string, where backend, opts []RedisOption) (config, error) {
	var cfg config
	for i, opt := range opts {
		if opt == nil {
			return cfg, fmt.Errorf("%w: %s: option %d is nil", ErrInvalidConfig, kind, i)
		}
		if err := opt.applyRedis(&cfg); err != nil {
			return cfg, fmt.Errorf("%s: %w", kind, err)
		}
	}
	if where == onRedis && cfg.clockSet {
		return cfg, fmt.Errorf("%w: %s: WithClock does not apply; Redis limiters use the server's TIME (but RedisCalendarWindow, for its windows' bounds)", ErrInvalidConfig, kind)
	}
	return withDefaults(cfg), nil
}

// withDefaults fills in what no option set.
func withDefaults(cfg config) config {
	if cfg.clock == nil {
		cfg.clock = systemClock{}
	}
	if !cfg.maxDebtSet {
		cfg.maxDebt = DefaultMaxDebt
	}
	if !cfg.maxSettleSet {
		cfg.maxSettle = DefaultMaxSettle
	}
	if cfg.keys.max == 0 {
		cfg.keys.max = DefaultMaxKeyLength
	}
	return cfg
}

// newObserver returns the observer of a limiter named by cfg (or by kind
// without its "New") with policy, whose state moves by rl.
func newObserver(cfg config, kind string, policy Policy, rl rule) observer {
	name := cfg.name
	if name == "" {
		name = strings.TrimPrefix(kind, "New")
	}
	return observer{
		hooks: activeHooks(cfg.hooks), adjust: activeAdjustHooks(cfg.hooks), name: name, policy: policy,
		own: []NamedPolicy{{Name: defaultPolicyName, Policy: policy}}, rules: []rule{rl},
		maxSettle: cfg.maxSettle,
		keys:      cfg.keys,
	}
}
