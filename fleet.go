package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
// of the latest one that answered: each replica keeps its share as it was.
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
		f.report(f.bounded(ctx, f.Beat))
		select {
		case <-ctx.Done():
			f.report(f.bounded(context.WithoutCancel(ctx), f.leave))
			return ctx.Err()
		case <-tick.C:
		}
	}
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
