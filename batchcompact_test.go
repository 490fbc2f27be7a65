package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"
)

// TestBatchScriptCompactFormDecidesAsTheGeneralForm sends the same random
// batches of Allows in the compact form (which opens absent keys on a path
// of its own) and in the general form, to two mirrored sets of keys, and
// checks that every reply and every key's state and TTL are the same: for a
// token bucket, a GCRA, a fixed window, a sliding log, a sliding counter
// and a calendar window (whose replies tell next_unit), with keys that are absent,
// expired, existing or foreign (for the token bucket, a HASH of credit and
// last_refill among them), costs from 0 to above the limit, and batches of
// one cost or of several.
func TestBatchScriptCompactFormDecidesAsTheGeneralForm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	hour := time.Hour.Microseconds()
	bounds := fmt.Sprintf("%d:%d:%d:%d", epoch.UnixMicro()-hour, epoch.UnixMicro(), epoch.UnixMicro()+hour, epoch.UnixMicro()+2*hour)
	for _, kind := range []struct {
		name  string
		kind  string
		param any // µs per unit, the window in ms, or a calendar's windows
	}{
		{"TokenBucket", "t", 250_000},
		{"GCRA", "g", 250_000},
		{"FixedWindow", "w", 1_000},
		{"SlidingLog", "l", 1_000},
		{"SlidingCounter", "s", 1_000},
		{"CalendarWindow", "k", bounds},
	} {
		t.Run(kind.name, func(t *testing.T) {
			m, client, advance := miniredisClock(t)
			r := rand.New(rand.NewPCG(11, uint64(len(kind.kind)+int(kind.kind[0]))))
			const limit = 4
			keys := []string{"a", "b", "c", "d", "list"}
			for _, set := range []string{"compact:", "general:"} {
				_, err := m.Lpush(set+"list", "x")
				require.NoError(t, err)
				if kind.kind == "t" {
					// Not a bucket: the shape of one before tat, refused.
					m.HSet(set+"d", "credit", "250000", "last_refill", strconv.FormatInt(epoch.UnixMicro(), 10))
					m.SetTTL(set+"d", time.Second)
				}
			}
			// A cost above the limit, which the limiters never send, for
			// the kinds whose script reads it as a cost like any other.
			costSpan := limit + 2
			if strings.Contains("lsk", kind.kind) {
				costSpan = limit + 1
			}
			for step := range sized(30, 300) {
				size := 1 + r.IntN(6)
				same := r.IntN(2) == 0
				cost := r.IntN(costSpan)
				var compactKeys, generalKeys []string
				compact := []any{-size, 1, kind.kind, limit, kind.param}
				general := []any{size, 1, kind.kind, limit, kind.param}
				var costs []any
				for range size {
					key := keys[r.IntN(len(keys))]
					compactKeys = append(compactKeys, "compact:"+key)
					generalKeys = append(generalKeys, "general:"+key)
					if !same {
						cost = r.IntN(costSpan)
					}
					costs = append(costs, cost)
					general = append(general, 1, 1, cost)
				}
				if same && size > 1 {
					compact = append(compact, cost)
				} else {
					compact = append(compact, costs...)
				}
				checks := make([]int, size)
				for i := range checks {
					checks[i] = 1
				}
				want, err := client.Eval(ctx, batchLua, generalKeys, general...).Text()
				require.NoError(t, err)
				got, err := client.Eval(ctx, batchLua, compactKeys, compact...).Text()
				require.NoError(t, err)
				require.Equal(t, renderReply(t, want, checks...), renderReply(t, got, checks...), "step %d: %v", step, compact)
				for _, key := range keys {
					require.Equal(t, keyState(t, m, "general:"+key), keyState(t, m, "compact:"+key), "step %d: key %s", step, key)
				}
				advance(time.Duration(r.IntN(400)) * time.Millisecond)
			}
		})
	}
}

// keyState returns what a key holds, its type and its TTL, as text.
func keyState(t *testing.T, m *miniredis.Miniredis, key string) string {
	t.Helper()
	if !m.Exists(key) {
		return "absent"
	}
	state := m.Type(key) + " " + m.TTL(key).String()
	switch m.Type(key) {
	case "hash":
		fields, err := m.HKeys(key)
		require.NoError(t, err)
		for _, f := range fields {
			state += " " + f + "=" + m.HGet(key, f)
		}
	case "string":
		v, err := m.Get(key)
		require.NoError(t, err)
		state += " " + v
	}
	return state
}
