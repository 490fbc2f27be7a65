package ratelimit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tableErrors collects what a PolicyTable's Run reports to OnError.
type tableErrors struct {
	mu   sync.Mutex
	errs []error
}

func (e *tableErrors) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, err)
}

// has reports whether an error wrapping target was reported.
func (e *tableErrors) has(target error) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, err := range e.errs {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// runTable builds a PolicyTable on client and runs it until the test ends,
// reading the whole table at most once per refresh (MinReload), at most
// once a second.
func runTable(t *testing.T, client redis.UniversalClient, refresh time.Duration) (*PolicyTable, *tableErrors) {
	t.Helper()
	errs := &tableErrors{}
	table, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans", Refresh: refresh, MinReload: min(refresh, time.Second), OnError: errs.add})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- table.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
	})
	return table, errs
}

// eventually polls cond until it holds, failing the test after within.
func eventually(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond) // polling a background loop
	}
}

// holds returns a condition that table holds p for key (the zero Policy:
// holds nothing).
func holds(table *PolicyTable, key string, p Policy) func() bool {
	return func() bool {
		got, ok := table.Lookup(key)
		return got == p && ok == (p != Policy{})
	}
}

var (
	planFree = Policy{Limit: 10, Window: time.Minute}
	planPro  = Policy{Limit: 100, Window: time.Minute}
)

func TestPolicyTableChangesReachEveryRunningReplica(t *testing.T) {
	m := miniredis.RunT(t)
	var replicas []*PolicyTable
	for range 3 {
		client := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = client.Close() })
		table, _ := runTable(t, client, time.Hour) // no refresh: notifications alone
		replicas = append(replicas, table)
	}
	ctx := context.Background()
	writer := replicas[0]
	require.NoError(t, writer.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"acme": planFree}, Flags: map[string]bool{"enforce": false}}))
	for _, r := range replicas {
		eventually(t, time.Second, holds(r, "acme", planFree), "the seed")
	}
	require.NoError(t, writer.Set(ctx, "acme", planPro))
	require.NoError(t, writer.Set(ctx, "globex", planFree))
	require.NoError(t, writer.SetFlag(ctx, "enforce", true))
	require.NoError(t, writer.Delete(ctx, "acme"))
	for _, r := range replicas {
		eventually(t, time.Second, func() bool { on, _ := r.Flag("enforce"); return on }, "the flag")
		eventually(t, time.Second, holds(r, "globex", planFree), "globex")
		eventually(t, time.Second, holds(r, "acme", Policy{}), "acme deleted")
		assert.Equal(t, 1, r.Len())
		assert.Equal(t, writer.Version(), r.Version())
	}
}

func TestPolicyTableGivesALimiterEachKeysPolicy(t *testing.T) {
	_, client, _ := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"pro": {Limit: 3, Window: time.Hour}}}))
	require.NoError(t, table.Load(ctx))
	l, err := NewTokenBucket(PerSecond(1), 1, WithPolicyFunc(table.PolicyFunc()))
	require.NoError(t, err)
	for i, want := range []bool{true, true, true, false} {
		res, err := l.Allow(ctx, "pro", 1)
		require.NoError(t, err)
		assert.Equal(t, want, res.Allowed, "pro call %d", i)
	}
	// A key the table does not hold gets the limiter's own policy.
	for i, want := range []bool{true, false} {
		res, err := l.Allow(ctx, "other", 1)
		require.NoError(t, err)
		assert.Equal(t, want, res.Allowed, "other call %d", i)
	}
}

// miniredisAt is a miniredis and a client to it.
func miniredisAt(t *testing.T) (*miniredis.Miniredis, *redis.Client, context.Context) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	return m, client, context.Background()
}

func TestPolicyTableRefusesBadPoliciesNamingTheKey(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	for _, p := range []Policy{{}, {Limit: 0, Window: time.Second}, {Limit: 1}, {Limit: -1, Window: time.Second}, {Limit: 1, Window: -time.Second}} {
		err := table.Set(ctx, "acme", p)
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, KeyDigest("acme"), "the key, by its digest")
		err = table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planPro, "acme": p}})
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, KeyDigest("acme"), "the key, by its digest")
	}
	assert.Equal(t, "10/60000000000", m.HGet(table.Key(), "p:a"), "nothing written")
	assert.Equal(t, "ratelimit:policytable:plans", table.Key())
}

func TestNewPolicyTableRefusesBadConfig(t *testing.T) {
	_, client, _ := miniredisAt(t)
	for name, c := range map[string]struct {
		client redis.UniversalClient
		cfg    PolicyTableConfig
	}{
		"nil client":       {nil, PolicyTableConfig{}},
		"typed nil client": {(*redis.Client)(nil), PolicyTableConfig{}},
		"brace":            {client, PolicyTableConfig{Name: "{a}"}},
		"negative refresh": {client, PolicyTableConfig{Refresh: -time.Second}},
		"negative MinSync": {client, PolicyTableConfig{MinSync: -time.Second}},
		"negative reload":  {client, PolicyTableConfig{MinReload: -time.Second}},
		"long name":        {client, PolicyTableConfig{Name: strings.Repeat("n", MaxPolicyTableName+1)}},
	} {
		_, err := NewPolicyTable(c.client, c.cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
}

func TestPolicyTableWritesNeedASeededTable(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	require.ErrorIs(t, table.Load(ctx), ErrTableMissing)
	require.ErrorIs(t, table.Set(ctx, "a", planFree), ErrTableMissing)
	require.ErrorIs(t, table.Delete(ctx, "a"), ErrTableMissing)
	require.ErrorIs(t, table.SetFlag(ctx, "f", true), ErrTableMissing)
	assert.False(t, m.Exists(table.Key()), "no partial table")
	assert.ErrorIs(t, ErrTableMissing, ErrBackend)

	seeded, err := table.Seed(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}})
	require.NoError(t, err)
	assert.True(t, seeded)
	seeded, err = table.Seed(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planPro}})
	require.NoError(t, err)
	assert.False(t, seeded, "a seeded table is left as it is")
	require.NoError(t, table.Load(ctx))
	assert.True(t, holds(table, "a", planFree)())

	// An empty table exists: writes succeed on it.
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{}))
	require.NoError(t, table.Set(ctx, "b", planPro))
	require.NoError(t, table.Load(ctx))
	assert.True(t, holds(table, "a", Policy{})())
	assert.True(t, holds(table, "b", planPro)())
}

func TestPolicyTableRefreshCatchesUpWithLostNotifications(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, _ := runTable(t, client, 20*time.Millisecond)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	eventually(t, time.Second, holds(table, "a", planFree), "the seed")
	// A change made without its notification, as if it were lost.
	m.HSet(table.Key(), "p:a", "100/60000000000", "v", "999999999999999999")
	eventually(t, time.Second, holds(table, "a", planPro), "the change, at a refresh")
	assert.Equal(t, int64(999999999999999999), table.Version())
}

func TestPolicyTableKeepsItsCopyAfterFlushallUntilReseeded(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, errs := runTable(t, client, 20*time.Millisecond)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	eventually(t, time.Second, holds(table, "a", planFree), "the seed")

	m.FlushAll()
	eventually(t, time.Second, func() bool { return errs.has(ErrTableMissing) }, "ErrTableMissing reported")
	assert.True(t, holds(table, "a", planFree)(), "the last copy is kept")
	require.ErrorIs(t, table.Set(ctx, "a", planPro), ErrTableMissing)

	seeded, err := table.Seed(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planPro, "b": planFree}})
	require.NoError(t, err)
	require.True(t, seeded)
	eventually(t, time.Second, holds(table, "b", planFree), "the re-seeded table")
	assert.True(t, holds(table, "a", planPro)())
}

func TestPolicyTableReseedsFromOnError(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	source := map[string]Policy{"a": planPro} // the application's source of truth
	var table *PolicyTable
	table, err := NewPolicyTable(client, PolicyTableConfig{Refresh: 20 * time.Millisecond, OnError: func(err error) {
		if errors.Is(err, ErrTableMissing) {
			_, _ = table.Seed(ctx, PolicyTableEntries{Policies: source})
		}
	}})
	require.NoError(t, err)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- table.Run(runCtx) }()
	defer func() { cancel(); <-done }()
	eventually(t, time.Second, holds(table, "a", planPro), "seeded by OnError")
	m.FlushAll()
	eventually(t, time.Second, func() bool { return m.Exists(table.Key()) }, "re-seeded by OnError")
}

func TestPolicyTableFlagDrivesFollowingShadows(t *testing.T) {
	_, client, ctx := miniredisAt(t)
	table, _ := runTable(t, client, time.Hour)
	backend, err := NewTokenBucket(PerSecond(1), 1)
	require.NoError(t, err)
	s1, err := NewShadow(backend, ShadowConfig{})
	require.NoError(t, err)
	s2, err := NewShadow(backend, ShadowConfig{Enforce: true})
	require.NoError(t, err)
	require.NoError(t, table.FollowShadow("enforce", s1))
	require.NoError(t, table.FollowShadow("enforce", s2))
	require.ErrorIs(t, table.FollowShadow("enforce", nil), ErrInvalidConfig)
	assert.False(t, s1.Enforcing(), "a flag the table does not hold leaves the mode")
	assert.True(t, s2.Enforcing())

	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Flags: map[string]bool{"enforce": true}}))
	eventually(t, time.Second, func() bool { return s1.Enforcing() && s2.Enforcing() }, "enforcing")
	require.NoError(t, table.SetFlag(ctx, "enforce", false))
	eventually(t, time.Second, func() bool { return !s1.Enforcing() && !s2.Enforcing() }, "shadowing")

	// A Shadow that follows later takes the flag at once.
	s3, err := NewShadow(backend, ShadowConfig{Enforce: true})
	require.NoError(t, err)
	require.NoError(t, table.FollowShadow("enforce", s3))
	assert.False(t, s3.Enforcing())
}

func TestPolicyTableLeavesOutEntriesThatAreNotItsOwn(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	m.HSet(table.Key(), "p:b", "ten per minute", "f:x", "yes", "junk", "1")
	err = table.Load(ctx)
	require.ErrorIs(t, err, ErrCorruptState)
	assert.ErrorContains(t, err, `"p:"+`+KeyDigest("b"), "the field of key b, the key by its digest")
	assert.True(t, holds(table, "a", planFree)(), "the rest is loaded")
	assert.Equal(t, 1, table.Len())

	m.Del(table.Key())
	m.Set(table.Key(), "a string")
	require.ErrorIs(t, table.Load(ctx), ErrCorruptState)
	require.ErrorIs(t, table.Set(ctx, "a", planPro), ErrCorruptState)
}

func TestPolicyTableRunsOnceAtATime(t *testing.T) {
	_, client, ctx := miniredisAt(t)
	table, _ := runTable(t, client, time.Hour)
	eventually(t, time.Second, func() bool { return table.running.Load() }, "running")
	require.ErrorIs(t, table.Run(ctx), ErrInvalidConfig)
}

func TestNilPolicyTableAnswersWithoutPanicking(t *testing.T) {
	var table *PolicyTable
	ctx := context.Background()
	_, ok := table.Lookup("a")
	assert.False(t, ok)
	p, err := table.PolicyFunc()(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, Policy{}, p)
	assert.ErrorIs(t, table.Load(ctx), ErrInvalidConfig)
	assert.ErrorIs(t, table.Run(ctx), ErrInvalidConfig)
	assert.ErrorIs(t, table.Set(ctx, "a", planFree), ErrInvalidConfig)
	assert.ErrorIs(t, table.FollowShadow("f", nil), ErrInvalidConfig)
	assert.Zero(t, table.Version())
}

// A table re-seeded after it went missing, on a server whose clock is
// behind the one that wrote the copy (a failover, say), has a lower
// version than the copy: its replicas read it all the same, and the
// changes after it.
func TestPolicyTableFollowsAReseedWithALowerVersion(t *testing.T) {
	t.Parallel()
	m, client, ctx := miniredisAt(t)
	m.SetTime(time.Now())
	table, _ := runTable(t, client, time.Hour)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	eventually(t, 2*time.Second, holds(table, "a", planFree), "the seed")
	m.FlushAll()
	m.SetTime(time.Now().Add(-time.Minute))
	seeded, err := table.Seed(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planPro}})
	require.NoError(t, err)
	require.True(t, seeded)
	eventually(t, 2*time.Second, holds(table, "a", planPro), "the re-seeded table")
	require.NoError(t, table.Set(ctx, "b", planFree))
	eventually(t, 2*time.Second, holds(table, "b", planFree), "a change after the re-seed")
}

// A policy no limiter can decide by is refused on write, naming the key;
// one only a Redis limiter refuses is written; a nil table's Key is "".
func TestPolicyTableRefusesAPolicyNoLimiterCanRun(t *testing.T) {
	_, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	err = table.Set(ctx, "fast", Policy{Limit: 2_000_000_000, Window: time.Second})
	require.ErrorIs(t, err, ErrInvalidConfig, "half a nanosecond a unit")
	assert.Contains(t, err.Error(), KeyDigest("fast"))
	err = table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"huge": {Limit: 1 << 53, Window: time.Hour}}})
	require.ErrorIs(t, err, ErrInvalidConfig)
	// In process only: a Redis limiter refuses it on its calls for the key.
	require.NoError(t, table.Set(ctx, "quick", Policy{Limit: 10_000_000, Window: time.Second}))
	var none *PolicyTable
	assert.Equal(t, "", none.Key())
}

// A key that holds policies but no version is not a table's: a refresh
// reports it as corrupt, not as missing (which a re-seed could not mend).
func TestPolicyTableRefreshCallsAKeyWithoutAVersionCorrupt(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	m.HSet(table.Key(), "p:a", "10/60000000000")
	_, err = table.sync(ctx)
	require.ErrorIs(t, err, ErrCorruptState)
	m.Del(table.Key())
	_, err = table.sync(ctx)
	require.ErrorIs(t, err, ErrTableMissing)
}
