package redisbatch

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLimitCacheKeepsThePoliciesInUse(t *testing.T) {
	// Plans of round numbers, as services write them: windows of whole
	// seconds (ms here), limits of powers of ten and their doubles.
	plans := [][2]int64{
		{100_000, 100_000}, {1_000_000, 1_000_000}, {2_000_000, 1_000_000},
		{10, 60_000}, {100, 60_000}, {1000, 3_600_000},
	}
	c := NewLimitCache(FixedWindow)
	first := make([]*Limit, len(plans))
	for i, p := range plans {
		first[i] = c.Get(p[0], p[1])
		assert.Equal(t, Limit{Kind: FixedWindow, Units: p[0], Param: p[1], args: [3]any{"w", p[0], p[1]}}, *first[i])
	}
	for round := range 3 {
		for i, p := range plans {
			assert.Same(t, first[i], c.Get(p[0], p[1]), "round %d: plan %v is still cached", round, p)
		}
	}
}

func TestLimitCacheKeepsTwoPoliciesOfOneSlot(t *testing.T) {
	// The first two have the same first slot, and not the same second.
	plans := [][2]int64{{1_000_000, 1000}, {1_000_000, 40_000}, {1_000_000, 2000}, {1_000_000, 4000}}
	c := NewLimitCache(GCRAWithInterval)
	first := make([]*Limit, len(plans))
	for i, p := range plans {
		first[i] = c.Get(p[0], p[1])
	}
	for i, p := range plans {
		assert.Same(t, first[i], c.Get(p[0], p[1]), "plan %v is still cached", p)
	}
}
