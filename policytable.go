package ratelimit

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPolicyTableRefresh is a PolicyTable's Refresh when its config
// leaves it zero.
const DefaultPolicyTableRefresh = 10 * time.Second

// PolicyTableConfig configures a PolicyTable. The zero value means: the
// table "default", checked every DefaultPolicyTableRefresh, errors of Run
// dropped.
type PolicyTableConfig struct {
	// Name names the table: its Redis key, and the pub/sub channel its
	// changes are published on, are both "ratelimit:policytable:" + Name.
	// Every replica that shares the table uses the same Name; "" means
	// "default".
	Name string
	// Refresh is the safety net of Run: every Refresh it compares the
	// version of its table with Redis's, reads the table again if they
	// differ, and checks that its subscription still answers. A change
	// whose notification was lost is seen within Refresh (plus one
	// round trip). It bounds every Redis call Run makes, too. Zero means
	// DefaultPolicyTableRefresh; it must not be negative.
	Refresh time.Duration
	// OnError receives the errors of Run, which keeps running: Redis
	// unreachable (wrapping ErrBackend), the table missing from Redis
	// (ErrTableMissing), entries that are not a table's own
	// (ErrCorruptState). It is called on Run's goroutine, one call at a
	// time, and may call the table's methods (Replace or Seed, to re-seed
	// it); nil drops them.
	OnError func(error)
	// CallerClock, when not nil, is the clock a write reads for the
	// table's new version (max(previous + 1, now in µs of Unix time)),
	// sent with the write to a variant of the write script that never
	// calls TIME, for servers that refuse TIME in scripts (see
	// WithCallerClock); nil: the server's TIME. Versions still never
	// repeat while the table exists; a table deleted and written again
	// by a writer whose clock is behind may start at a version a replica
	// held before, which that replica then does not read again until its
	// next Refresh. A reading before 1970 or from 2^52 µs on fails the
	// write with an error wrapping ErrInvalidConfig.
	CallerClock Clock
}

// PolicyTable is a table of policies per key, and of named flags, that a
// fleet of replicas shares through Redis, for plans and per-customer
// overrides that change live on every replica at once.
//
// Reading: each replica holds the whole table in memory; Lookup and the
// PolicyFunc cost one atomic load and one map lookup, never a round trip,
// and allocate nothing. Load reads the table from Redis; Run keeps it up to
// date.
//
// Writing: Set, Delete, SetFlag, Replace and Seed each change the table in
// Redis in one script call, which bumps the table's version and publishes
// the change on the table's channel, atomically. A write does not change
// the replica's own copy: every replica, the writer included, sees it when
// its Run receives the notification (in about one round trip), or, if the
// notification is lost, at its next refresh (within Refresh).
//
// In Redis the table is one HASH (see PolicyTableConfig.Name), valid on a
// Redis Cluster: "v" holds its version, "p:"+key a policy
// ("<limit>/<window in ns>"), "f:"+name a flag ("1" or "0"). The version is
// max(previous + 1, the server's time in µs), so it never repeats, even
// after the HASH is deleted and written again.
//
// A missing table: the HASH exists once Replace or Seed wrote it. If it
// disappears (FLUSHALL, a restart without persistence, a failover to a
// replica that never had it), every replica keeps the table it last loaded
// and Run reports ErrTableMissing to OnError at each refresh; Set, Delete
// and SetFlag fail with ErrTableMissing rather than create a partial table.
// The application re-seeds it from its own source of truth with Replace,
// or with Seed, which writes only if the table is still missing, so that
// every replica may call it (from OnError, say) and the first one wins.
//
// The PolicyTable example shows a replica that seeds the table, follows a
// flag with a Shadow, and re-seeds the table when it goes missing.
//
// A PolicyTable is safe for concurrent use. Create one with NewPolicyTable.
type PolicyTable struct {
	client  redis.UniversalClient
	name    string
	key     string // the HASH and the channel
	refresh time.Duration
	onError func(error)
	now     func() (int64, error) // CallerClock's time in µs; nil: the server's TIME

	cur atomic.Pointer[tableSnapshot] // never nil once built

	mu      sync.Mutex // serialises the readers of Redis that install snapshots
	running atomic.Bool

	fmu       sync.Mutex // guards followers
	followers []follower
}

// tableSnapshot is one version of the table, never modified once stored.
type tableSnapshot struct {
	version  int64 // 0 before the first load
	policies map[string]Policy
	flags    map[string]bool
}

// follower is a Shadow whose enforce flag follows a flag of the table.
type follower struct {
	flag   string
	shadow *Shadow
}

// The prefixes of the table's fields in its HASH, and its version's field.
const (
	tableKeyPrefix   = "ratelimit:policytable:"
	tablePolicyField = "p:"
	tableFlagField   = "f:"
	tableVersion     = "v"
)

// NewPolicyTable returns a PolicyTable on client, empty until Load or Run
// reads it. It starts nothing: call Run (on a goroutine of its own) to keep
// it up to date. It returns an error wrapping ErrInvalidConfig for a nil
// client, a Name holding '{' or '}' (so that the key stays one Redis Cluster
// slot of its own), or a negative Refresh.
func NewPolicyTable(client redis.UniversalClient, cfg PolicyTableConfig) (*PolicyTable, error) {
	if isNil(client) {
		return nil, fmt.Errorf("%w: NewPolicyTable: nil client", ErrInvalidConfig)
	}
	name := cmp.Or(cfg.Name, "default")
	if strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("%w: NewPolicyTable: name %q holds a brace", ErrInvalidConfig, name)
	}
	if cfg.Refresh < 0 {
		return nil, fmt.Errorf("%w: NewPolicyTable: negative refresh %v", ErrInvalidConfig, cfg.Refresh)
	}
	if cfg.CallerClock != nil && isNil(cfg.CallerClock) {
		return nil, fmt.Errorf("%w: NewPolicyTable: CallerClock is a nil %T", ErrInvalidConfig, cfg.CallerClock)
	}
	t := &PolicyTable{
		client:  client,
		name:    name,
		key:     tableKeyPrefix + name,
		refresh: cmp.Or(cfg.Refresh, DefaultPolicyTableRefresh),
		onError: cfg.OnError,
		now:     callerNow(cfg.CallerClock),
	}
	t.cur.Store(&tableSnapshot{policies: map[string]Policy{}, flags: map[string]bool{}})
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
// one. It reads the replica's copy: one atomic load and one map lookup, no
// allocation, no call to Redis. It returns the zero Policy and false on a
// nil *PolicyTable.
func (t *PolicyTable) Lookup(key string) (Policy, bool) {
	if t == nil {
		return Policy{}, false
	}
	p, ok := t.cur.Load().policies[key]
	return p, ok
}

// PolicyFunc returns the table as a PolicyFunc for WithPolicyFunc: the
// policy the table holds for the key, or the zero Policy for a key it does
// not hold, which the limiter then decides by its own. It never returns an
// error, and costs what Lookup costs.
func (t *PolicyTable) PolicyFunc() PolicyFunc {
	if t == nil {
		return func(context.Context, string) (Policy, error) { return Policy{}, nil }
	}
	return t.policy
}

// policy is the table's PolicyFunc.
func (t *PolicyTable) policy(_ context.Context, key string) (Policy, error) {
	return t.cur.Load().policies[key], nil
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

// Len returns the number of policies the replica's copy holds.
func (t *PolicyTable) Len() int {
	if t == nil {
		return 0
	}
	return len(t.cur.Load().policies)
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

// checkTablePolicy returns an error wrapping ErrInvalidConfig, naming key,
// for a policy a table must not hold: one whose Limit or Window is not > 0,
// or one no limiter of this package can decide by (an interval under one
// nanosecond a unit, a fill time beyond the in-process clock), which every
// replica would otherwise fail its calls on.
func checkTablePolicy(name, key string, p Policy) error {
	if p.Limit <= 0 || p.Window <= 0 {
		return fmt.Errorf("%w: PolicyTable %q: key %q: policy %d per %v: limit and window must be > 0", ErrInvalidConfig, name, key, p.Limit, p.Window)
	}
	if _, _, err := checkLocalRate("policy", p); err != nil {
		return fmt.Errorf("ratelimit: PolicyTable %q: key %q: %w", name, key, err)
	}
	return nil
}

// encodeTablePolicy returns p as the table keeps it in Redis.
func encodeTablePolicy(p Policy) string {
	return strconv.Itoa(p.Limit) + "/" + strconv.FormatInt(int64(p.Window), 10)
}

// decodeTablePolicy reads a policy as the table keeps it in Redis.
func decodeTablePolicy(s string) (Policy, bool) {
	l, w, ok := strings.Cut(s, "/")
	if !ok {
		return Policy{}, false
	}
	limit, err1 := strconv.Atoi(l)
	window, err2 := strconv.ParseInt(w, 10, 64)
	p := Policy{Limit: limit, Window: time.Duration(window)}
	if err1 != nil || err2 != nil || p.Limit <= 0 || p.Window <= 0 {
		return Policy{}, false
	}
	return p, true
}

// encodeTableFlag returns a flag as the table keeps it in Redis.
func encodeTableFlag(on bool) string {
	if on {
		return "1"
	}
	return "0"
}

// decodeTableField reads one field of the table's HASH into snap, and
// reports whether it was one of the table's own.
func decodeTableField(snap *tableSnapshot, field, value string) bool {
	switch {
	case strings.HasPrefix(field, tablePolicyField):
		p, ok := decodeTablePolicy(value)
		if ok {
			snap.policies[field[len(tablePolicyField):]] = p
		}
		return ok
	case strings.HasPrefix(field, tableFlagField):
		if value != "0" && value != "1" {
			return false
		}
		snap.flags[field[len(tableFlagField):]] = value == "1"
		return true
	}
	return false
}

// withChange returns a copy of snap at version with field set to value, or
// deleted for an empty value, and whether field and value were the table's
// own. It copies only the map the field belongs to.
func (snap *tableSnapshot) withChange(version int64, field, value string) (*tableSnapshot, bool) {
	next := &tableSnapshot{version: version, policies: snap.policies, flags: snap.flags}
	switch {
	case strings.HasPrefix(field, tablePolicyField):
		next.policies = maps.Clone(snap.policies)
		if value == "" {
			delete(next.policies, field[len(tablePolicyField):])
			return next, true
		}
	case strings.HasPrefix(field, tableFlagField):
		next.flags = maps.Clone(snap.flags)
		if value == "" {
			delete(next.flags, field[len(tableFlagField):])
			return next, true
		}
	default:
		return nil, false
	}
	return next, decodeTableField(next, field, value)
}
