package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// FleetConfig configures a Fleet. Name is required; the zero value of every
// other field picks its default.
type FleetConfig struct {
	// Name is the Redis key of the fleet's membership, a sorted set: every
	// replica of one fleet gives the same Name, and fleets of different
	// services give different ones, as in "ratelimit:fleet:api".
	Name string
	// ID names this replica in the fleet, unique among its replicas; ""
	// means "<hostname>-<pid>-<8 random hex digits>".
	ID string
	// Heartbeat is the time between two heartbeats of Run; 0 means 1 s.
	Heartbeat time.Duration
	// TTL bounds how long a replica is counted as alive after its latest
	// heartbeat, rounded up to whole milliseconds; 0 means 3 × Heartbeat.
	// The others stop counting it at their first heartbeat from TTL −
	// Heartbeat on, so within TTL. It must be longer than twice Heartbeat,
	// so that a replica that beats on time never drops out: the margin,
	// TTL − 2 × Heartbeat, is how late a heartbeat may be.
	TTL time.Duration
	// Assume is the number of live replicas Live reports until a heartbeat
	// has answered; 0 means 1. Set it to the fleet's usual size when a
	// replica may start while Redis is down, so that its fallbacks do not
	// take the whole limit.
	Assume int
	// OnError, when not nil, hears every error of Run's heartbeats and of
	// its leaving, from Run's goroutine; Run carries on after an error.
	OnError func(error)
	// Logger hears when Run's heartbeats start failing, so that a replica
	// sizing its fallbacks by a stale count is not silent: one line at
	// Warn at the first failure, with the fleet's Name, this replica's ID,
	// the count of live replicas it keeps and the error, and one at Info
	// once the heartbeats have answered again with no failure for 10 s,
	// with how long they failed and how many did (see GuardConfig.Logger),
	// whether or not OnError is set. nil means slog.Default(), read at each
	// line; to log nothing, give slog.New(slog.DiscardHandler).
	Logger *slog.Logger
	// CallerClock, when not nil, is the clock the heartbeats read (µs of
	// Unix time, which the script rounds down to whole ms), sent with each
	// heartbeat to a variant of the fleet script that never calls TIME, for servers that
	// refuse TIME in scripts (see WithCallerClock); nil: the server's
	// TIME. Replicas whose clocks disagree by d see each other's
	// heartbeats expire up to d early or late: keep d well under the
	// margin TTL − 2 × Heartbeat, or a replica ahead may stop counting
	// one that beats on time. A reading before 1970 or from 2^52 µs on
	// fails the heartbeat with an error wrapping ErrInvalidConfig.
	CallerClock Clock
}

// Fleet is this replica's membership of a fleet of replicas sharing one
// Redis, for fallbacks that take their share of a shared limit (see
// Fleet.Fallback and Fleet.Share): while Redis is up, each replica
// registers itself with a heartbeat that lasts TTL, and learns how many
// replicas are alive.
//
// Each heartbeat is one script call on the server's TIME: it adds or
// refreshes the replica in the fleet's sorted set (member ID, score the
// server time in ms at which it expires), removes the members that have
// expired, and returns how many are live: those that do not expire before
// the caller's next heartbeat. A replica that joins is counted by the
// others at their next heartbeat, within Heartbeat; one that stops (Run
// returns) leaves at once and is uncounted within Heartbeat; one that dies
// without leaving is uncounted by every other within TTL of its latest
// heartbeat (at their first heartbeat from TTL − Heartbeat on). A replica
// that beats late by up to TTL − 2 × Heartbeat is still counted. The
// sorted set expires with its latest member, so a fleet whose replicas all
// stopped leaves nothing in Redis.
//
// While Redis is unreachable, the heartbeats fail and Live keeps the count
// of the latest one that answered: each replica keeps its share as it was,
// and Run logs the outage once (see FleetConfig.Logger).
// After a restart of Redis, or a FLUSHALL, every replica is counted again
// by its next heartbeat.
//
// A Fleet is safe for concurrent use. NewFleet starts nothing: the caller
// runs Run in a goroutine of its own.
type Fleet struct {
	client    redis.Scripter
	key, id   string
	heartbeat time.Duration
	ttlMillis int64
	// beatMillis is Heartbeat in whole ms, rounded up: a member expiring
	// within it of a heartbeat is not counted.
	beatMillis int64
	onError    func(error)
	outage     *outageLog            // logs Run's heartbeats' outages
	now        func() (int64, error) // CallerClock's time in µs; nil: the server's TIME
	live       atomic.Int64          // the latest count, >= 1
	running    atomic.Bool           // Run is running
}

// NewFleet returns this replica's membership of the fleet cfg.Name kept in
// Redis through client: a *redis.Client, *redis.ClusterClient, *redis.Ring
// or failover client (the fleet is one key, so any of them serves it). It
// talks to nothing until Beat or Run. It returns an error wrapping
// ErrInvalidConfig for a nil client, an empty Name, a negative Heartbeat,
// TTL or Assume, or a TTL that is not longer than twice Heartbeat.
func NewFleet(client redis.Scripter, cfg FleetConfig) (*Fleet, error) {
	const kind = "NewFleet"
	switch {
	case isNil(client):
		return nil, fmt.Errorf("%w: %s: nil Redis client", ErrInvalidConfig, kind)
	case cfg.Name == "":
		return nil, fmt.Errorf("%w: %s: empty Name; give the Redis key of the fleet", ErrInvalidConfig, kind)
	case cfg.Heartbeat < 0:
		return nil, fmt.Errorf("%w: %s: Heartbeat %v must be >= 0", ErrInvalidConfig, kind, cfg.Heartbeat)
	case cfg.TTL < 0:
		return nil, fmt.Errorf("%w: %s: TTL %v must be >= 0", ErrInvalidConfig, kind, cfg.TTL)
	case cfg.Assume < 0:
		return nil, fmt.Errorf("%w: %s: Assume %d must be >= 0", ErrInvalidConfig, kind, cfg.Assume)
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = time.Second
	}
	if cfg.TTL == 0 {
		if cfg.Heartbeat > maxSpan/3 {
			return nil, fmt.Errorf("%w: %s: Heartbeat %v is too long for a TTL of 3 heartbeats", ErrInvalidConfig, kind, cfg.Heartbeat)
		}
		cfg.TTL = 3 * cfg.Heartbeat
	}
	if cfg.TTL <= 2*cfg.Heartbeat {
		return nil, fmt.Errorf("%w: %s: TTL %v must be longer than twice Heartbeat %v", ErrInvalidConfig, kind, cfg.TTL, cfg.Heartbeat)
	}
	if cfg.ID == "" {
		cfg.ID = defaultReplicaID()
	}
	ttl := cfg.TTL.Milliseconds()
	if cfg.TTL%time.Millisecond != 0 {
		ttl++
	}
	beat := cfg.Heartbeat.Milliseconds()
	if cfg.Heartbeat%time.Millisecond != 0 {
		beat++
	}
	if cfg.CallerClock != nil && isNil(cfg.CallerClock) {
		return nil, fmt.Errorf("%w: %s: CallerClock is a nil %T", ErrInvalidConfig, kind, cfg.CallerClock)
	}
	f := &Fleet{client: client, key: cfg.Name, id: cfg.ID, heartbeat: cfg.Heartbeat, ttlMillis: ttl, beatMillis: beat, onError: cfg.OnError}
	f.outage = fleetOutageLog(cfg.Logger, systemClock{}, cfg.Name, cfg.ID)
	f.now = callerNow(cfg.CallerClock)
	f.live.Store(int64(max(cfg.Assume, 1)))
	return f, nil
}

// defaultReplicaID returns "<hostname>-<pid>-<8 random hex digits>".
func defaultReplicaID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "replica"
	}
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand's Read never fails
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ID returns this replica's id in the fleet; "" for a nil *Fleet.
func (f *Fleet) ID() string {
	if f == nil {
		return ""
	}
	return f.id
}

// Live returns the number of live replicas the latest heartbeat that
// answered counted, this one included, so always >= 1; before any, the
// configuration's Assume (1 by default). It is 1 for a nil *Fleet.
func (f *Fleet) Live() int {
	if f == nil || f.client == nil {
		return 1
	}
	return int(f.live.Load())
}

// Beat sends one heartbeat: it registers this replica for TTL from now on
// the server's clock, and updates Live with the number of live replicas.
// ctx bounds the round trip. Call it once before serving, so that Live is
// the fleet's from the first request; Run calls it every Heartbeat. An
// error of Redis wraps ErrBackend and leaves Live as it was.
func (f *Fleet) Beat(ctx context.Context) error {
	if f == nil {
		return notBuilt("Fleet")
	}
	return f.call(ctx, f.ttlMillis)
}

// Run beats every Heartbeat, the first at once, until ctx ends, then
// leaves the fleet (best effort, within one Heartbeat) so that the others
// resize at their next heartbeat, and returns ctx's error. Each heartbeat
// is bounded by Heartbeat through a client built with ContextTimeoutEnabled
// (through one without it, a stalled server holds a heartbeat for the
// client's ReadTimeout, and delays the next one); its errors go to OnError,
// and Run carries on.
// It returns an error wrapping ErrInvalidConfig at once when another Run of
// f is running, and on a nil or zero-value *Fleet.
func (f *Fleet) Run(ctx context.Context) error {
	if f == nil || f.client == nil {
		return notBuilt("Fleet")
	}
	if ctx == nil {
		return fmt.Errorf("ratelimit: Fleet: %w", errNilContext)
	}
	if !f.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Fleet %q: Run is already running", ErrInvalidConfig, f.id)
	}
	defer f.running.Store(false)
	tick := time.NewTicker(f.heartbeat)
	defer tick.Stop()
	for {
		f.beat(ctx)
		select {
		case <-ctx.Done():
			f.report(f.bounded(context.WithoutCancel(ctx), f.leave))
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// beat sends one of Run's heartbeats, bounded by Heartbeat, and logs and
// reports its error. A heartbeat cut short by the end of Run's ctx is
// neither.
func (f *Fleet) beat(ctx context.Context) {
	err := f.bounded(ctx, f.Beat)
	switch {
	case err == nil:
		f.outage.ok()
	case ctx.Err() == nil:
		f.outage.failed(err, slog.Int("live", f.Live()))
	}
	f.report(err)
}

// fleetOutageLog returns the outageLog of the heartbeats of replica id of
// the fleet name, on clock.
func fleetOutageLog(logger *slog.Logger, clock Clock, name, id string) *outageLog {
	return newOutageLog(logger, clock,
		"ratelimit: fleet heartbeats failing; keeping the latest count of live replicas",
		"ratelimit: fleet heartbeats answering again", "failed_heartbeats",
		slog.String("fleet", name), slog.String("id", id))
}

// leave removes this replica from the fleet.
func (f *Fleet) leave(ctx context.Context) error {
	return f.call(ctx, 0)
}

// bounded runs op with ctx bounded by one Heartbeat.
func (f *Fleet) bounded(ctx context.Context, op func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, f.heartbeat)
	defer cancel()
	return op(ctx)
}

// report hands err, if any, to OnError, if any. A heartbeat cut short by
// the end of Run's ctx is not reported.
func (f *Fleet) report(err error) {
	if err != nil && f.onError != nil && !errors.Is(err, context.Canceled) {
		f.onError(err)
	}
}

// call runs the fleet script for this replica with a TTL of ttl ms (0:
// leave) and stores the count it returns.
func (f *Fleet) call(ctx context.Context, ttl int64) error {
	if f == nil || f.client == nil {
		return notBuilt("Fleet")
	}
	if ctx == nil {
		return fmt.Errorf("ratelimit: Fleet: %w", errNilContext)
	}
	var n int64
	var err error
	if f.now != nil {
		var now int64
		if now, err = f.now(); err != nil {
			return fmt.Errorf("ratelimit: Fleet %q of %q: %w", f.id, f.key, err)
		}
		n, err = fleetCallerScript.Run(ctx, f.client, []string{f.key}, now, f.id, ttl, f.beatMillis).Int64()
	} else {
		n, err = fleetScript.Run(ctx, f.client, []string{f.key}, f.id, ttl, f.beatMillis).Int64()
	}
	if err != nil {
		return fmt.Errorf("ratelimit: Fleet %q of %q: %w", f.id, f.key, backendErr(err))
	}
	if n < 0 || n > int64(maxRedisLimit) {
		return fmt.Errorf("ratelimit: Fleet %q of %q: %w: %w: %d replicas", f.id, f.key, ErrBackend, errOutOfRange, n)
	}
	if ttl > 0 {
		f.live.Store(max(n, 1))
	}
	return nil
}

// Share returns one replica's share of p, a policy the whole fleet shares,
// at the fleet's Live replicas: a Limit of p.Limit/Live rounded down (at
// least 1), and a Window that keeps the rate at exactly p's rate / Live
// (p.Window × share × Live / p.Limit, rounded up to the nanosecond, and
// at most about 73 years, the longest span an in-process limiter's clock
// holds: beyond it, a smaller rate rather than a policy the fallback would
// refuse).
//
// So, for capacity and rate alike, the shares of the live replicas add up
// to no more than p: the capacity is rounded down so that the bursts of
// every replica together never exceed p.Limit, and the window is
// shortened by as much, so that the fleet's sustained rate is p's rate,
// not less (a Limit of 4 over 3 replicas is 1 per Window × 3/4 each,
// rather than 1 per Window, which would lose a quarter of the rate). The
// rounding thus costs the fleet units, never gives it any: the shares'
// Limits add up to p.Limit less p.Limit mod Live (less than one unit per
// replica: 9 of 10 over 3 replicas) that no replica may take in a burst,
// and the Window's rounding up makes each share's rate slower by at most
// a nanosecond per Window. With fewer units than replicas, each keeps 1
// at p's rate / Live (its Window then longer than p's): the fleet's
// bursts may then reach Live units. With one replica, or a p whose Limit
// or Window is not positive, it returns p.
//
// For a fixed window the shares' windows are shorter, by the rounding of
// the limit, than the shared one. It is safe for concurrent use, and 1
// replica for a nil *Fleet.
func (f *Fleet) Share(p Policy) Policy {
	return sharePolicy(p, f.Live())
}

// ShareFunc returns a PolicyFunc giving each key's share (see Share) of its
// policy for the whole fleet: the policy pf gives the key, or def when pf
// is nil or gives the zero Policy. An error of pf is returned as it is.
// Each call reads Live, so that the share follows the fleet; a limiter
// built WithPolicyFunc(ShareFunc(...)) keeps what each key has used when
// the share changes (see WithPolicyFunc), but for a sliding counter, which
// counts apart in each Window and so starts a key afresh when the share's
// Window changes with Live. Use it for a fallback that Fallback does not
// build; def is the fallback's constructor policy as the fleet shares it,
// and the fallback is built with def's numbers. Its shares are rates' (see
// Share), whose Window is scaled with the share: it is not for a
// Concurrency, whose share Fallback builds with its lease TTL kept.
func (f *Fleet) ShareFunc(def Policy, pf PolicyFunc) PolicyFunc {
	return f.shareFunc(def, pf, sharePolicy)
}

// shareFunc returns the PolicyFunc giving each key share(p, Live()) of its
// policy p: the one pf gives the key, or def when pf is nil or gives the
// zero Policy. An error of pf is returned as it is.
func (f *Fleet) shareFunc(def Policy, pf PolicyFunc, share func(Policy, int) Policy) PolicyFunc {
	return func(ctx context.Context, key string) (Policy, error) {
		p := def
		if pf != nil {
			q, err := pf(ctx, key)
			if err != nil {
				return Policy{}, err
			}
			if q != (Policy{}) {
				p = q
			}
		}
		return share(p, f.Live()), nil
	}
}

// Fallback returns the fallback of a Guard in front of backend, for
// OnFailure: FailOver: the in-process limiter that decides as backend
// does, on this replica's share (see Share) of backend's policy of each
// key, so that the fleet stays near the shared limit while Redis is away:
//   - a RedisTokenBucket gives a TokenBucket, a RedisGCRA a GCRA, a
//     RedisFixedWindow a FixedWindow, a RedisSlidingLog a SlidingLog and a
//     RedisSlidingCounter a SlidingCounter, each built WithPolicyFunc(ShareFunc(
//     backend's policy, backend's PolicyFunc if it was built with one));
//   - a RedisCalendarWindow gives a CalendarWindow of the same calendar
//     whose limit for each key is the key's limit on the backend ÷ Live,
//     rounded down, at least 1, in the same windows of the wall clock
//     (which no shorter window gives back: the fleet's fallbacks together
//     have limit mod Live units fewer per window than the backend, less
//     than one per replica: 99 of a monthly 100 over 3 replicas);
//   - a RedisConcurrency gives a Concurrency whose limit for each key is
//     the key's limit on the backend ÷ Live, rounded down, at least 1,
//     with the same lease TTL (not scaled as a rate's Window is: a lease
//     holds its units until it is released or its TTL passes), so limit
//     mod Live units fewer in flight, as for a calendar window;
//   - a Composite of Redis limiters gives a Composite of such in-process
//     limiters, one per part, with the same Names, Keys and PerCall (a
//     RedisConcurrency part gives its Concurrency part).
//
// Each call reads Live, so the share follows the fleet as it grows or
// shrinks, and keeps what each key has used (see WithPolicyFunc; a
// SlidingCounter's key starts afresh when its share's Window changes);
// while Redis is away Live, and so the share, stays as the latest heartbeat
// left it. The Guard that fails over to it brings each key down, at its
// first failed-over call, to its share of what Redis last told this replica
// was left, rounded down (see Guard, Fallbacks start from the backend's
// state), so that a quota Redis had spent is not refilled by every
// replica's share. opts go to each in-process limiter: WithClock,
// WithHooks, WithName, WithMaxDebt, WithMaxSettle, WithMaxKeyLength and
// WithKeysShown apply (the bounds on debt, on one Settle and on a key's
// length, and whether keys are shown, are the backend's unless they say
// otherwise; a concurrency mirror has no debt and no Settle, so those two
// are refused for a RedisConcurrency backend and left out of a Composite's
// concurrency part); WithPolicyFunc is refused, since the share is the
// policy. Parts of a Composite on one Redis limiter share one in-process
// mirror, as they share that limiter's keys. It returns an error wrapping
// ErrInvalidConfig for a backend of another type, a nil or zero-value one,
// or an option that does not apply.
//
// The leases a concurrency mirror grants are the fallback's: the backend
// never counts them, and they hold their units on the fallback until they
// are released or their TTL passes, also after Redis is back. A Guard that
// fails over to it thus lets a key have in flight, for up to one TTL after
// the backend came back (longer for leases that are extended), the
// backend's limit plus each replica's share still held, as the Guard
// documents.
func (f *Fleet) Fallback(backend Limiter, opts ...Option) (Limiter, error) {
	const kind = "Fleet.Fallback"
	if f == nil || f.client == nil {
		return nil, notBuilt("Fleet")
	}
	cfg, err := applyOptions(kind, opts)
	if err != nil {
		return nil, err
	}
	if cfg.policyFunc != nil {
		return nil, fmt.Errorf("%w: %s: WithPolicyFunc does not apply; the fallback's policy is the fleet's share of the backend's", ErrInvalidConfig, kind)
	}
	c, ok := backend.(*Composite)
	if !ok {
		l, err := f.mirror(kind, backend, opts)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	if c == nil || len(c.parts) == 0 {
		return nil, fmt.Errorf("%s: %w", kind, notBuilt("Composite"))
	}
	if c.remote == nil {
		return nil, fmt.Errorf("%w: %s: the Composite's parts are in process already; a fallback mirrors Redis limiters", ErrInvalidConfig, kind)
	}
	parts := make([]Part, len(c.parts))
	// Parts on one Redis limiter share one mirror, as they share one
	// limiter's keys on Redis.
	mirrors := make(map[Limiter]Limiter, len(c.parts))
	for i, p := range c.parts {
		l, ok := mirrors[p.Limiter]
		if !ok {
			partOpts := opts
			if e, ok := engineOf(p.Limiter); ok && e.kindOf().inFlight() {
				partOpts = withoutSettleBounds(opts) // a concurrency part has no debt nor Settle
			}
			if l, err = f.mirror(kind, p.Limiter, partOpts); err != nil {
				return nil, fmt.Errorf("%s: part %q: %w", kind, p.Name, err)
			}
			mirrors[p.Limiter] = l
		}
		parts[i] = Part{Name: p.Name, Limiter: l, Key: p.Key, PerCall: p.PerCall}
	}
	return NewComposite(parts...)
}

// withoutSettleBounds returns opts without those that set WithMaxDebt or
// WithMaxSettle, which only set a config: applying one to a scratch config
// tells.
func withoutSettleBounds(opts []Option) []Option {
	var kept []Option
	for _, opt := range opts {
		var cfg config
		if opt != nil && opt.applyLocal(&cfg) == nil && (cfg.maxDebtSet || cfg.maxSettleSet) {
			continue
		}
		kept = append(kept, opt)
	}
	return kept
}

// mirror returns the in-process limiter of backend's algorithm, one of the
// Redis limiters of this package, deciding by this replica's share of
// backend's policy of each key: its kind's twin, with backend's key rules
// and, but for units in flight (which have neither debt nor Settle), its
// bounds on debt and on a Settle, unless opts give others. A rate's share
// scales its Window (see Share); a calendar's windows are the wall
// clock's, and a Concurrency's leases last as long as backend's, so their
// share is of the limit alone.
func (f *Fleet) mirror(kind string, backend Limiter, opts []Option) (Limiter, error) {
	e, ok := engineOf(backend)
	re, remote := e.(remoteEngine)
	if !ok || !remote {
		return nil, fmt.Errorf("%w: %s: a %T has no in-process mirror; give a RedisTokenBucket, RedisGCRA, RedisFixedWindow, RedisSlidingLog, RedisSlidingCounter, RedisCalendarWindow, RedisConcurrency or a Composite of them", ErrInvalidConfig, kind, backend)
	}
	r := re.remote()
	if r == nil || r.client == nil {
		return nil, fmt.Errorf("%w: %s: a nil or zero-value %T", ErrInvalidConfig, kind, backend)
	}
	k := e.kindOf()
	def := r.obs.policy
	var pf PolicyFunc
	if r.policyFunc != nil {
		pf = r.policyFunc.f
	}
	if k.inFlight() {
		opts = append(keyOptions(r.obs.keys), opts...)
	} else {
		opts = append(append(keyOptions(r.obs.keys), WithMaxDebt(int(r.debt)), WithMaxSettle(int(r.obs.maxSettle))), opts...)
	}
	opts = append(opts, WithPolicyFunc(f.shareFunc(def, pf, k.share)))
	return k.twin(def, backend, opts)
}
