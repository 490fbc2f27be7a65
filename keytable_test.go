package ratelimit

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyTableKeepsEveryUnexpiredState drives a keyTable with random writes,
// reads and time steps, and checks it against a plain map that forgets
// nothing: a state that has not expired is always found as last written, a
// state is only ever missing once it has expired, no more keys are held than
// were written within the last two spans, and none once all have expired.
func TestKeyTableKeepsEveryUnexpiredState(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 12))
	type written struct{ state, expiry, at int64 }
	for round := 0; round < 20; round++ {
		span := 1 + r.Int64N(1000)*int64(minSpan)/100
		table := newKeyTable[int64](span)
		model := map[string]written{}
		keys := make([]string, 1+r.IntN(300))
		for i := range keys {
			keys[i] = strconv.Itoa(i)
		}
		var now int64
		for step := 0; step < 5000; step++ {
			now += r.Int64N(table.span / 20)
			key := keys[r.IntN(len(keys))]
			sh, shardNow := table.lock(key, now, maxSpan)
			require.Equal(t, now, shardNow)
			got, w := sh.lookup(key)
			want, ok := model[key]
			switch {
			case ok && want.expiry > now:
				require.NotEqual(t, absent, w, "round %d step %d: unexpired key %q lost", round, step, key)
				require.Equal(t, want.state, got, "round %d step %d: key %q", round, step, key)
			case w != absent:
				require.True(t, ok, "round %d step %d: key %q never written but found", round, step, key)
				require.Equal(t, want.state, got, "round %d step %d: key %q", round, step, key)
			}
			if r.IntN(3) > 0 {
				state := r.Int64()
				expiry := now + r.Int64N(span+1)
				sh.write(key, w, state, expiry)
				model[key] = written{state, expiry, now}
			}
			sh.mu.Unlock()

			if step%500 == 0 {
				// A shard drops generations on its own calls: call each.
				for i := range table.shards {
					sh := &table.shards[i]
					sh.mu.Lock()
					sh.advance(now, maxSpan, table.span)
					sh.mu.Unlock()
				}
				recent := 0
				for _, wr := range model {
					if wr.at >= now-2*table.span {
						recent++
					}
				}
				assert.LessOrEqual(t, table.len(), recent, "round %d step %d: held keys", round, step)
			}
		}
		// Once every state has expired and each shard has had a call,
		// nothing is held.
		now += 3 * table.span
		for i := range table.shards {
			sh := &table.shards[i]
			sh.mu.Lock()
			sh.advance(now, maxSpan, table.span)
			sh.mu.Unlock()
		}
		assert.Equal(t, 0, table.len(), "round %d: held after every state expired", round)
	}
}
