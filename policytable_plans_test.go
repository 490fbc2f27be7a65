package ratelimit

import (
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The plans of the tests: a per-second rate and a daily quota each.
var (
	freeParts = Plan{"rps": {Limit: 5, Window: time.Second}, "day": {Limit: 100, Window: 24 * time.Hour}}
	proParts  = Plan{"rps": {Limit: 50, Window: time.Second}, "day": {Limit: 10_000, Window: 24 * time.Hour}}
)

// onPlan returns a condition that table gives key plan's parts.
func onPlan(table *PolicyTable, key string, plan Plan) func() bool {
	return func() bool {
		for part, want := range plan {
			if got, ok := table.LookupPart(key, part); !ok || got != want {
				return false
			}
		}
		return true
	}
}

func TestPolicyTableMovesAKeyBetweenPlansInOneWrite(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	replica, _ := runTableWith(t, client, PolicyTableConfig{Refresh: time.Hour, MinSync: time.Millisecond})
	writerClient := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = writerClient.Close() })
	writes := countCommands(writerClient)
	writer, err := NewPolicyTable(writerClient, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	require.NoError(t, writer.Replace(ctx, PolicyTableEntries{
		Plans: map[string]Plan{"free": freeParts, "pro": proParts},
		Keys:  map[string]string{"acme": "free", "globex": "free"},
	}))
	eventually(t, time.Second, onPlan(replica, "acme", freeParts), "the seed")

	before := writes.scripts()
	require.NoError(t, writer.Assign(ctx, "acme", "pro"))
	assert.Equal(t, 1, writes.scripts()-before, "one write moves a key")
	eventually(t, time.Second, onPlan(replica, "acme", proParts), "acme on pro")
	plan, ok := replica.PlanOf("acme")
	assert.True(t, ok)
	assert.Equal(t, "pro", plan)
	assert.True(t, onPlan(replica, "globex", freeParts)(), "globex stays")

	// One write changes a plan for every key on it.
	cheaper := Plan{"rps": {Limit: 2, Window: time.Second}, "day": {Limit: 50, Window: 24 * time.Hour}}
	before = writes.scripts()
	require.NoError(t, writer.SetPlan(ctx, "free", cheaper))
	assert.Equal(t, 1, writes.scripts()-before, "one write changes a plan")
	eventually(t, time.Second, onPlan(replica, "globex", cheaper), "globex on the cheaper free plan")
	assert.True(t, onPlan(replica, "acme", proParts)(), "acme is on pro")

	// A key's own policy replaces its plan, in one write, and the other way.
	require.NoError(t, writer.Set(ctx, "globex", planPro))
	eventually(t, time.Second, holds(replica, "globex", planPro), "globex's own policy")
	_, ok = replica.LookupPart("globex", "rps")
	assert.False(t, ok, "a key's own policy is its part \"\" only")
	_, ok = replica.PlanOf("globex")
	assert.False(t, ok)
	require.NoError(t, writer.Assign(ctx, "globex", "free"))
	eventually(t, time.Second, onPlan(replica, "globex", cheaper), "globex back on free")
	assert.True(t, holds(replica, "globex", Policy{})(), "free has no part \"\"")
}

// A Composite whose parts follow the table's parts decides a key by its
// plan, and by its new plan from its first call after the move.
func TestPolicyTablePartsDriveACompositesParts(t *testing.T) {
	_, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{
		Plans: map[string]Plan{"free": freeParts, "pro": proParts},
		Keys:  map[string]string{"acme": "free"},
	}))
	require.NoError(t, table.Load(ctx))
	clock := ratelimittest.NewClock(time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC))
	rps, err := NewTokenBucket(PerSecond(1), 1, WithClock(clock), WithPolicyFunc(table.PartPolicyFunc("rps")))
	require.NoError(t, err)
	day, err := NewCalendarWindow(1, Calendar{Period: CalendarDay}, WithClock(clock), WithPolicyFunc(table.PartPolicyFunc("day")))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "rps", Limiter: rps}, Part{Name: "day", Limiter: day})
	require.NoError(t, err)
	allowed := func(n int) int {
		got := 0
		for range n {
			res, err := c.Allow(ctx, "acme", 1)
			require.NoError(t, err)
			if res.Allowed {
				got++
			}
		}
		return got
	}
	assert.Equal(t, 5, allowed(20), "free: 5 at once")
	require.NoError(t, table.Assign(ctx, "acme", "pro"))
	require.NoError(t, table.Load(ctx))
	assert.Equal(t, 45, allowed(100), "pro: the 45 more a capacity of 50 holds")
}

func TestPolicyTablePlansAndEntriesStayConsistent(t *testing.T) {
	_, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Plans: map[string]Plan{"free": freeParts}}))

	require.ErrorIs(t, table.Assign(ctx, "acme", "gold"), ErrInvalidConfig, "a plan the table does not hold")
	require.NoError(t, table.Assign(ctx, "acme", "free"))
	require.NoError(t, table.Assign(ctx, "globex", "free"))
	err = table.DeletePlan(ctx, "free")
	require.ErrorIs(t, err, ErrInvalidConfig, "keys follow it")
	assert.ErrorContains(t, err, "free")
	require.NoError(t, table.SetPlan(ctx, "pro", proParts))
	require.NoError(t, table.Assign(ctx, "acme", "pro"))
	require.NoError(t, table.Delete(ctx, "globex"))
	require.NoError(t, table.DeletePlan(ctx, "free"), "no key follows it any more")
	require.ErrorIs(t, table.DeletePlan(ctx, "pro"), ErrInvalidConfig)
	require.NoError(t, table.DeletePlan(ctx, "none"), "a plan the table does not hold: nothing to do")

	for name, e := range map[string]PolicyTableEntries{
		"missing plan": {Keys: map[string]string{"a": "gold"}},
		"key twice":    {Plans: map[string]Plan{"free": freeParts}, Keys: map[string]string{"a": "free"}, Policies: map[string]Policy{"a": planFree}},
		"empty plan":   {Plans: map[string]Plan{"": freeParts}},
	} {
		require.ErrorIs(t, table.Replace(ctx, e), ErrInvalidConfig, name)
	}
	require.NoError(t, table.Load(ctx))
	plan, ok := table.PlanOf("acme")
	assert.True(t, ok)
	assert.Equal(t, "pro", plan, "nothing written by the refused Replaces")

	// The counts of keys per plan are rebuilt by a Replace.
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Plans: map[string]Plan{"free": freeParts}, Keys: map[string]string{"a": "free"}}))
	require.ErrorIs(t, table.DeletePlan(ctx, "free"), ErrInvalidConfig)
	require.NoError(t, table.Set(ctx, "a", planFree))
	require.NoError(t, table.DeletePlan(ctx, "free"))
}

// Entries lists the copy, and re-seeds a table lost to a FLUSHALL exactly
// as it was.
func TestPolicyTableEntriesReseedTheTable(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	want := PolicyTableEntries{
		Plans:    map[string]Plan{"free": freeParts, "pro": proParts},
		Keys:     map[string]string{"acme": "free", "globex": "pro"},
		Policies: map[string]Policy{"initech": planPro},
		Flags:    map[string]bool{"enforce": true},
	}
	require.NoError(t, table.Replace(ctx, want))
	require.NoError(t, table.Load(ctx))
	got := table.Entries()
	assert.Equal(t, want, got)
	got.Plans["free"]["rps"] = planPro // a copy of its own
	assert.True(t, onPlan(table, "acme", freeParts)())

	m.FlushAll()
	seeded, err := table.Seed(ctx, table.Entries())
	require.NoError(t, err)
	require.True(t, seeded)
	require.NoError(t, table.Load(ctx))
	assert.Equal(t, want, table.Entries())
	require.ErrorIs(t, table.DeletePlan(ctx, "pro"), ErrInvalidConfig, "the re-seeded table counts its plans' keys")
}
