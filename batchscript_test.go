package ratelimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// The Redis limiters send one check per request today; these tests call the
// batch script directly with requests of two checks, all or nothing.

func TestBatchScriptRequestOfTwoChecksTakesFromBothOrNeither(t *testing.T) {
	_, client, _ := miniredisClock(t)
	ctx := context.Background()
	// Limit 1: a token bucket of 3, 1 s per token; limit 2: a fixed window
	// of 1 per minute.
	run := func(n int) string {
		reply, err := client.Eval(ctx, batchLua, []string{"tb", "fw"},
			1, 2, "t", 3, 1_000_000, "w", 1, 60_000,
			2, 1, n, 2, n).Text()
		require.NoError(t, err)
		return renderReply(t, reply, 2)
	}
	assert.Equal(t, "1 2 0 1000000 1 0 0 60000000", run(1), "both allow: both take")
	assert.Equal(t, "0 2 0 1000000 0 0 60000000 60000000", run(1),
		"the window denies: the bucket reports 2 left, untouched, and no wait of its own")
	assert.Equal(t, "1 2 0 1000000 1 0 0 60000000", run(0), "a peek of both: the denial took nothing")
}

func TestBatchScriptRequestOfTwoChecksWithAForeignKeyChangesNothing(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	_, err := m.Lpush("fw", "x")
	require.NoError(t, err)
	reply, err := client.Eval(ctx, batchLua, []string{"tb", "fw", "tb2"},
		2, 2, "t", 3, 1_000_000, "w", 1, 60_000,
		2, 1, 1, 2, 1, // refused: fw is a LIST
		1, 1, 1, // the next request is decided as usual
	).Text()
	require.NoError(t, err)
	assert.Equal(t, "!2 not a STRING\n1 2 0 1000000", renderReply(t, reply, 2, 1))
	assert.False(t, m.Exists("tb"), "the refused request wrote nothing")
}

func TestRealRedisBatchScriptRequestOfTwoChecksTakesFromBothOrNeither(t *testing.T) {
	client := redistest.Start(t).Client(t)
	ctx := context.Background()
	// Limit 1: GCRA of 5, 1 s apart; limit 2: a fixed window of 2 per minute.
	run := func() []string {
		reply, err := client.Eval(ctx, batchLua, []string{"g", "fw"},
			1, 2, "g", 5, 1_000_000, "w", 2, 60_000,
			2, 1, 1, 2, 1).Text()
		require.NoError(t, err)
		fields := strings.Fields(renderReply(t, reply, 2))
		require.Len(t, fields, 8, reply)
		return fields
	}
	assert.Equal(t, []string{"1", "4", "0"}, run()[0:3], "both allow: 4 left in the GCRA")
	assert.Equal(t, []string{"1", "3", "0"}, run()[0:3], "both allow: 3 left in the GCRA")
	denied := run() // the window of 2 is spent
	assert.Equal(t, []string{"0", "3", "0"}, denied[0:3], "the GCRA is untouched by the denial: 3 left, no wait of its own")
	assert.Equal(t, []string{"0", "0"}, denied[4:6], "the window denies with 0 left")
	ttl, err := client.PTTL(ctx, "g").Result()
	require.NoError(t, err)
	// 2 s when written, less by the real time since (on a loaded machine,
	// up to most of a second); 3 taken would have made it 3 s.
	assert.LessOrEqual(t, ttl, 2*time.Second, "the GCRA key holds the 2 taken, not 3")
	assert.Greater(t, ttl, 1100*time.Millisecond, "the GCRA key holds the 2 taken, not 1")
}

// renderReply writes the batch script's binary reply as text, a line per
// request: "!i reason" for a refusal, and "allowed remaining retry reset"
// for each check of an answered one, then "next=" and its next_unit when
// it tells one, checks[j] of them for request j. It fails the test on a
// reply that is not one record per request.
func renderReply(t *testing.T, reply string, checks ...int) string {
	t.Helper()
	lines := make([]string, len(checks))
	off := 0
	for j, c := range checks {
		end := off
		for range c {
			// Each check's size is in its first byte.
			if end < len(reply) && reply[end]&redisbatch.NextMark != 0 {
				end += redisbatch.NextSize
			}
			end += redisbatch.CheckSize
		}
		if off+4 <= len(reply) && reply[off] == 0xFF { // a refusal: its reason's length in two bytes
			end = off + 4 + (int(reply[off+2])<<8 | int(reply[off+3]))
		}
		require.LessOrEqual(t, end, len(reply), "request %d of %d: the reply is cut short", j, len(checks))
		record := redisbatch.Record(reply[off:end])
		off = end
		if i, reason, ok := record.Refusal(); ok {
			lines[j] = "!" + strconv.Itoa(i) + " " + reason
			continue
		}
		n, ok := record.Checks()
		require.True(t, ok && n == c, "request %d: a record of %d bytes for %d checks", j, len(record), c)
		var fields []string
		for i := range n {
			v := record.Check(i)
			fields = append(fields, strconv.FormatInt(v.Allowed, 10),
				strconv.FormatInt(v.Remaining, 10), strconv.FormatInt(v.RetryAfter, 10), strconv.FormatInt(v.ResetAfter, 10))
			if v.HasNext {
				fields = append(fields, "next="+strconv.FormatInt(v.Next, 10))
			}
		}
		lines[j] = strings.Join(fields, " ")
	}
	require.Equal(t, len(reply), off, "bytes left over after %d requests", len(checks))
	return strings.Join(lines, "\n")
}

func TestBatchScriptCompactFormDecidesEachAllowAlone(t *testing.T) {
	m, client, _ := miniredisClock(t)
	ctx := context.Background()
	_, err := m.Lpush("list", "x")
	require.NoError(t, err)
	// -3: three Allows of one check on the one limit (a token bucket of
	// 3, 1 s per token), a cost each; the second key is not a bucket.
	reply, err := client.Eval(ctx, batchLua, []string{"a", "list", "a"},
		-3, 1, "t", 3, 1_000_000,
		2, 1, 2,
	).Text()
	require.NoError(t, err)
	assert.Equal(t, "1 1 0 2000000\n!1 not a HASH\n0 1 1000000 2000000", renderReply(t, reply, 1, 1, 1))
	list, err := m.List("list")
	require.NoError(t, err)
	assert.Equal(t, []string{"x"}, list, "the LIST is left as it was")
}

func TestBatchScriptCompactFormTakesOneCostForEveryAllow(t *testing.T) {
	_, client, _ := miniredisClock(t)
	ctx := context.Background()
	// -3 and a single cost after the limit: each of the three Allows costs
	// 2 of a bucket of 3, so the second on "a" is denied.
	reply, err := client.Eval(ctx, batchLua, []string{"a", "b", "a"},
		-3, 1, "t", 3, 1_000_000,
		2,
	).Text()
	require.NoError(t, err)
	assert.Equal(t, "1 1 0 2000000\n1 1 0 2000000\n0 1 1000000 2000000", renderReply(t, reply, 1, 1, 1))
}
