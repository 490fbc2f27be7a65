package ratelimit

import (
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A policy's Zone is stored with it: the codec writes ";zone=<zone>" only
// when it is set, reads it back, and a plan keeps each part's zone.
func TestPolicyTableKeepsAPolicysZone(t *testing.T) {
	day := Policy{Limit: 80, Window: 24 * time.Hour, Zone: "Europe/Berlin"}
	assert.Equal(t, "80/86400000000000;zone=Europe/Berlin", encodeTablePolicy(day))
	assert.Equal(t, "80/86400000000000", encodeTablePolicy(Policy{Limit: 80, Window: 24 * time.Hour}))
	for _, p := range []Policy{day, {Limit: 5, Window: time.Hour, Zone: "UTC+0930"}, {Limit: 5, Window: time.Minute, Zone: "UTC"}} {
		got, err := decodeTablePolicy(encodeTablePolicy(p))
		require.NoError(t, err)
		assert.Equal(t, p, got)
	}
	plan := Plan{"rps": {Limit: 5, Window: time.Second}, "day": day, "month": {Limit: 120, Window: 720 * time.Hour, Zone: "America/New_York"}}
	got, err := decodeTablePlan(encodeTablePlan(plan))
	require.NoError(t, err)
	assert.Equal(t, plan, got)
}

// A write refuses a zone no calendar window could cut windows in, and a
// zone on a policy that is not a calendar period's (every limiter would
// refuse it at every call); nothing is written.
func TestPolicyTableRefusesAZoneNoCalendarWindowTakes(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	table, err := NewPolicyTable(client, PolicyTableConfig{Name: "plans"})
	require.NoError(t, err)
	for _, p := range []Policy{
		{Limit: 80, Window: 24 * time.Hour, Zone: "Mars/Olympus"},
		{Limit: 80, Window: 24 * time.Hour, Zone: "Local"},
		{Limit: 80, Window: 24 * time.Hour, Zone: "UTC+2500"},
		{Limit: 80, Window: 24 * time.Hour, Zone: "Europe/Berlin;x"},
		{Limit: 80, Window: 25 * time.Hour, Zone: "Europe/Berlin"},
		{Limit: 5, Window: time.Second, Zone: "UTC"},
	} {
		require.ErrorIs(t, table.Set(ctx, "acme", p), ErrInvalidConfig, "%+v", p)
		require.ErrorIs(t, table.SetPlan(ctx, "free", Plan{"day": p}), ErrInvalidConfig, "%+v", p)
	}
	assert.False(t, m.Exists(table.Key()), "nothing written")
}

// Billing's quota in each customer's own zone, from one limiter: a daily
// calendar window following a table whose plans carry a zone per key cuts
// each key's day in that key's zone, and a move of the key to another zone
// in one write starts a day of that zone, never sharing the first's count.
func TestPolicyTableGivesEachKeyItsCalendarZone(t *testing.T) {
	m, client, ctx := miniredisAt(t)
	// 23:30 UTC: in Tokyo the next day has begun, in New York not yet.
	start := time.Date(2026, 3, 2, 23, 30, 0, 0, time.UTC)
	m.SetTime(start)
	table, err := NewPolicyTable(client, PolicyTableConfig{Name: "billing"})
	require.NoError(t, err)
	require.NoError(t, table.Replace(ctx, PolicyTableEntries{
		Plans: map[string]Plan{
			"tokyo":    {"": {Limit: 3, Window: 24 * time.Hour, Zone: "Asia/Tokyo"}},
			"new-york": {"": {Limit: 3, Window: 24 * time.Hour, Zone: "America/New_York"}},
		},
		Keys: map[string]string{"jp": "tokyo", "us": "new-york"},
	}))
	require.NoError(t, table.Load(ctx))
	clock := ratelimittest.NewClock(start)
	days, err := NewRedisCalendarWindow(client, 3, Calendar{Period: CalendarDay}, WithPolicyFunc(table.PolicyFunc()), WithClock(clock))
	require.NoError(t, err)
	d, err := days.Decide(ctx, "jp", 3)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.Equal(t, "Asia/Tokyo", d.Policy.Zone)
	// Tokyo's day ends at 15:00 UTC tomorrow.
	assert.Equal(t, 15*time.Hour+30*time.Minute, d.ResetAfter)
	d, err = days.Decide(ctx, "us", 3)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	// New York's day (EST, UTC-5) ends at 05:00 UTC tomorrow.
	assert.Equal(t, 5*time.Hour+30*time.Minute, d.ResetAfter)

	require.NoError(t, table.Assign(ctx, "jp", "new-york"))
	require.NoError(t, table.Load(ctx))
	d, err = days.Decide(ctx, "jp", 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a day of New York is a new count, not Tokyo's")
	assert.Equal(t, "America/New_York", d.Policy.Zone)
	d, err = days.Decide(ctx, "jp", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
}
