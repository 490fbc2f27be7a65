package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// ErrTableMissing is wrapped by the error of a PolicyTable's Load, Set,
// Delete and SetFlag, and reported by its Run, when the table's key does
// not exist in Redis: it was never written (see Replace and Seed), or it was
// lost (FLUSHALL, a restart without persistence). The replica's copy is
// left as it was. It is of class ErrBackend.
var ErrTableMissing error = &classed{"ratelimit: policy table missing from Redis", ErrBackend}

// Load reads the whole table from Redis (one HGETALL) and makes it the
// replica's copy, so that a replica can be ready before it serves. It
// returns an error wrapping ErrTableMissing if the table does not exist,
// leaving the copy as it was, one wrapping ErrCorruptState for a key that
// is not a table's (no valid version), and one wrapping ErrBackend if
// Redis fails.
//
// Every field is checked as a write checks it (see Set, SetPlan and
// PolicyTableConfig.Check): a field that is not the table's own, a name
// or value too long, or a policy a write would refuse is skipped, its
// key, plan or flag keeping what the copy held (nothing, if it held
// nothing), and the rest is installed, with an error wrapping
// ErrCorruptState that counts and names them. Run reads changes the same
// way.
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
	snap, bad, err := snapshotOf(m, t.cur.Load(), t.check)
	if err != nil {
		return fmt.Errorf("ratelimit: PolicyTable %q: key %q: %w", t.name, t.key, err)
	}
	t.install(snap)
	return t.skippedErr(bad)
}

// sync brings the replica's copy to the table's version in Redis with one
// call of the read script, when the table's log holds every change since
// the copy's version, and reports whether the table must be read whole
// instead. It installs only what the HASH holds, checked as load checks
// it.
func (t *PolicyTable) sync(ctx context.Context) (reload bool, _ error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cur := t.cur.Load()
	reply, err := t.readScript(ctx, strconv.FormatInt(cur.version, 10))
	if err != nil {
		if strings.Contains(err.Error(), "PTMISSING") {
			return false, fmt.Errorf("ratelimit: PolicyTable %q: %w (key %q)", t.name, ErrTableMissing, t.key)
		}
		return false, t.redisErr("read", err)
	}
	r, err := parseTableReply(reply)
	if err != nil {
		return false, fmt.Errorf("ratelimit: PolicyTable %q: %w: %w", t.name, ErrBackend, err)
	}
	switch {
	case r.reload:
		return true, nil
	case r.version == cur.version:
		return false, nil
	}
	next, bad := cur.withChanges(r.version, r.changes, t.check)
	t.install(next)
	return false, t.skippedErr(bad)
}

// readScript runs the read script for a copy at version, as EVALSHA_RO
// (so that a user with read-only rights on the table may run it), or, on
// a server that does not know EVALSHA_RO (before Redis 7), as EVALSHA.
// The caller holds t.mu.
func (t *PolicyTable) readScript(ctx context.Context, version string) ([]any, error) {
	if !t.noReadOnly {
		reply, err := policyTableReadScript.RunRO(ctx, t.client, []string{t.key}, version).Slice()
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "unknown command") {
			return reply, err
		}
		t.noReadOnly = true
	}
	return policyTableReadScript.Run(ctx, t.client, []string{t.key}, version).Slice()
}

// tableReply is a reply of the read script.
type tableReply struct {
	reload  bool
	version int64
	changes []fieldValue
}

// parseTableReply reads a reply of the read script (see
// scripts/policytable_read.lua), refusing one that is not such a reply.
func parseTableReply(reply []any) (tableReply, error) {
	var r tableReply
	if len(reply) < 2 {
		return r, fmt.Errorf("read script reply of %d elements", len(reply))
	}
	status, _ := reply[0].(string)
	v, _ := reply[1].(string)
	version, ok := parseTableNumber(v)
	if !ok {
		return r, fmt.Errorf("read script reply: version %q", clip(v))
	}
	r.version = version
	switch status {
	case "same", "reload":
		if len(reply) != 2 {
			return r, fmt.Errorf("read script reply: %q with %d elements", status, len(reply))
		}
		r.reload = status == "reload"
		return r, nil
	case "changes":
	default:
		return r, fmt.Errorf("read script reply: status %q", clip(status))
	}
	rest := reply[2:]
	if len(rest) == 0 || len(rest)%2 != 0 || len(rest) > 2*tableLogSize {
		return r, fmt.Errorf("read script reply: %d elements of changes", len(rest))
	}
	r.changes = make([]fieldValue, 0, len(rest)/2)
	for i := 0; i < len(rest); i += 2 {
		field, ok1 := rest[i].(string)
		x, ok2 := rest[i+1].(string)
		value, present := strings.CutPrefix(x, "=")
		if !ok1 || !ok2 || (!present && x != "") {
			return r, fmt.Errorf("read script reply: change %d is not a field and a value", i/2)
		}
		r.changes = append(r.changes, fieldValue{field: field, value: value, gone: !present})
	}
	return r, nil
}

// Set makes key have the policy p of its own, on every replica, in place
// of any plan it followed: one write. It returns an error wrapping
// ErrInvalidConfig, naming key, for a key longer than MaxPolicyTableName,
// a policy whose Limit or Window is not > 0 or that no limiter of this
// package can decide by (under one nanosecond a unit, or a fill time
// beyond the in-process clock), or one the table's Check refuses (see
// PolicyTableConfig); a policy that only some limiters refuse and Check
// lets through (a Redis limiter's, under 1 µs a unit, say) is written, and
// fails those limiters' calls for key with an error wrapping
// ErrInvalidConfig, as any PolicyFunc's does. It returns one wrapping
// ErrTableMissing if the table does not exist (see Replace and Seed), and
// one wrapping ErrBackend if Redis fails. See PolicyTable for when
// replicas see it.
func (t *PolicyTable) Set(ctx context.Context, key string, p Policy) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if err := t.checkEntry(key, tableEntry{own: p}); err != nil {
		return err
	}
	_, err := t.write(ctx, "set", tableEntryField+key, encodeTablePolicy(p))
	return err
}

// Assign makes key follow the plan called plan, on every replica, in place
// of its own policy or the plan it followed: one write, which is how a key
// moves from one plan to another. It returns an error wrapping
// ErrInvalidConfig for a key or plan name longer than MaxPolicyTableName,
// an empty plan name, or a plan the table in Redis does not hold (see
// SetPlan), and is otherwise as Set.
func (t *PolicyTable) Assign(ctx context.Context, key, plan string) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if err := t.checkEntry(key, tableEntry{plan: plan}); err != nil {
		return err
	}
	_, err := t.write(ctx, "set", tableEntryField+key, encodeTableEntry(tableEntry{plan: plan}))
	return err
}

// Delete removes key's entry from the table, its own policy or its plan,
// on every replica: the key is then decided by the limiter's own policy.
// Deleting a key the table does not hold changes nothing. Errors are as
// Set's.
func (t *PolicyTable) Delete(ctx context.Context, key string) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if err := checkTableName("key", key); err != nil {
		return fmt.Errorf("%w: PolicyTable %q: %w", ErrInvalidConfig, t.name, err)
	}
	_, err := t.write(ctx, "del", tableEntryField+key)
	return err
}

// SetPlan makes the table hold plan under name, on every replica: one
// write, which changes the policies of every key that follows the plan. It
// returns an error wrapping ErrInvalidConfig, naming the plan, for an
// empty name or one longer than MaxPolicyTableName, a plan of no part or
// more than 16, a part's name a Plan cannot hold, or a policy Set would
// refuse (Check is asked with the policy's part); other errors are as
// Set's.
func (t *PolicyTable) SetPlan(ctx context.Context, name string, plan Plan) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if err := t.checkPlan(name, plan); err != nil {
		return err
	}
	_, err := t.write(ctx, "set", tablePlanField+name, encodeTablePlan(plan))
	return err
}

// DeletePlan removes the plan name from the table, on every replica. It
// returns an error wrapping ErrInvalidConfig while any key follows the
// plan in Redis (move them with Assign first), and changes nothing for a
// plan the table does not hold; other errors are as Set's.
func (t *PolicyTable) DeletePlan(ctx context.Context, name string) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if err := checkTableName("plan", name); err != nil {
		return fmt.Errorf("%w: PolicyTable %q: %w", ErrInvalidConfig, t.name, err)
	}
	_, err := t.write(ctx, "del", tablePlanField+name)
	return err
}

// SetFlag sets the table's flag name, on every replica, and so the Shadows
// that follow it (see FollowShadow). It returns an error wrapping
// ErrInvalidConfig for a name longer than MaxPolicyTableName; other errors
// are as Set's.
func (t *PolicyTable) SetFlag(ctx context.Context, name string, on bool) error {
	if t == nil {
		return notBuilt("PolicyTable")
	}
	if err := checkTableName("flag", name); err != nil {
		return fmt.Errorf("%w: PolicyTable %q: %w", ErrInvalidConfig, t.name, err)
	}
	_, err := t.write(ctx, "set", tableFlagField+name, encodeTableFlag(on))
	return err
}

// Replace makes the table hold exactly entries, creating it if it does
// not exist: the way to seed a table, or re-seed it from the
// application's source of truth (or from a replica's Entries). It is one
// script call, which blocks the server while it writes (a few hundred
// milliseconds per 100,000 entries), and every replica then reads the
// whole table once (within MinReload). It returns an error wrapping
// ErrInvalidConfig, naming what is wrong, for anything Set, Assign,
// SetPlan or SetFlag would refuse, a key in both Keys and Policies, or a
// key whose plan Plans does not hold, and writes nothing; and one wrapping
// ErrBackend if Redis fails.
//
// See the PolicyTable example for a replica that seeds the table, and
// re-seeds it after a FLUSHALL.
func (t *PolicyTable) Replace(ctx context.Context, entries PolicyTableEntries) error {
	_, err := t.replace(ctx, "replace", entries)
	return err
}

// Seed is Replace, but only if the table does not exist; it reports
// whether it wrote it. Every replica may call it, at start or when Run
// reports ErrTableMissing: the first call writes, and the others change
// nothing, so a replica whose source is older cannot undo a change made
// since.
func (t *PolicyTable) Seed(ctx context.Context, entries PolicyTableEntries) (bool, error) {
	return t.replace(ctx, "seed", entries)
}

// replace is Replace and Seed, by the script's operation op.
func (t *PolicyTable) replace(ctx context.Context, op string, e PolicyTableEntries) (bool, error) {
	if t == nil {
		return false, notBuilt("PolicyTable")
	}
	n := len(e.Plans) + len(e.Keys) + len(e.Policies) + len(e.Flags)
	pairs := make([]string, 0, 2*n)
	for name, plan := range e.Plans {
		if err := t.checkPlan(name, plan); err != nil {
			return false, err
		}
		pairs = append(pairs, tablePlanField+name, encodeTablePlan(plan))
	}
	for key, plan := range e.Keys {
		if _, both := e.Policies[key]; both {
			return false, fmt.Errorf("%w: PolicyTable %q: key %s is in both Keys and Policies", ErrInvalidConfig, t.name, KeyDigest(key))
		}
		if err := t.checkEntry(key, tableEntry{plan: plan}); err != nil {
			return false, err
		}
		if _, ok := e.Plans[plan]; !ok {
			return false, fmt.Errorf("%w: PolicyTable %q: key %s follows plan %q, which Plans does not hold", ErrInvalidConfig, t.name, KeyDigest(key), clip(plan))
		}
		pairs = append(pairs, tableEntryField+key, encodeTableEntry(tableEntry{plan: plan}))
	}
	for key, p := range e.Policies {
		if err := t.checkEntry(key, tableEntry{own: p}); err != nil {
			return false, err
		}
		pairs = append(pairs, tableEntryField+key, encodeTablePolicy(p))
	}
	for name, on := range e.Flags {
		if err := checkTableName("flag", name); err != nil {
			return false, fmt.Errorf("%w: PolicyTable %q: %w", ErrInvalidConfig, t.name, err)
		}
		pairs = append(pairs, tableFlagField+name, encodeTableFlag(on))
	}
	return t.write(ctx, op, pairs...)
}

// checkEntry returns an error wrapping ErrInvalidConfig, naming key, for
// an entry the table must not hold for it.
func (t *PolicyTable) checkEntry(key string, e tableEntry) error {
	err := checkTableName("key", key)
	if err == nil && e.plan != "" {
		err = checkTableName("plan", e.plan)
	} else if err == nil {
		err = checkTablePolicyFor(t.check, "", e.own)
	}
	if err != nil {
		return fmt.Errorf("%w: PolicyTable %q: key %s: %w", ErrInvalidConfig, t.name, KeyDigest(key), err)
	}
	return nil
}

// checkPlan returns an error wrapping ErrInvalidConfig, naming the plan,
// for a plan the table must not hold.
func (t *PolicyTable) checkPlan(name string, plan Plan) error {
	err := checkTableName("plan", name)
	if err == nil {
		err = checkTablePlan(t.check, plan)
	}
	if err != nil {
		return fmt.Errorf("%w: PolicyTable %q: plan %q: %w", ErrInvalidConfig, t.name, clip(name), err)
	}
	return nil
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
		script, argv = policyTableCallerScript, append([]any{now}, argv...)
	}
	reply, err := script.Run(ctx, t.client, []string{t.key}, argv...).Slice()
	if err != nil {
		switch msg := err.Error(); {
		case strings.Contains(msg, "PTMISSING"):
			return false, fmt.Errorf("ratelimit: PolicyTable %q: %w (key %q): seed it with Replace or Seed", t.name, ErrTableMissing, t.key)
		case strings.Contains(msg, "PTNOPLAN"):
			return false, fmt.Errorf("%w: PolicyTable %q: key %s: the table does not hold plan %q (see SetPlan)",
				ErrInvalidConfig, t.name, KeyDigest(strings.TrimPrefix(args[0], tableEntryField)), clip(strings.TrimPrefix(args[1], tablePlanRef)))
		case strings.Contains(msg, "PTINUSE"):
			return false, fmt.Errorf("%w: PolicyTable %q: plan %q: keys follow it (move them with Assign first)",
				ErrInvalidConfig, t.name, clip(strings.TrimPrefix(args[0], tablePlanField)))
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
