package ratelimit

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyTableKeepsEveryUnexpiredStateThatOutlivesItsSpan drives a keyTable
// whose states may outlive their write by up to three spans (as a token
// bucket's debt does) with random writes, reads and time steps, against a
// plain map: a state that has not expired is always found as last written,
// whether its generation's map was reused or carried into a new one, and
// nothing is held once all have expired.
func TestKeyTableKeepsEveryUnexpiredStateThatOutlivesItsSpan(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(21, 22))
	type written struct{ expiry int64 } // a state is its expiry
	for round := 0; round < 20; round++ {
		span := 1 + r.Int64N(1000)*int64(minSpan)/100
		table := newKeyTable[int64](span).outliving(func(e int64) int64 { return e }).recycling(func(e int64) (int64, bool) { return e, true })
		model := map[string]written{}
		keys := make([]string, 1+r.IntN(300))
		for i := range keys {
			keys[i] = strconv.Itoa(i)
		}
		var now int64
		for step := 0; step < 5000; step++ {
			now += r.Int64N(table.span / 20)
			key := keys[r.IntN(len(keys))]
			sh, _ := table.lock(key, now, maxSpan)
			got, w := sh.lookup(key)
			want, ok := model[key]
			switch {
			case ok && want.expiry > now:
				require.NotEqual(t, absent, w, "round %d step %d: unexpired key %q lost", round, step, key)
				require.Equal(t, want.expiry, got, "round %d step %d: key %q", round, step, key)
			case w != absent:
				require.True(t, ok, "round %d step %d: key %q never written but found", round, step, key)
				require.Equal(t, want.expiry, got, "round %d step %d: key %q", round, step, key)
			}
			switch r.IntN(6) {
			case 0:
				table.remove(sh, key, w)
				delete(model, key)
			case 1, 2, 3:
				expiry := now + r.Int64N(3*span+1)
				sh.write(key, w, expiry, expiry)
				model[key] = written{expiry}
			}
			sh.mu.Unlock()
		}
		now += 4 * table.span
		for i := range table.shards {
			sh := &table.shards[i]
			sh.mu.Lock()
			sh.advance(now, maxSpan, table.span)
			sh.advance(now+table.span, maxSpan, table.span)
			sh.mu.Unlock()
		}
		assert.Equal(t, 0, table.len(), "round %d: held after every state expired", round)
	}
}

// TestKeyTableReusesABusyShardsMapsAndDropsAnIdleShards writes the same
// keys of one shard once a tenth of a span, for many spans: once both
// generations' maps have grown, the turns allocate nothing. Once every key
// has expired, the shard holds no map at all. Serial: AllocsPerRun counts
// every goroutine's allocations.
func TestKeyTableReusesABusyShardsMapsAndDropsAnIdleShards(t *testing.T) {
	span := 10 * minSpan
	table := newKeyTable[int64](span)
	var keys []string
	for i := 0; len(keys) < 500; i++ {
		if k := strconv.Itoa(i); table.shardIndex(k) == 0 {
			keys = append(keys, k)
		}
	}
	var now int64
	spanOfWrites := func() {
		for range 10 {
			now += span / 10
			for _, k := range keys {
				sh, shardNow := table.lockShard(0, now, maxSpan)
				_, w := sh.lookup(k)
				sh.write(k, w, shardNow, shardNow+span)
				sh.mu.Unlock()
			}
		}
	}
	spanOfWrites()
	spanOfWrites()
	assert.Equal(t, 0.0, testing.AllocsPerRun(5, spanOfWrites), "allocations per span of writes")
	assert.Equal(t, len(keys), table.len())

	sh, _ := table.lockShard(0, now+3*span, maxSpan)
	sh.advance(now+4*span, maxSpan, span)
	assert.Nil(t, sh.cur.states, "the current generation's map")
	assert.Nil(t, sh.prev.states, "the previous generation's map")
	sh.mu.Unlock()
}

// TestKeyTableHandsTheStatesOfDroppedKeysToNewKeys writes keys of one shard
// in one span and others in the next: the turn that drops the first
// keys, on a shard that stays busy, keeps their states, as recycle empties
// them, as spares, each taken once; a turn on an idle shard drops them.
func TestKeyTableHandsTheStatesOfDroppedKeysToNewKeys(t *testing.T) {
	span := 10 * minSpan
	table := newKeyTable[int64](span).recycling(func(v int64) (int64, bool) { return -v, v != 2 })
	var keys []string
	for i := 0; len(keys) < 6; i++ {
		if k := strconv.Itoa(i); table.shardIndex(k) == 0 {
			keys = append(keys, k)
		}
	}
	writeAt := func(at int64, keys []string, state func(i int) int64) {
		sh, _ := table.lockShard(0, at, maxSpan)
		for i, k := range keys {
			_, w := sh.lookup(k)
			sh.write(k, w, state(i), at+span)
		}
		sh.mu.Unlock()
	}
	// The shard turns at the first call span after its generation began.
	writeAt(1, keys[:3], func(i int) int64 { return int64(i + 1) })
	writeAt(span, nil, nil) // the first keys become the previous generation
	writeAt(span+1, keys[3:6], func(int) int64 { return 10 })
	sh, _ := table.lockShard(0, 2*span, maxSpan) // and are dropped
	assert.ElementsMatch(t, []int64{-1, -3}, sh.spares, "the first keys' states, emptied, but the one not worth keeping")
	taken := sh.spare()
	assert.Contains(t, []int64{-1, -3}, taken)
	assert.NotContains(t, sh.spares, taken, "a spare is taken once")
	sh.mu.Unlock()

	sh, _ = table.lockShard(0, 10*span, maxSpan)
	assert.Empty(t, sh.spares, "no spares once every key has expired")
	assert.Zero(t, sh.spare(), "no spares once every key has expired")
	sh.mu.Unlock()
}
