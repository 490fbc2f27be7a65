package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// commandStat returns the calls of command (as INFO commandstats names it,
// "hgetall") the server has served since its stats were reset, and their
// time in µs.
func commandStat(t *testing.T, client *redis.Client, command string) (calls, usec int64) {
	t.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+command+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
	}
	return calls, usec
}

// realTableReplicas runs n PolicyTables of cfg on server, each through a
// client of its own, each with a Shadow that follows the flag "enforce".
func realTableReplicas(t *testing.T, server *redistest.Server, n int, cfg PolicyTableConfig) ([]*PolicyTable, []*Shadow) {
	t.Helper()
	var tables []*PolicyTable
	var shadows []*Shadow
	for range n {
		table, _ := runTableWith(t, productionClient(t, server), cfg)
		backend, err := NewTokenBucket(PerSecond(1), 1)
		require.NoError(t, err)
		shadow, err := NewShadow(backend, ShadowConfig{})
		require.NoError(t, err)
		require.NoError(t, table.FollowShadow("enforce", shadow))
		tables, shadows = append(tables, table), append(shadows, shadow)
	}
	return tables, shadows
}

// TestRealRedisPolicyTableForgedNoticesChangeNoReplica: a second client
// that publishes on the table's channel changes nothing any of 3 replicas
// holds, and a real change after its notices reaches all of them.
func TestRealRedisPolicyTableForgedNoticesChangeNoReplica(t *testing.T) {
	server := redistest.Shared(t)
	replicas, shadows := realTableReplicas(t, server, 3, PolicyTableConfig{Refresh: time.Hour, MinSync: time.Millisecond})
	writer, err := NewPolicyTable(productionClient(t, server), PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, writer.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"punished": planPunitive}, Flags: map[string]bool{"enforce": true}}))
	seenByAll(t, replicas, 2*time.Second, "punished", planPunitive, "the seed")

	attacker := productionClient(t, server)
	for _, msg := range forgeries(replicas[0].Version()) {
		require.NoError(t, attacker.Publish(ctx, writer.Key(), msg).Err())
	}
	require.NoError(t, writer.Set(ctx, "globex", planFree))
	seenByAll(t, replicas, 2*time.Second, "globex", planFree, "a real change after the forgeries")
	hashVersion, err := attacker.HGet(ctx, writer.Key(), "v").Int64()
	require.NoError(t, err)
	for i, r := range replicas {
		checkHoldsTheHash(t, r, shadows[i], hashVersion)
	}
}

// TestRealRedisPolicyTableGarbageNoticesCostBoundedReads: 100 garbage
// notices on a table of 20,000 policies followed by 3 replicas make no
// replica read the whole table, and each calls the read script at most
// once per MinSync (plus one), as the server counts them.
func TestRealRedisPolicyTableGarbageNoticesCostBoundedReads(t *testing.T) {
	server := redistest.Shared(t)
	const minSync = 20 * time.Millisecond
	replicas, _ := realTableReplicas(t, server, 3, PolicyTableConfig{Refresh: time.Hour, MinSync: minSync})
	admin := server.Client(t, func(o *redis.Options) { o.ReadTimeout = 10 * time.Second })
	writer, err := NewPolicyTable(admin, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	ctx := context.Background()
	policies := make(map[string]Policy, 20_000)
	for i := range 20_000 {
		policies["key:"+strconv.Itoa(i)] = planFree
	}
	require.NoError(t, writer.Replace(ctx, PolicyTableEntries{Policies: policies}))
	seenByAll(t, replicas, 20*time.Second, "key:19999", planFree, "the seed") // 20,000 entries on a loaded machine
	require.NoError(t, admin.ConfigResetStat(ctx).Err())

	start := time.Now()
	for range 100 {
		require.NoError(t, admin.Publish(ctx, writer.Key(), "garbage").Err())
	}
	require.NoError(t, writer.Set(ctx, "key:7", planPro))
	seenByAll(t, replicas, 2*time.Second, "key:7", planPro, "a real change after the garbage")
	elapsed := time.Since(start)
	hgetall, hgetallUsec := commandStat(t, admin, "hgetall")
	evalsha, evalshaUsec := commandStat(t, admin, "evalsha")
	eval, _ := commandStat(t, admin, "eval")
	bound := len(replicas)*(1+int(elapsed/minSync)+1) + 1 // and the writer's Set
	t.Logf("100 garbage notices, 3 replicas, 20,000 policies, %v: %d HGETALL (%d µs), %d script calls (%d µs; bound %d)",
		elapsed, hgetall, hgetallUsec, evalsha+eval, evalshaUsec, bound)
	assert.Zero(t, hgetall, "no whole read of the table")
	assert.LessOrEqual(t, int(evalsha+eval), bound)
}

// TestRealRedisPolicyTableACLsKeepReadersFromWriting: with the ACL users
// docs/production.md gives, a replica whose table client may only read the
// HASH and subscribe follows every change the admin makes, and can
// neither write the table nor publish on its channel; a user with no
// right to the table's key or channel can do neither either.
func TestRealRedisPolicyTableACLsKeepReadersFromWriting(t *testing.T) {
	server := redistest.Start(t)
	ctx := context.Background()
	root := productionClient(t, server)
	for _, rule := range [][]any{
		{"plans-admin", "on", ">admin-secret", "resetkeys", "~ratelimit:policytable:plans", "resetchannels", "&ratelimit:policytable:plans",
			"-@all", "+evalsha", "+eval", "+exists", "+type", "+hget", "+hgetall", "+hexists", "+hset", "+hdel", "+hincrby", "+del", "+time",
			"+publish", "+subscribe", "+ping"},
		{"plans-reader", "on", ">reader-secret", "resetkeys", "%R~ratelimit:policytable:plans", "resetchannels", "&ratelimit:policytable:plans",
			"-@all", "+evalsha_ro", "+eval_ro", "+exists", "+hget", "+hgetall", "+subscribe", "+ping"},
		{"other-app", "on", ">other-secret", "resetkeys", "~app:*", "resetchannels", "+@all", "-@dangerous"},
	} {
		require.NoError(t, root.Do(ctx, append([]any{"ACL", "SETUSER"}, rule...)...).Err(), rule[0])
	}
	as := func(user, password string) *redis.Client {
		return server.Client(t, func(o *redis.Options) {
			o.Username, o.Password = user, password
			o.MaxRetries = -1
		})
	}
	admin, err := NewPolicyTable(as("plans-admin", "admin-secret"), PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	require.NoError(t, admin.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"acme": planFree}}))
	reader, errs := runTableWith(t, as("plans-reader", "reader-secret"), PolicyTableConfig{Refresh: 100 * time.Millisecond})
	eventually(t, 2*time.Second, holds(reader, "acme", planFree), "the seed, on the reader")

	require.NoError(t, admin.Set(ctx, "acme", planPro))
	eventually(t, 2*time.Second, holds(reader, "acme", planPro), "the admin's change, on the reader")
	err = reader.Set(ctx, "acme", planPunitive)
	require.ErrorIs(t, err, ErrBackend)
	assert.ErrorContains(t, err, "NOPERM")
	for _, c := range []*redis.Client{as("plans-reader", "reader-secret"), as("other-app", "other-secret")} {
		assert.ErrorContains(t, c.Publish(ctx, reader.Key(), "garbage").Err(), "NOPERM")
		assert.ErrorContains(t, c.HSet(ctx, reader.Key(), "p:acme", "1/1000000000").Err(), "NOPERM")
	}
	require.NoError(t, admin.Set(ctx, "globex", planFree))
	eventually(t, 2*time.Second, holds(reader, "globex", planFree), "a later change, on the reader")
	assert.True(t, holds(reader, "acme", planPro)())
	assert.False(t, errs.has(ErrBackend), "the reader's Run needs no more than its rights")
}
