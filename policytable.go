package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPolicyTableRefresh is a PolicyTable's Refresh when its config
// leaves it zero.
const DefaultPolicyTableRefresh = 10 * time.Second

// DefaultPolicyTableMinSync is a PolicyTable's MinSync when its config
// leaves it zero.
const DefaultPolicyTableMinSync = 10 * time.Millisecond

// DefaultPolicyTableMinReload is a PolicyTable's MinReload when its config
// leaves it zero.
const DefaultPolicyTableMinReload = time.Second

// PolicyTableConfig configures a PolicyTable. The zero value means: the
// table "default", checked every DefaultPolicyTableRefresh, read at most
// every DefaultPolicyTableMinSync and read whole at most every
// DefaultPolicyTableMinReload by Run, no Check, errors of Run dropped.
type PolicyTableConfig struct {
	// Name names the table: its Redis key, and the pub/sub channel its
	// changes are announced on, are both "ratelimit:policytable:" + Name.
	// Every replica that shares the table uses the same Name; "" means
	// "default".
	Name string
	// Refresh is the safety net of Run: every Refresh it asks Redis
	// whether the table changed (see MinSync), and checks that its
	// subscription still answers. A change whose notice was lost is seen
	// within Refresh (plus one round trip). It bounds every Redis call
	// Run makes, too. Zero means DefaultPolicyTableRefresh; it must not be
	// negative.
	Refresh time.Duration
	// MinSync is the least time between two reads of Run that follow a
	// notice or a Refresh: each is one script call, which returns the
	// changes made since the replica's version (at most 64) and nothing
	// when there are none. Notices that arrive meanwhile are coalesced
	// into the next read, so whatever arrives on the table's channel, Run
	// reads at most once per MinSync. Zero means
	// DefaultPolicyTableMinSync; it must not be negative.
	MinSync time.Duration
	// MinReload is the least time between two reads of the whole table
	// (one HGETALL) by Run, which it makes when the changes since its
	// version are more than the 64 the table logs, or the table was
	// written whole (Replace, Seed) since. Load is not bounded by it.
	// Zero means DefaultPolicyTableMinReload; it must not be negative.
	MinReload time.Duration
	// Check, when not nil, is asked about every policy the table writes
	// or reads, with the part it is for: "" for a key's own policy (Set),
	// a plan's part name for each of its policies. Set, SetPlan, Replace
	// and Seed refuse a policy it refuses, writing nothing, with an error
	// wrapping ErrInvalidConfig and its error; a replica skips one it
	// reads (see Load). Give it what the limiters following the table
	// accept (a calendar part's window, say), so that a policy they would
	// refuse is refused when it is written rather than on every replica's
	// calls. Give every replica the same Check. It must be safe for
	// concurrent use.
	Check func(part string, p Policy) error
	// OnError receives the errors of Run, which keeps running: Redis
	// unreachable (wrapping ErrBackend), the table missing from Redis
	// (ErrTableMissing), fields skipped, or a key that is not a table's
	// (ErrCorruptState). It is called on Run's goroutine, one call at a
	// time, and may call the table's methods (Replace or Seed, to re-seed
	// it); nil drops them (Logger still logs them).
	OnError func(error)
	// Logger hears when Run's reads start failing, so that replicas
	// deciding on a stale copy are not silent: one line at Warn at the
	// first error, with the table's Name and the error, and one at Info
	// once Run's reads have succeeded again with no error for 10 s, with
	// how long they failed and how many did (see GuardConfig.Logger),
	// whether or not OnError is set. A read cut short by the end of Run's
	// ctx is no failure (nor reported to OnError). nil means
	// slog.Default(), read at each line; to log nothing, give
	// slog.New(slog.DiscardHandler).
	Logger *slog.Logger
	// CallerClock, when not nil, is the clock a write reads for the
	// table's new version (max(previous + 1, now in µs of Unix time)),
	// sent with the write to a variant of the write script that never
	// calls TIME, for servers that refuse TIME in scripts (see
	// WithCallerClock); nil: the server's TIME. Versions still never
	// repeat while the table exists; a table deleted and written again
	// by a writer whose clock is behind may start at a version a replica
	// held before, which that replica then does not read again until a
	// later write. A reading before 1970 or from 2^52 µs on fails the
	// write with an error wrapping ErrInvalidConfig.
	CallerClock Clock
}

// PolicyTable is a table of plans, of each key's plan or own policy, and
// of named flags, that a fleet of replicas shares through Redis, for plans
// and per-customer overrides that change live on every replica at once.
//
// Plans: a Plan holds policies by part, "" for a limiter of one policy,
// or a Composite's parts' names. A key follows a plan (Assign), or has a
// policy of its own (Set): either is the key's one entry, so that moving a
// key to another plan is one write, and changing a plan (SetPlan) changes
// it for all its keys at once.
//
// Reading: each replica holds the whole table in memory; Lookup and the
// PolicyFuncs cost one atomic load and at most three map lookups, never a
// round trip, and allocate nothing. Load reads the table from Redis; Run
// keeps it up to date. Entries lists what the copy holds.
//
// Writing: Set, Assign, Delete, SetPlan, DeletePlan, SetFlag, Replace and
// Seed each change the table in Redis in one script call, which bumps the
// table's version, logs the change and announces it on the table's
// channel, atomically. A write does not change the replica's own copy:
// every replica, the writer included, sees it when its Run hears of it
// and reads it (in about one round trip), or, if the notice is lost, at
// its next refresh (within Refresh).
//
// What a replica trusts: the HASH, never the channel. A notice tells Run
// only to ask Redis what changed; what it installs is what the HASH holds,
// read in one script call, each value checked as a write checks it (see
// Load). So a client that may PUBLISH on the channel but not write the
// HASH changes no replica's copy, and can make each replica read at most
// once per MinSync (see PolicyTableConfig); who may write the HASH
// decides every key's policy. Restrict both with Redis ACLs: see "Policies
// and flags for a whole fleet" in docs/production.md.
//
// In Redis the table is one HASH (see PolicyTableConfig.Name), valid on a
// Redis Cluster; scripts/policytable.lua describes its fields. The
// version is max(previous + 1, the server's time in µs), so it never
// repeats, even after the HASH is deleted and written again.
//
// A missing table: the HASH exists once Replace or Seed wrote it. If it
// disappears (FLUSHALL, a restart without persistence, a failover to a
// replica that never had it), every replica keeps the table it last loaded
// and Run reports ErrTableMissing to OnError at each refresh; the other
// writes fail with ErrTableMissing rather than create a partial table.
// The application re-seeds it from its own source of truth with Replace,
// or with Seed, which writes only if the table is still missing, so that
// every replica may call it (from OnError, say) and the first one wins.
// Entries of the copy a replica kept are such a source.
//
// The PolicyTable example shows a replica that seeds the table, follows a
// flag with a Shadow, and re-seeds the table when it goes missing.
//
// A PolicyTable is safe for concurrent use. Create one with NewPolicyTable.
type PolicyTable struct {
	client    redis.UniversalClient
	name      string
	key       string // the HASH and the channel
	refresh   time.Duration
	minSync   time.Duration
	minReload time.Duration
	check     func(part string, p Policy) error
	onError   func(error)
	outage    *outageLog            // logs Run's errors, once an outage
	now       func() (int64, error) // CallerClock's time in µs; nil: the server's TIME

	cur atomic.Pointer[tableSnapshot] // never nil once built

	mu         sync.Mutex // serialises the readers of Redis that install snapshots
	noReadOnly bool       // the server knows no EVALSHA_RO; guarded by mu
	running    atomic.Bool

	fmu       sync.Mutex // guards followers
	followers []follower
}

// follower is a Shadow whose enforce flag follows a flag of the table.
type follower struct {
	flag   string
	shadow *Shadow
}

// NewPolicyTable returns a PolicyTable on client, empty until Load or Run
// reads it. It starts nothing: call Run (on a goroutine of its own) to keep
// it up to date. It returns an error wrapping ErrInvalidConfig for a nil
// client, a Name holding '{' or '}' (so that the key stays one Redis Cluster
// slot of its own) or longer than MaxPolicyTableName, or a negative
// Refresh, MinSync or MinReload.
func NewPolicyTable(client redis.UniversalClient, cfg PolicyTableConfig) (*PolicyTable, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: NewPolicyTable: nil client", ErrInvalidConfig)
	}
	name := cmp.Or(cfg.Name, "default")
	if strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("%w: NewPolicyTable: name %q holds a brace", ErrInvalidConfig, name)
	}
	if err := checkTableName("table name", name); err != nil {
		return nil, fmt.Errorf("%w: NewPolicyTable: %w", ErrInvalidConfig, err)
	}
	for i, d := range []time.Duration{cfg.Refresh, cfg.MinSync, cfg.MinReload} {
		if d < 0 {
			return nil, fmt.Errorf("%w: NewPolicyTable: negative %s %v", ErrInvalidConfig, [...]string{"Refresh", "MinSync", "MinReload"}[i], d)
		}
	}
	if cfg.CallerClock != nil && isNil(cfg.CallerClock) {
		return nil, fmt.Errorf("%w: NewPolicyTable: CallerClock is a nil %T", ErrInvalidConfig, cfg.CallerClock)
	}
	t := &PolicyTable{
		client:    client,
		name:      name,
		key:       tableKeyPrefix + name,
		refresh:   cmp.Or(cfg.Refresh, DefaultPolicyTableRefresh),
		minSync:   cmp.Or(cfg.MinSync, DefaultPolicyTableMinSync),
		minReload: cmp.Or(cfg.MinReload, DefaultPolicyTableMinReload),
		check:     cfg.Check,
		onError:   cfg.OnError,
		outage:    tableOutageLog(cfg.Logger, systemClock{}, name),
		now:       callerNow(cfg.CallerClock),
	}
	t.cur.Store(emptySnapshot())
	return t, nil
}

// Key returns the table's Redis key, which is also its pub/sub channel.
func (t *PolicyTable) Key() string {
	if t == nil {
		return ""
	}
	return t.key
}

// Lookup returns the policy the table holds for key, and whether it holds
// one: the key's own (see Set), or the part "" of the plan it follows
// (see Assign). It reads the replica's copy: one atomic load and up to
// three map lookups, no allocation, no call to Redis. A key that follows a
// plan the table does not hold, or whose plan has no part "", has none.
// It returns the zero Policy and false on a nil *PolicyTable.
func (t *PolicyTable) Lookup(key string) (Policy, bool) {
	return t.LookupPart(key, "")
}

// LookupPart returns the policy the table holds for part of key, and
// whether it holds one: the part's policy in the plan key follows, or,
// for part "", the key's own policy. It costs what Lookup costs.
func (t *PolicyTable) LookupPart(key, part string) (Policy, bool) {
	if t == nil {
		return Policy{}, false
	}
	return t.cur.Load().lookup(key, part)
}

// PolicyFunc returns the table as a PolicyFunc for WithPolicyFunc: the
// policy Lookup gives the key, or the zero Policy for a key it gives none,
// which the limiter then decides by its own. It never returns an error,
// and costs what Lookup costs.
func (t *PolicyTable) PolicyFunc() PolicyFunc {
	return t.PartPolicyFunc("")
}

// PartPolicyFunc returns the table's policies of part as a PolicyFunc, for
// the part of a Composite (or any limiter) built WithPolicyFunc: the
// policy LookupPart gives the key, or the zero Policy for a key it gives
// none. A key's own policy (Set) is its part "" only: for another part,
// put the key on a plan of its own. It never returns an error, and costs
// what Lookup costs.
func (t *PolicyTable) PartPolicyFunc(part string) PolicyFunc {
	if t == nil {
		return func(context.Context, string) (Policy, error) { return Policy{}, nil }
	}
	return func(_ context.Context, key string) (Policy, error) {
		p, _ := t.cur.Load().lookup(key, part)
		return p, nil
	}
}

// PlanOf returns the plan key follows in the replica's copy, and whether
// it follows one.
func (t *PolicyTable) PlanOf(key string) (string, bool) {
	if t == nil {
		return "", false
	}
	e := t.cur.Load().keys[key]
	return e.plan, e.plan != ""
}

// Plan returns a copy of the plan name as the replica's copy holds it, and
// whether it holds it.
func (t *PolicyTable) Plan(name string) (Plan, bool) {
	if t == nil {
		return nil, false
	}
	p, ok := t.cur.Load().plans[name]
	return maps.Clone(p), ok
}

// Entries returns everything the replica's copy holds, in maps of its own:
// a snapshot to re-seed the table from (see Replace), or to show.
func (t *PolicyTable) Entries() PolicyTableEntries {
	if t == nil {
		return PolicyTableEntries{}
	}
	return t.cur.Load().entries()
}

// Flag returns the flag name as the replica's copy holds it, and whether
// the table holds it.
func (t *PolicyTable) Flag(name string) (on, ok bool) {
	if t == nil {
		return false, false
	}
	on, ok = t.cur.Load().flags[name]
	return on, ok
}

// Len returns the number of keys the replica's copy holds an entry for.
func (t *PolicyTable) Len() int {
	if t == nil {
		return 0
	}
	return len(t.cur.Load().keys)
}

// Version returns the version of the replica's copy of the table: 0 until
// Load or Run first read it, then the version Redis gave it (see
// PolicyTable), which changes with every write.
func (t *PolicyTable) Version() int64 {
	if t == nil {
		return 0
	}
	return t.cur.Load().version
}

// FollowShadow makes s enforce while the table's flag called flag is on,
// and shadow while it is off: from now on, whenever the replica's copy
// changes (through Load or Run), s.SetEnforce is called with the flag. It is
// called at once if the copy holds the flag; while the table does not hold
// it, s keeps its mode. Flip the flag once with SetFlag and every replica's
// Shadow follows. Several Shadows may follow one flag. It returns an error
// wrapping ErrInvalidConfig for a nil s.
func (t *PolicyTable) FollowShadow(flag string, s *Shadow) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if s == nil {
		return fmt.Errorf("%w: PolicyTable %q: FollowShadow: nil Shadow", ErrInvalidConfig, t.name)
	}
	t.fmu.Lock()
	defer t.fmu.Unlock()
	t.followers = append(t.followers, follower{flag: flag, shadow: s})
	if on, ok := t.cur.Load().flags[flag]; ok {
		s.SetEnforce(on)
	}
	return nil
}

// install makes snap the replica's copy and sets the Shadows that follow
// its flags. The caller holds t.mu.
func (t *PolicyTable) install(snap *tableSnapshot) {
	t.cur.Store(snap)
	t.fmu.Lock()
	defer t.fmu.Unlock()
	for _, f := range t.followers {
		if on, ok := snap.flags[f.flag]; ok {
			f.shadow.SetEnforce(on)
		}
	}
}

// skippedErr returns the error that reports the fields of the table's
// HASH a replica refused (nil for none), naming up to three.
func (t *PolicyTable) skippedErr(bad []error) error {
	if len(bad) == 0 {
		return nil
	}
	msgs := make([]string, 0, 3)
	for _, err := range bad[:min(3, len(bad))] {
		msgs = append(msgs, err.Error())
	}
	more := ""
	if len(bad) > 3 {
		more = fmt.Sprintf("; and %d more", len(bad)-3)
	}
	return fmt.Errorf("ratelimit: PolicyTable %q: %w: key %q: %d fields skipped, each key, plan or flag keeping what the copy held: %s%s",
		t.name, ErrCorruptState, t.key, len(bad), strings.Join(msgs, "; "), more)
}
