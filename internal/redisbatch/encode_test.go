package redisbatch

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// TestCompactFormSendsOneCostForABatchOfEqualCosts checks the arguments a
// batch of plain Allows is sent with: one cost when there are several and
// all are equal, a cost per request otherwise.
func TestCompactFormSendsOneCostForABatchOfEqualCosts(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer client.Close()
	s := NewSender(Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{NewLimit(TokenBucket, 5, 1000)}, Coalesce: true})
	batch := func(costs ...int) []*Request {
		b := make([]*Request, len(costs))
		for i, n := range costs {
			b[i] = &Request{Ctx: context.Background(), Key: "k" + strconv.Itoa(i), N: n}
		}
		return b
	}
	// ARGV after the keys: R, then S and the limit, then the costs.
	argv := func(b []*Request) []any {
		args := s.command(context.Background(), b, "evalsha", s.script.sha, -1).Args()
		return args[3+len(b):]
	}
	for _, tc := range []struct {
		costs []int
		want  []any
	}{
		{[]int{1, 1, 1}, []any{"-3", 1, "t", int64(5), int64(1000), 1}},
		{[]int{2, 1, 2}, []any{"-3", 1, "t", int64(5), int64(1000), 2, 1, 2}},
		{[]int{3}, []any{"-1", 1, "t", int64(5), int64(1000), 3}},
	} {
		got := argv(batch(tc.costs...))
		got[0] = fmt.Sprint(got[0]) // the once-only first argument, as it is written
		assert.Equal(t, tc.want, got, "costs %v", tc.costs)
	}
}

// TestConcurrencyRequestsNameTheirLease checks the arguments of a batch of
// a concurrency limiter's Allows, Release and Extend: the compact form,
// each Allow's cost and lease, a Release's "R" and lease, an Extend's "E"
// and lease; with a Reset, the general form, each Allow's check with its
// lease after its cost, a Release ('R') and an Extend ('E') with their
// limit and lease; and a two-check Allow whose first check is of kind
// Concurrency, as a Composite sends it.
func TestConcurrencyRequestsNameTheirLease(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer client.Close()
	ctx := context.Background()
	own := NewLimit(Concurrency, 5, 30_000_000)
	s := NewSender(Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{own}, Coalesce: true})
	batch := []*Request{
		{Ctx: ctx, Key: "a", N: 1, Lease: "n1"},
		{Ctx: ctx, Key: "b", N: 0},
		{Ctx: ctx, Key: "a", Op: Release, Lease: "n0"},
		{Ctx: ctx, Key: "c", Op: Extend, Lease: "n2"},
	}
	args := s.command(ctx, batch, "evalsha", s.script.sha, -1).Args()
	args[7] = fmt.Sprint(args[7])
	assert.Equal(t, []any{"evalsha", s.script.sha, 4, "a", "b", "a", "c", "-4", 1, "c", int64(5), int64(30_000_000),
		1, "n1", 0, "", "R", "n0", "E", "n2"}, args, "the compact form: two arguments per request")
	batch = append(batch, &Request{Ctx: ctx, Key: "d", Op: Reset})
	args = s.command(ctx, batch, "evalsha", s.script.sha, -1).Args()
	args[8] = fmt.Sprint(args[8])
	assert.Equal(t, []any{"evalsha", s.script.sha, 5, "a", "b", "a", "c", "d", "5", 1, "c", int64(5), int64(30_000_000),
		1, 1, 1, "n1", 1, 1, 0, "", "R", 1, "n0", "E", 1, "n2", "X", 1, 1}, args, "a Reset: the general form")

	// Each request with its own limit (a limiter built WithPolicyFunc).
	keyed := NewSender(Config{Client: client, Script: NewScript("return 1"), Coalesce: true})
	other := NewLimit(Concurrency, 2, 1_000_000)
	batch = []*Request{{Ctx: ctx, Key: "a", N: 2, Limit: other, Lease: "n3"}, {Ctx: ctx, Key: "a", Op: Release, Limit: own, Lease: "n3"}}
	args = keyed.command(ctx, batch, "evalsha", keyed.script.sha, -1).Args()
	args[5] = fmt.Sprint(args[5])
	assert.Equal(t, []any{"evalsha", keyed.script.sha, 2, "a", "a", "2", 2, "c", int64(2), int64(1_000_000), "c", int64(5), int64(30_000_000),
		1, 1, 2, "n3", "R", 2, "n3"}, args)

	// A Composite's Allow: a concurrency check, then a GCRA's.
	parts := NewSender(Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{own, NewLimit(GCRA, 100, 600_000)}, Coalesce: true})
	batch = []*Request{{Ctx: ctx, Key: "{t}:jobs", More: []string{"{t}:rate"}, Costs: []int{1, 1}, Lease: "n4"}}
	args = parts.command(ctx, batch, "evalsha", parts.script.sha, -1).Args()
	args[5] = fmt.Sprint(args[5])
	assert.Equal(t, []any{"evalsha", parts.script.sha, 2, "{t}:jobs", "{t}:rate", "1", 2, "c", int64(5), int64(30_000_000), "g", int64(100), int64(600_000),
		2, 1, 1, "n4", 2, 1}, args)
}

// TestTheCallersTimeGoesFirstBeforeR checks that a Sender of the caller's
// clock sends its time as the first script argument, before R, in every
// form, and that a clock's error fails every request of the batch unsent.
func TestTheCallersTimeGoesFirstBeforeR(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer client.Close()
	s := NewSender(Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{NewLimit(TokenBucket, 5, 1000)},
		Now: func() (int64, error) { return 42, nil }})
	ctx := context.Background()
	one := []*Request{{Ctx: ctx, Key: "k", N: 1}}
	args := s.command(ctx, one, "evalsha", s.script.sha, 1795996800000000).Args()
	assert.Equal(t, []any{int64(1795996800000000), "-1", 1, "t", int64(5), int64(1000), 1}, stringify(args[4:]))
	reset := []*Request{{Ctx: ctx, Key: "k", Op: Reset}}
	args = s.command(ctx, reset, "evalsha", s.script.sha, 7).Args()
	assert.Equal(t, []any{int64(7), "1", 1, "t", int64(5), int64(1000), "X", 1, 1}, stringify(args[4:]))

	failing := NewSender(Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{NewLimit(TokenBucket, 5, 1000)},
		Now: func() (int64, error) { return 0, fmt.Errorf("no time") }})
	batch := []*Request{{Ctx: ctx, Key: "a", N: 1}, {Ctx: ctx, Key: "b", N: 1}}
	failing.sendBatch(ctx, batch)
	for _, p := range batch {
		assert.EqualError(t, p.Err, "no time")
	}
}

// stringify returns args with every fmt.Stringer (an onceArg) as its text.
func stringify(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(fmt.Stringer); ok {
			a = s.String()
		}
		out[i] = a
	}
	return out
}

// BenchmarkCommand measures the encoding of a batch of 32 Allows on the
// server's TIME and on the caller's clock, side by side.
func BenchmarkCommand(b *testing.B) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:0"}) // never dialled
	defer client.Close()
	ctx := context.Background()
	batch := make([]*Request, 32)
	for i := range batch {
		batch[i] = &Request{Ctx: ctx, Key: "k" + strconv.Itoa(i), N: 1 + i%2}
	}
	for _, mode := range []struct {
		name string
		now  int64
	}{{"server TIME", -1}, {"caller clock", 1795996800000000}} {
		b.Run(mode.name, func(b *testing.B) {
			cfg := Config{Client: client, Script: NewScript("return 1"), Limits: []*Limit{NewLimit(TokenBucket, 5, 1000)}}
			if mode.now >= 0 {
				cfg.Now = func() (int64, error) { return mode.now, nil }
			}
			s := NewSender(cfg)
			b.ReportAllocs()
			for range b.N {
				_ = s.command(ctx, batch, "evalsha", s.script.sha, mode.now)
			}
		})
	}
}
