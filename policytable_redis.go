package ratelimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// policyTableLua is the source of the script every write of a PolicyTable
// makes: it changes the table, bumps its version and publishes the change.
//
//go:embed scripts/policytable.lua
var policyTableLua string

// policyTableScript is policyTableLua, sent by its SHA1.
var policyTableScript = redis.NewScript(policyTableLua)

// policyTableCallerScript is the write script of a PolicyTable whose
// PolicyTableConfig has a CallerClock: its last argument is now, in µs of
// Unix time, which it takes off ARGV before anything else, and it never
// calls TIME.
var policyTableCallerScript = redis.NewScript(`local caller_now = table.remove(ARGV)
if type(caller_now) ~= 'string' or #caller_now > 16 or not string.find(caller_now, '^%d+$') or tonumber(caller_now) >= 4503599627370496 then
  return redis.error_reply('ratelimit policy table script: the caller\'s time ' .. tostring(caller_now) .. ' is not whole microseconds from 0 to 2^52')
end
` + callerTimeSource(policyTableLua,
	"local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000000 + tonumber(t[2])\n",
	"local now = tonumber(caller_now)\n"))

// ErrTableMissing is wrapped by the error of a PolicyTable's Load, Set,
// Delete and SetFlag, and reported by its Run, when the table's key does
// not exist in Redis: it was never written (see Replace and Seed), or it was
// lost (FLUSHALL, a restart without persistence). The replica's copy is
// left as it was. It is of class ErrBackend.
var ErrTableMissing error = &classed{"ratelimit: policy table missing from Redis", ErrBackend}

// Load reads the whole table from Redis (one HGETALL) and makes it the
// replica's copy, so that a replica can be ready before it serves. It
// returns an error wrapping ErrTableMissing if the table does not exist,
// leaving the copy as it was, and one wrapping ErrBackend if Redis fails.
// Entries that are not the table's own (written by hand, say) are left
// out, and the copy is installed without them, with an error wrapping
// ErrCorruptState that names them.
func (t *PolicyTable) Load(ctx context.Context) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if ctx == nil {
		return fmt.Errorf("ratelimit: PolicyTable: %w", errNilContext)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.load(ctx)
}

// load is Load; the caller holds t.mu.
func (t *PolicyTable) load(ctx context.Context) error {
	m, err := t.client.HGetAll(ctx, t.key).Result()
	if err != nil {
		return t.redisErr("read", err)
	}
	if len(m) == 0 {
		return fmt.Errorf("ratelimit: PolicyTable %q: %w (key %q)", t.name, ErrTableMissing, t.key)
	}
	snap := &tableSnapshot{policies: make(map[string]Policy, len(m)), flags: map[string]bool{}}
	var bad []string
	for field, value := range m {
		if field == tableVersion {
			snap.version, err = strconv.ParseInt(value, 10, 64)
			if err != nil || snap.version <= 0 {
				return fmt.Errorf("ratelimit: PolicyTable %q: %w: key %q: version %q", t.name, ErrCorruptState, t.key, value)
			}
			continue
		}
		if !decodeTableField(snap, field, value) {
			bad = append(bad, field)
		}
	}
	if snap.version == 0 {
		return fmt.Errorf("ratelimit: PolicyTable %q: %w: key %q has no version", t.name, ErrCorruptState, t.key)
	}
	t.install(snap)
	if len(bad) > 0 {
		if len(bad) > 5 {
			bad = append(bad[:5], "...")
		}
		return fmt.Errorf("ratelimit: PolicyTable %q: %w: key %q: fields left out: %q", t.name, ErrCorruptState, t.key, bad)
	}
	return nil
}

// refreshNow compares the copy's version with Redis's and reads the table
// again if they differ.
func (t *PolicyTable) refreshNow(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, err := t.client.HGet(ctx, t.key, tableVersion).Result()
	if errors.Is(err, redis.Nil) {
		// No version: no table, or a key that is not a table's.
		n, err := t.client.Exists(ctx, t.key).Result()
		if err != nil {
			return t.redisErr("read", err)
		}
		if n > 0 {
			return fmt.Errorf("ratelimit: PolicyTable %q: %w: key %q has no version", t.name, ErrCorruptState, t.key)
		}
		return fmt.Errorf("ratelimit: PolicyTable %q: %w (key %q)", t.name, ErrTableMissing, t.key)
	}
	if err != nil {
		return t.redisErr("read", err)
	}
	if v == strconv.FormatInt(t.cur.Load().version, 10) {
		return nil
	}
	return t.load(ctx)
}

// applyChange applies the change a notification carries (see
// scripts/policytable.lua), or reads the table again when the copy is not
// at the version the change was made on.
func (t *PolicyTable) applyChange(ctx context.Context, payload string) error {
	parts := strings.SplitN(payload, ":", 4)
	var prev, version int64
	var err1, err2 error
	if len(parts) == 4 {
		prev, err1 = strconv.ParseInt(parts[0], 10, 64)
		version, err2 = strconv.ParseInt(parts[1], 10, 64)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(parts) != 4 || err1 != nil || err2 != nil {
		return t.load(ctx)
	}
	cur := t.cur.Load()
	switch {
	case parts[2] == "*" || prev == 0:
		// A table written whole, or anew after it went missing: its
		// version may be below the copy's (another server's clock after
		// a failover), so it is read whatever the versions say.
		return t.load(ctx)
	case version == cur.version:
		return nil // already read
	case version < cur.version && cur.version != 0:
		return nil // older than the copy, which holds it
	case prev == cur.version && parts[2] != "*":
		if next, ok := cur.withChange(version, parts[3], parts[2]); ok {
			t.install(next)
			return nil
		}
	}
	return t.load(ctx)
}

// Set makes the table hold p for key, on every replica. It returns an error
// wrapping ErrInvalidConfig, naming key, for a policy whose Limit or Window
// is not > 0 or that no limiter of this package can decide by (under one
// nanosecond a unit, or a fill time beyond the in-process clock); a policy
// that only some limiters refuse (a Redis limiter's, under 1 µs a unit,
// say) is written, and fails those limiters' calls for key with an error
// wrapping ErrInvalidConfig, as any PolicyFunc's does. It returns one
// wrapping ErrTableMissing if the table does not exist
// (see Replace and Seed), and one wrapping ErrBackend if Redis fails. See
// PolicyTable for when replicas see it.
func (t *PolicyTable) Set(ctx context.Context, key string, p Policy) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if err := checkTablePolicy(t.name, key, p); err != nil {
		return err
	}
	_, err := t.write(ctx, "set", tablePolicyField+key, encodeTablePolicy(p))
	return err
}

// Delete removes key's policy from the table, on every replica: the key is
// then decided by the limiter's own policy. Deleting a key the table does
// not hold changes nothing. Errors are as Set's.
func (t *PolicyTable) Delete(ctx context.Context, key string) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	_, err := t.write(ctx, "del", tablePolicyField+key)
	return err
}

// SetFlag sets the table's flag name, on every replica, and so the Shadows
// that follow it (see FollowShadow). Errors are as Set's.
func (t *PolicyTable) SetFlag(ctx context.Context, name string, on bool) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	_, err := t.write(ctx, "set", tableFlagField+name, encodeTableFlag(on))
	return err
}

// Replace makes the table hold exactly policies and flags, creating it if
// it does not exist: the way to seed a table, or re-seed it from the
// application's source of truth. It is one script call, which blocks the
// server while it writes (a few hundred milliseconds per 100,000 entries),
// and every replica then reads the whole table once. It returns an error wrapping
// ErrInvalidConfig, naming the key, for a policy Set would refuse (and
// writes nothing), and one wrapping ErrBackend if Redis fails.
//
// See the PolicyTable example for a replica that seeds the table, and
// re-seeds it after a FLUSHALL.
func (t *PolicyTable) Replace(ctx context.Context, policies map[string]Policy, flags map[string]bool) error {
	_, err := t.replace(ctx, "replace", policies, flags)
	return err
}

// Seed is Replace, but only if the table does not exist; it reports
// whether it wrote it. Every replica may call it, at start or when Run
// reports ErrTableMissing: the first call writes, and the others change
// nothing, so a replica whose source is older cannot undo a change made
// since.
func (t *PolicyTable) Seed(ctx context.Context, policies map[string]Policy, flags map[string]bool) (bool, error) {
	return t.replace(ctx, "seed", policies, flags)
}

// replace is Replace and Seed, by the script's operation op.
func (t *PolicyTable) replace(ctx context.Context, op string, policies map[string]Policy, flags map[string]bool) (bool, error) {
	if t == nil {
		return false, notBuilt("PolicyTable")
	}
	pairs := make([]string, 0, 2*(len(policies)+len(flags)))
	for key, p := range policies {
		if err := checkTablePolicy(t.name, key, p); err != nil {
			return false, err
		}
		pairs = append(pairs, tablePolicyField+key, encodeTablePolicy(p))
	}
	for name, on := range flags {
		pairs = append(pairs, tableFlagField+name, encodeTableFlag(on))
	}
	return t.write(ctx, op, pairs...)
}

// write runs the table's script with op and its arguments, and reports
// whether the table changed.
func (t *PolicyTable) write(ctx context.Context, op string, args ...string) (bool, error) {
	if ctx == nil {
		return false, fmt.Errorf("ratelimit: PolicyTable: %w", errNilContext)
	}
	argv := make([]any, 0, 2+len(args))
	argv = append(argv, t.key, op)
	for _, a := range args {
		argv = append(argv, a)
	}
	script := policyTableScript
	if t.now != nil {
		now, err := t.now()
		if err != nil {
			return false, fmt.Errorf("ratelimit: PolicyTable %q: %w", t.name, err)
		}
		script, argv = policyTableCallerScript, append(argv, now)
	}
	reply, err := script.Run(ctx, t.client, []string{t.key}, argv...).Slice()
	if err != nil {
		if strings.Contains(err.Error(), "PTMISSING") {
			return false, fmt.Errorf("ratelimit: PolicyTable %q: %w (key %q): seed it with Replace or Seed", t.name, ErrTableMissing, t.key)
		}
		return false, t.redisErr("write", err)
	}
	if len(reply) != 2 {
		return false, fmt.Errorf("ratelimit: PolicyTable %q: %w: unexpected reply %v", t.name, ErrBackend, reply)
	}
	changed, _ := reply[0].(int64)
	return changed == 1, nil
}

// redisErr wraps an error of Redis: ErrCorruptState for a key of another
// type or a table without a version, ErrBackend otherwise.
func (t *PolicyTable) redisErr(what string, err error) error {
	if msg := err.Error(); strings.Contains(msg, "WRONGTYPE") || strings.Contains(msg, "PTCORRUPT") {
		return fmt.Errorf("ratelimit: PolicyTable %q: %w: key %q: %w", t.name, ErrCorruptState, t.key, err)
	}
	return fmt.Errorf("ratelimit: PolicyTable %q: %s: %w: %w", t.name, what, ErrBackend, err)
}

// Run keeps the replica's copy of the table up to date until ctx ends, and
// returns ctx's error then; call it on a goroutine of its own, once per
// table (a second Run at the same time returns an error wrapping
// ErrInvalidConfig at once).
//
// It subscribes to the table's channel, then reads the table (so that no
// change falls between the two), and applies each change it is notified of:
// a Set, Delete or SetFlag on the copy alone (copying the map it changes:
// tens of milliseconds and 5 MB per 100,000 policies), a Replace or Seed
// by reading the whole table. Every Refresh it compares versions, reads the table
// again if they differ, and pings its subscription; a subscription that
// answered nothing within Refresh is dropped. After a lost connection (a
// restart, a failover), it subscribes again, retrying at most every second,
// and reads the table again if its version changed. It keeps the last copy
// it read meanwhile, and when the table is missing (see PolicyTable).
// Errors go to OnError; Run goes on.
func (t *PolicyTable) Run(ctx context.Context) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if ctx == nil {
		return fmt.Errorf("ratelimit: PolicyTable: %w", errNilContext)
	}
	if !t.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: PolicyTable %q: Run is already running", ErrInvalidConfig, t.name)
	}
	defer t.running.Store(false)
	backoff := t.firstBackoff()
	for {
		subscribed, err := t.follow(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if subscribed {
			backoff = t.firstBackoff()
		}
		t.report(err)
		timer := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		}
		backoff = min(2*backoff, time.Second, t.refresh)
	}
}

// firstBackoff is the wait before Run subscribes again after its first
// failure; it doubles with each failure after, up to a second (or Refresh).
func (t *PolicyTable) firstBackoff() time.Duration { return min(50*time.Millisecond, t.refresh) }

// follow is one subscription of Run: it returns when the subscription
// fails, with its error, and whether it was ever confirmed.
func (t *PolicyTable) follow(ctx context.Context) (subscribed bool, _ error) {
	ps := t.client.Subscribe(ctx, t.key)
	defer func() { _ = ps.Close() }()
	// A read blocked on the connection ends when ps is closed.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()

	next := time.Now().Add(t.refresh)
	pinged := false // a ping is unanswered, and nothing came since
	for {
		wait := time.Until(next)
		if wait <= 0 {
			if pinged {
				return subscribed, fmt.Errorf("ratelimit: PolicyTable %q: %w: the subscription answered nothing within %v", t.name, ErrBackend, t.refresh)
			}
			t.report(t.bounded(ctx, t.refreshNow))
			if err := ps.Ping(ctx); err != nil {
				return subscribed, t.redisErr("ping", err)
			}
			pinged = true
			next = time.Now().Add(t.refresh)
			continue
		}
		msg, err := ps.ReceiveTimeout(ctx, wait)
		if ctx.Err() != nil {
			return subscribed, ctx.Err()
		}
		if err != nil {
			var netErr interface{ Timeout() bool }
			if errors.As(err, &netErr) && netErr.Timeout() {
				continue
			}
			return subscribed, t.redisErr("subscription", err)
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			// (Re)subscribed: changes may have been missed before.
			subscribed = true
			t.report(t.bounded(ctx, t.refreshNow))
		case *redis.Message:
			t.report(t.bounded(ctx, func(ctx context.Context) error { return t.applyChange(ctx, m.Payload) }))
		}
	}
}

// bounded calls f with ctx bounded by Refresh.
func (t *PolicyTable) bounded(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, t.refresh)
	defer cancel()
	return f(ctx)
}

// report passes a non-nil err to OnError.
func (t *PolicyTable) report(err error) {
	if err != nil && t.onError != nil {
		t.onError(err)
	}
}
