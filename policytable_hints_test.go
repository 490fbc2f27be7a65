package ratelimit

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// commandCounter is a go-redis hook that counts the commands a client
// sends, by name (a script call is "evalsha", or "eval").
type commandCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func countCommands(client *redis.Client) *commandCounter {
	c := &commandCounter{n: map[string]int{}}
	client.AddHook(c)
	return c
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.mu.Lock()
		c.n[cmd.Name()]++
		c.mu.Unlock()
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.mu.Lock()
		for _, cmd := range cmds {
			c.n[cmd.Name()]++
		}
		c.mu.Unlock()
		return next(ctx, cmds)
	}
}

// get returns the count of the commands named.
func (c *commandCounter) get(names ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	sum := 0
	for _, name := range names {
		sum += c.n[name]
	}
	return sum
}

// scripts counts the script calls.
func (c *commandCounter) scripts() int { return c.get("evalsha", "eval") }

// runTableWith builds a PolicyTable of cfg (Name "plans", errors collected)
// on client and runs it until the test ends.
func runTableWith(t *testing.T, client redis.UniversalClient, cfg PolicyTableConfig) (*PolicyTable, *tableErrors) {
	t.Helper()
	errs := &tableErrors{}
	cfg.Name, cfg.OnError = "plans", errs.add
	table, err := NewPolicyTable(client, cfg)
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

var planPunitive = Policy{Limit: 1, Window: time.Hour}

// forgeries are the notices a client that may PUBLISH on a table's
// channel, but not write its HASH, sends to a replica holding version v:
// in the format the table once trusted (prev:version:value:field), to
// install a plan the HASH does not hold, remove a punitive policy, turn a
// flag off, and leap to version 2^62; and garbage.
func forgeries(v int64) []string {
	s := func(n int64) string { return strconv.FormatInt(n, 10) }
	return []string{
		s(v) + ":" + s(v+1) + ":200/60000000000:p:acme",
		s(v+1) + ":" + s(v+2) + "::p:punished",
		s(v+2) + ":" + s(v+3) + ":0:f:enforce",
		s(v+3) + ":" + s(1<<62) + ":1000/1000000000:p:punished",
		s(1 << 62),
		"p:acme",
		"garbage",
		"",
	}
}

// checkHoldsTheHash checks that table holds the seeded table: punished on
// its punitive policy, no acme, the flag on, a Shadow following it
// enforcing, and the HASH's version.
func checkHoldsTheHash(t *testing.T, table *PolicyTable, shadow *Shadow, version int64) {
	t.Helper()
	assert.True(t, holds(table, "punished", planPunitive)(), "the punitive policy is kept")
	assert.True(t, holds(table, "acme", Policy{})(), "no policy the HASH does not hold")
	on, ok := table.Flag("enforce")
	assert.True(t, on && ok, "the flag stays on")
	assert.True(t, shadow.Enforcing(), "the Shadow keeps enforcing")
	assert.Equal(t, version, table.Version(), "the HASH's version")
}

func TestPolicyTableForgedNoticesChangeNoReplica(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	var replicas []*PolicyTable
	var shadows []*Shadow
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		table, _ := runTableWith(t, c, PolicyTableConfig{Refresh: time.Hour, MinSync: time.Millisecond})
		backend, err := NewTokenBucket(PerSecond(1), 1)
		require.NoError(t, err)
		shadow, err := NewShadow(backend, ShadowConfig{})
		require.NoError(t, err)
		require.NoError(t, table.FollowShadow("enforce", shadow))
		replicas, shadows = append(replicas, table), append(shadows, shadow)
	}
	writer, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	require.NoError(t, writer.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"punished": planPunitive}, Flags: map[string]bool{"enforce": true}}))
	seenByAll(t, replicas, time.Second, "punished", planPunitive, "the seed")
	version := replicas[0].Version()

	attacker := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = attacker.Close() }()
	for _, msg := range forgeries(version) {
		require.NoError(t, attacker.Publish(ctx, writer.Key(), msg).Err())
	}
	// A real change after the forgeries: once a replica holds it, it has
	// handled every notice before it.
	require.NoError(t, writer.Set(ctx, "globex", planFree))
	seenByAll(t, replicas, time.Second, "globex", planFree, "a real change after the forgeries")
	hashVersion, err := client.HGet(ctx, writer.Key(), "v").Int64()
	require.NoError(t, err)
	for i, r := range replicas {
		checkHoldsTheHash(t, r, shadows[i], hashVersion)
	}
}

func TestPolicyTableForgedNoticesHoldNoMemory(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, _ := runTableWith(t, client, PolicyTableConfig{Refresh: time.Hour, MinSync: time.Millisecond})
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	eventually(t, time.Second, holds(table, "a", planFree), "the seed")
	attacker := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = attacker.Close() }()

	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// 40 chained notices of 1 MB each, each naming a key of its own.
	big := strings.Repeat("k", 1<<20)
	v := table.Version()
	for i := range int64(40) {
		msg := strconv.FormatInt(v+i, 10) + ":" + strconv.FormatInt(v+i+1, 10) + ":1/1000000000:p:" + big + strconv.FormatInt(i, 10)
		require.NoError(t, attacker.Publish(ctx, table.Key(), msg).Err())
	}
	require.NoError(t, table.Set(ctx, "b", planPro))
	eventually(t, 2*time.Second, holds(table, "b", planPro), "a real change after the notices")
	runtime.GC()
	runtime.ReadMemStats(&after)
	assert.Equal(t, 2, table.Len(), "no key from a notice")
	grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("heap after 40 MB of notices: %+d KB", grown>>10)
	assert.Less(t, grown, int64(8<<20), "40 MB of notices leave the heap within 8 MB of where it was")
}

// TestPolicyTableReadsBoundedWhateverArrivesOnTheChannel: 300 notices
// (garbage, and forgeries of every kind) make a replica read no whole
// table, and call the read script at most once per MinSync (plus one).
func TestPolicyTableReadsBoundedWhateverArrivesOnTheChannel(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	replicaClient := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = replicaClient.Close() })
	counts := countCommands(replicaClient)
	const minSync = 50 * time.Millisecond
	table, _ := runTableWith(t, replicaClient, PolicyTableConfig{Refresh: time.Hour, MinSync: minSync})
	writer, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	policies := map[string]Policy{}
	for i := range 1000 {
		policies["key:"+strconv.Itoa(i)] = planFree
	}
	require.NoError(t, writer.Replace(ctx, PolicyTableEntries{Policies: policies}))
	eventually(t, time.Second, holds(table, "key:7", planFree), "the seed")
	reloads, scripts := counts.get("hgetall"), counts.scripts()

	attacker := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer func() { _ = attacker.Close() }()
	start := time.Now()
	for i := range 300 {
		msg := "garbage"
		if f := forgeries(table.Version()); i%2 == 0 {
			msg = f[i%len(f)]
		}
		require.NoError(t, attacker.Publish(ctx, writer.Key(), msg).Err())
	}
	require.NoError(t, writer.Set(ctx, "key:7", planPro))
	eventually(t, 2*time.Second, holds(table, "key:7", planPro), "a real change after the notices")
	elapsed := time.Since(start)
	bound := 1 + int(elapsed/minSync) + 1
	t.Logf("300 notices in %v: %d HGETALL, %d script calls (bound %d)", elapsed, counts.get("hgetall")-reloads, counts.scripts()-scripts, bound)
	assert.Equal(t, 0, counts.get("hgetall")-reloads, "no notice makes the replica read the whole table")
	assert.LessOrEqual(t, counts.scripts()-scripts, bound, "at most one read per MinSync")
}

// TestPolicyTableReloadsBoundedByMinReload: writes that each need a whole
// read (Replace) make a replica read the whole table at most once per
// MinReload, and it ends at the last of them.
func TestPolicyTableReloadsBoundedByMinReload(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	replicaClient := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = replicaClient.Close() })
	counts := countCommands(replicaClient)
	const minReload = 200 * time.Millisecond
	table, _ := runTableWith(t, replicaClient, PolicyTableConfig{Refresh: time.Hour, MinSync: time.Millisecond, MinReload: minReload})
	writer, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	start := time.Now()
	for i := 1; i <= 30; i++ {
		require.NoError(t, writer.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": {Limit: i, Window: time.Minute}}}))
		time.Sleep(5 * time.Millisecond) // writes spread over 150 ms or more
	}
	eventually(t, 2*time.Second, holds(table, "a", Policy{Limit: 30, Window: time.Minute}), "the last Replace")
	elapsed := time.Since(start)
	bound := 1 + int(elapsed/minReload) + 1
	t.Logf("30 Replaces in %v: %d HGETALL (bound %d)", elapsed, counts.get("hgetall"), bound)
	assert.LessOrEqual(t, counts.get("hgetall"), bound)
}

// The rule of Run's reads, on a clock of its own: a sync at most once per
// MinSync, a reload at most once per MinReload, and a wanted reload
// standing for any sync.
func TestPolicyTableReadsWaitTheirIntervals(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	r := &tableReads{minSync: 10 * time.Millisecond, minReload: time.Second}
	_, wanted := r.next()
	assert.False(t, wanted, "nothing wanted")

	r.syncWanted = true
	at, wanted := r.next()
	require.True(t, wanted)
	assert.True(t, !at.After(t0), "the first sync at once")
	r.syncWanted, r.lastSync = false, t0

	r.syncWanted = true // a notice 1 ms later
	at, _ = r.next()
	assert.Equal(t, t0.Add(10*time.Millisecond), at, "the next sync waits for MinSync")

	r.reloadWanted, r.lastReload = true, t0
	at, _ = r.next()
	assert.Equal(t, t0.Add(time.Second), at, "a wanted reload waits for MinReload, and stands for the sync")
}
