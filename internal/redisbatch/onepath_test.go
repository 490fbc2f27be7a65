package redisbatch

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// verdictBytes returns one check's part of a record as the script writes
// it (see record.go): allowed, then remaining, retry_after and
// reset_after, each a big-endian 64-bit integer.
func verdictBytes(allowed byte, remaining, retry, reset int64) string {
	b := make([]byte, CheckSize)
	b[0] = allowed
	binary.BigEndian.PutUint64(b[1:9], uint64(remaining))
	binary.BigEndian.PutUint64(b[9:17], uint64(retry))
	binary.BigEndian.PutUint64(b[17:25], uint64(reset))
	return string(b)
}

// TestARequestWithoutAKeyIsSentOnItsStoredKey checks that a request that
// gives its prefix, seg and caller's key instead of its Redis key is sent
// on the key StoredKey forms of them, formed when it is encoded, and that
// the request then holds it; a request that gives its Redis key is sent on
// that key as it is.
func TestARequestWithoutAKeyIsSentOnItsStoredKey(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer client.Close()
	ctx := context.Background()
	s := NewSender(Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{NewLimit(SlidingLog, 5, 1000)}})
	batch := []*Request{
		{Ctx: ctx, Prefix: "ratelimit:sl:5:1000:", Name: "alice", N: 1},
		{Ctx: ctx, Prefix: "p:", Seg: "60000:", Name: "{acme}", N: 1},
		{Ctx: ctx, Prefix: "p:", Name: "", N: 1},
		{Ctx: ctx, Key: "given:{bob}", N: 1},
	}
	want := []string{
		StoredKey("ratelimit:sl:5:1000:", "", "alice"),
		StoredKey("p:", "60000:", "{acme}"),
		StoredKey("p:", "", ""),
		"given:{bob}",
	}
	assert.Equal(t, "ratelimit:sl:5:1000:{alice}", want[0])
	args := s.command(ctx, batch, "evalsha", s.script.sha, -1).Args()
	for i, p := range batch {
		assert.Equal(t, want[i], args[3+i], "the key sent for request %d", i)
		assert.Equal(t, want[i], p.Key, "the key request %d holds once encoded", i)
	}
}

// TestAReplyOfOneCheckIsDecodedAndCheckedOnce checks what reading a reply
// leaves in each request of one check: its verdict, believed when its
// numbers can be right for its limit (the request's own, or else the
// Sender's), and a Fault otherwise; a refusal is Refused; a Release's
// verdict is not held to an Allow's ranges; a request of two checks is
// left to its caller.
func TestAReplyOfOneCheckIsDecodedAndCheckedOnce(t *testing.T) {
	ctx := context.Background()
	refusal := "\xff\x01\x00\x04oops"
	for _, tc := range []struct {
		name   string
		req    Request
		record string
		fault  Fault
	}{
		{"allowed", Request{}, verdictBytes(1, 4, 0, 1000), Believed},
		{"denied with a wait", Request{}, verdictBytes(0, 0, 200, 1000), Believed},
		{"remaining above the Sender's limit", Request{}, verdictBytes(1, 6, 0, 1000), OutOfRange},
		{"remaining within the request's own limit", Request{Limit: NewLimit(SlidingLog, 10, 1000)}, verdictBytes(1, 6, 0, 1000), Believed},
		{"remaining above the request's own limit", Request{Limit: NewLimit(SlidingLog, 3, 1000)}, verdictBytes(1, 4, 0, 1000), OutOfRange},
		{"denied with no wait", Request{}, verdictBytes(0, 0, 0, 1000), OutOfRange},
		{"allowed with a wait", Request{}, verdictBytes(1, 1, 5, 1000), OutOfRange},
		{"allowed neither 0 nor 1", Request{}, verdictBytes(5, 1, 0, 1000), OutOfRange},
		{"a negative reset", Request{}, verdictBytes(1, 1, 0, -1), OutOfRange},
		{"a refusal", Request{}, refusal, Refused},
		{"a Release that held nothing", Request{Op: Release}, verdictBytes(0, 0, 0, 0), Believed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.req
			p.Ctx = ctx
			require.NoError(t, readReply(tc.record, []*Request{&p}, 5))
			assert.Equal(t, tc.fault, p.Fault)
			assert.Equal(t, Record(tc.record), p.Record)
			if tc.fault == Believed {
				assert.Equal(t, Record(tc.record).Check(0), p.Verdict)
			}
		})
	}
	t.Run("a request of two checks", func(t *testing.T) {
		p := &Request{Ctx: ctx, Key: "a", More: []string{"b"}}
		record := verdictBytes(1, 99, 0, 0) + verdictBytes(1, 99, 0, 0)
		require.NoError(t, readReply(record, []*Request{p}, 5))
		assert.Equal(t, Believed, p.Fault)
		assert.Equal(t, Verdict{}, p.Verdict)
	})
}

// TestACallTheServerDidNotKnowIsSentAgainByEval checks the command that
// sends again a script call refused with NOSCRIPT: "eval" and the script's
// source in place of "evalsha" and its SHA, the same keys and arguments,
// and a send-once guard of its own, which lets it be written once.
func TestACallTheServerDidNotKnowIsSentAgainByEval(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer client.Close()
	ctx := context.Background()
	s := NewSender(Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{NewLimit(TokenBucket, 5, 1000)}})
	require.True(t, s.once, "a *redis.Client sends once")
	first := s.command(ctx, []*Request{{Ctx: ctx, Key: "k", N: 2}}, "evalsha", s.script.sha, -1)
	_, err := first.Args()[4].(*onceArg).MarshalBinary() // the first write, refused unrun
	require.NoError(t, err)
	again := s.evalOf(ctx, first)
	args := again.Args()
	require.Len(t, args, len(first.Args()))
	assert.Equal(t, []any{"eval", "return 1", 1, "k"}, args[:4])
	once, ok := args[4].(*onceArg)
	require.True(t, ok, "the count is under a guard of its own")
	assert.NotSame(t, first.Args()[4], once)
	assert.Same(t, again, once.cmd)
	text, err := once.MarshalBinary()
	require.NoError(t, err)
	assert.Equal(t, "-1", string(text))
	_, err = once.MarshalBinary()
	assert.ErrorIs(t, err, ErrNotResent)
	assert.Equal(t, fmt.Sprint(first.Args()[5:]), fmt.Sprint(args[5:]))
}
