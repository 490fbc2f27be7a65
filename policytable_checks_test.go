package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refusedBySet are policies Set refuses that a HASH written by hand may
// hold: half a nanosecond a unit, 2^63-1 a nanosecond, and a fill time
// beyond the in-process clock.
var refusedBySet = map[string]string{
	"a": "2/1",
	"b": "9223372036854775807/1",
	"c": "1/9223372036854775807",
}

func TestPolicyTableLoadSkipsPoliciesSetRefuses(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	require.NoError(t, table.Load(ctx))
	for key, value := range refusedBySet {
		p, err := decodeTablePolicy(value)
		require.NoError(t, err)
		require.ErrorIs(t, table.Set(ctx, key, p), ErrInvalidConfig, "Set refuses %s", value)
		m.HSet(table.Key(), "p:"+key, value)
	}
	err = table.Load(ctx)
	require.ErrorIs(t, err, ErrCorruptState)
	assert.ErrorContains(t, err, "3 fields skipped")
	assert.True(t, holds(table, "a", planFree)(), "a keeps its previous policy")
	assert.True(t, holds(table, "b", Policy{})(), "b has none: the limiter's own")
	assert.True(t, holds(table, "c", Policy{})(), "c has none: the limiter's own")

	// A limiter following the table decides every one of them by a policy
	// it can run.
	l, err := NewTokenBucket(PerSecond(1), 5, WithPolicyFunc(table.PolicyFunc()))
	require.NoError(t, err)
	for key := range refusedBySet {
		_, err := l.Allow(ctx, key, 1)
		assert.NoError(t, err, key)
	}
}

// A change Run reads through the read script is checked as Load checks:
// here a Set whose value was overwritten by hand before the replica read
// it.
func TestPolicyTableSyncSkipsPoliciesSetRefuses(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	require.NoError(t, table.Load(ctx))
	require.NoError(t, table.Set(ctx, "a", planPro))
	require.NoError(t, table.Set(ctx, "b", planPro))
	m.HSet(table.Key(), "p:a", "2/1", "p:b", "1/9223372036854775807")
	reload, err := table.sync(ctx)
	require.False(t, reload)
	require.ErrorIs(t, err, ErrCorruptState)
	assert.True(t, holds(table, "a", planFree)(), "a keeps its previous policy")
	assert.True(t, holds(table, "b", Policy{})(), "b has none")
	v, err := client.HGet(ctx, table.Key(), "v").Int64()
	require.NoError(t, err)
	assert.Equal(t, v, table.Version(), "the copy is at the table's version")
}

// A replica that runs Run reports what it skipped through OnError.
func TestPolicyTableRunReportsPoliciesItSkips(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, errs := runTableWith(t, client, PolicyTableConfig{Refresh: 20 * time.Millisecond, MinReload: 20 * time.Millisecond})
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Policies: map[string]Policy{"a": planFree}}))
	eventually(t, time.Second, holds(table, "a", planFree), "the seed")
	m.HSet(table.Key(), "p:a", "2/1", "v", "999999999999999999") // no log entry: a whole read
	eventually(t, time.Second, func() bool { return table.Version() == 999999999999999999 }, "the new version")
	assert.True(t, holds(table, "a", planFree)())
	assert.True(t, errs.has(ErrCorruptState))
}

// Every name the table holds is bounded: a write of a longer one is
// refused, and a field that holds one is skipped.
func TestPolicyTableBoundsNamesAndValues(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{Plans: map[string]Plan{"free": {"": planFree}}}))
	long := strings.Repeat("k", MaxPolicyTableName+1)
	for name, err := range map[string]error{
		"Set":        table.Set(ctx, long, planFree),
		"Assign key": table.Assign(ctx, long, "free"),
		"Assign":     table.Assign(ctx, "a", long),
		"SetPlan":    table.SetPlan(ctx, long, Plan{"": planFree}),
		"SetFlag":    table.SetFlag(ctx, long, true),
		"Delete":     table.Delete(ctx, long),
		"Replace":    table.Replace(ctx, PolicyTableEntries{Flags: map[string]bool{long: true}}),
		"many parts": table.SetPlan(ctx, "big", manyParts(maxPlanParts+1)),
		"no part":    table.SetPlan(ctx, "none", Plan{}),
		"bad part":   table.SetPlan(ctx, "quote", Plan{`a"b`: planFree}),
	} {
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	require.NoError(t, table.SetPlan(ctx, "big", manyParts(maxPlanParts)))
	require.NoError(t, table.Set(ctx, strings.Repeat("k", MaxPolicyTableName), planFree))

	m.HSet(table.Key(), "p:"+long, "10/60000000000", "f:"+long, "1", "p:x", strings.Repeat("9", maxTableValueLen+1))
	err = table.Load(ctx)
	require.ErrorIs(t, err, ErrCorruptState)
	assert.ErrorContains(t, err, "3 fields skipped")
	assert.Less(t, len(err.Error()), 2000, "the error quotes names and values cut short")
	assert.Equal(t, 1, table.Len())
	_, ok := table.Plan("big")
	assert.True(t, ok)
}

// manyParts returns a plan of n parts.
func manyParts(n int) Plan {
	p := Plan{}
	for i := range n {
		p[fmt.Sprintf("part%d", i)] = planFree
	}
	return p
}

// The codec reads back what it writes, and refuses anything else with an
// error rather than a guess.
func TestPolicyTableValuesReadBackAndRefuseTheRest(t *testing.T) {
	plan := Plan{"": planFree, "day": {Limit: 1000, Window: 24 * time.Hour}, "a,b=c;d": planPro}
	got, err := decodeTablePlan(encodeTablePlan(plan))
	require.NoError(t, err)
	assert.Equal(t, plan, got)
	assert.Equal(t, `""10/60000000000,"a,b=c;d"100/60000000000,"day"1000/86400000000000`, encodeTablePlan(plan))
	for _, bad := range []string{
		"", "10", "10/", "/10", "+10/5", "010/5", "10/05", "-1/5", "1/-5", "10/5 ", " 10/5",
		"10/5;zone=", "10/5;zone=Mars/Olympus", "10/5;zone=Local", "10/5;zone=UTC;x=y", "10/5;tz=UTC", "10/5;zone=UTC+2500",
		"99999999999999999999/1", "1/99999999999999999999",
	} {
		_, err := decodeTablePolicy(bad)
		assert.Error(t, err, "%q", bad)
	}
	for _, bad := range []string{
		"", `"a"`, `"a"1/5,`, `"a"1/5,"a"2/5`, `a1/5`, `"a1/5`, `"\"1/5`, `""1/5;x=y`, `"x"1/5,,"y"1/5`,
	} {
		_, err := decodeTablePlan(bad)
		assert.Error(t, err, "%q", bad)
	}
	_, err = decodeTableEntry("@")
	assert.Error(t, err, "an empty plan name")
}

// Check refuses at write time what the limiters following the table would
// refuse: here a day part of 25 h, which a calendar window cannot run. The
// same plan written without the Check fails every call of its keys.
func TestPolicyTableCheckRefusesAtWriteTimeWhatTheLimitersWouldRefuse(t *testing.T) {
	_, client, ctx := miniredisAt(t)
	errDay := errors.New("the day part's window must be 24h")
	check := func(part string, p Policy) error {
		if part == "day" && p.Window != 24*time.Hour {
			return errDay
		}
		return nil
	}
	checked, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans", Check: check})
	require.NoError(t, err)
	unchecked, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	day := Policy{Limit: 100, Window: 24 * time.Hour}
	require.NoError(t, checked.Replace(ctx, PolicyTableEntries{
		Plans: map[string]Plan{"free": {"day": day}},
		Keys:  map[string]string{"acme": "free"},
	}))
	require.NoError(t, checked.Load(ctx))
	cal, err := NewCalendarWindow(100, Calendar{Period: CalendarDay, Location: time.UTC}, WithPolicyFunc(checked.PartPolicyFunc("day")))
	require.NoError(t, err)

	wrong := Plan{"day": {Limit: 100, Window: 25 * time.Hour}}
	err = checked.SetPlan(ctx, "free", wrong)
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorIs(t, err, errDay)
	assert.ErrorContains(t, err, `"free"`)
	require.ErrorIs(t, checked.Replace(ctx, PolicyTableEntries{Plans: map[string]Plan{"free": wrong}}), errDay)
	refuseAll, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans", Check: func(string, Policy) error { return errDay }})
	require.NoError(t, err)
	require.ErrorIs(t, refuseAll.Set(ctx, "acme", planFree), errDay, "a key's own policy is asked about as part \"\"")
	require.NoError(t, checked.Load(ctx))
	_, err = cal.Allow(ctx, "acme", 1)
	require.NoError(t, err, "the plan was left as it was")

	// Without the Check the write goes through, and every call of the
	// plan's keys fails; a replica with the Check skips it.
	require.NoError(t, unchecked.SetPlan(ctx, "free", wrong))
	require.NoError(t, unchecked.Load(ctx))
	uncheckedCal, err := NewCalendarWindow(100, Calendar{Period: CalendarDay, Location: time.UTC}, WithPolicyFunc(unchecked.PartPolicyFunc("day")))
	require.NoError(t, err)
	_, err = uncheckedCal.Allow(ctx, "acme", 1)
	require.ErrorIs(t, err, ErrInvalidConfig, "the limiter refuses a 25 h day")
	err = checked.Load(ctx)
	require.ErrorIs(t, err, ErrCorruptState)
	assert.ErrorContains(t, err, errDay.Error())
	p, ok := checked.LookupPart("acme", "day")
	assert.True(t, ok)
	assert.Equal(t, day, p, "the checked replica keeps the plan it held")
	_, err = cal.Allow(context.Background(), "acme", 1)
	require.NoError(t, err)
}
