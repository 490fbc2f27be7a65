package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// The batch script's 'c' kind as one check among several of an Allow, all
// or nothing, as a Composite of Redis limiters sends it: the lease is
// named by the concurrency part's limiter, which releases and extends it
// through its own requests.

func TestBatchScriptConcurrencyCheckBesideARateCheckTakesBothOrNeither(t *testing.T) {
	_, client, advance := miniredisClock(t)
	ctx := context.Background()
	// Limit 1: 1 in flight, leases of 10 s; limit 2: a fixed window of 2
	// per minute. Each Allow: 2 checks, ('c': s, n, lease) then ('w': s, n).
	run := func(lease string) string {
		reply, err := client.Eval(ctx, batchLua, []string{"inflight", "window"},
			1, 2, "c", 1, 10_000_000, "w", 2, 60_000,
			2, 1, 1, lease, 2, 1).Text()
		require.NoError(t, err)
		return renderReply(t, reply, 2)
	}
	assert.Equal(t, "1 0 0 10000000 1 1 0 60000000", run("lease-1"), "both allow: the lease and the window's unit are taken")
	assert.Equal(t, "0 0 10000000 10000000 0 1 0 60000000", run("lease-2"),
		"the slot is held: denied, the window untouched, 1 left")
	reply, err := client.Eval(ctx, batchLua, []string{"inflight"}, 1, 1, "c", 1, 10_000_000, "R", 1, "lease-1").Text()
	require.NoError(t, err)
	assert.Equal(t, "1 0 0 0", renderReply(t, reply, 1), "released: it held its unit")
	advance(time.Second)
	assert.Equal(t, "1 0 0 10000000 1 0 0 59000000", run("lease-3"), "the slot is free: both take")
	assert.Equal(t, "0 0 10000000 10000000 0 0 59000000 59000000", run("lease-4"), "both deny")
	reply, err = client.Eval(ctx, batchLua, []string{"inflight"}, 1, 1, "c", 1, 10_000_000, "R", 1, "lease-3").Text()
	require.NoError(t, err)
	assert.Equal(t, "1 0 0 0", renderReply(t, reply, 1))
	assert.Equal(t, "0 1 0 0 0 0 59000000 59000000", run("lease-5"),
		"the window denies: no lease is taken, and the free slot reports no wait of its own")
	n, err := client.Exists(ctx, "inflight").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no lease was written")
}

func TestCompositeRequestOfAConcurrencyPartIsReleasedByThePart(t *testing.T) {
	ctx := context.Background()
	_, client, _ := miniredisClock(t)
	jobs, err := NewRedisConcurrency(client, 1, 10*time.Second)
	require.NoError(t, err)
	rate, err := NewRedisGCRA(client, 5, time.Minute)
	require.NoError(t, err)
	for _, keyed := range []bool{false, true} {
		// A Composite's sender: two checks, of the parts' own limits, or
		// carried by each request (a part built WithPolicyFunc).
		limits := []*redisbatch.Limit{jobs.r.own, rate.r.own}
		var send *redisbatch.Sender
		if keyed {
			send = newSender(client, nil, 2, true, nil)
		} else {
			send = newSender(client, limits, 2, true, nil)
		}
		key := "k" + strings.Repeat("+", len(limits)) + map[bool]string{false: "fixed", true: "keyed"}[keyed]
		acquire := func() (Lease, []Result) {
			id := jobs.seq.Add(1)
			p := &redisbatch.Request{
				Ctx: ctx, Key: storedKey(jobs.KeyPrefix(), key), More: []string{storedKey(rate.KeyPrefix(), key)},
				Costs: []int{1, 1}, Lease: jobs.leaseName(id),
			}
			if keyed {
				p.Limits = limits
			}
			require.True(t, send.Send(p))
			require.NoError(t, p.Err)
			n, ok := p.Record.Checks()
			require.True(t, ok && n == 2, "%q", p.Record)
			var results []Result
			for i, limit := range []int{1, 5} {
				res, err := resultOf(p.Record.Check(i), limit, true)
				require.NoError(t, err)
				results = append(results, res)
			}
			if !results[0].Allowed {
				return Lease{}, results
			}
			return Lease{holder: jobs, key: key, id: id, units: 1, ttl: 10 * time.Second}, results
		}
		lease, results := acquire()
		require.True(t, lease.Held(), "keyed %v", keyed)
		assert.Equal(t, 4, results[1].Remaining)
		_, results = acquire()
		assert.False(t, results[0].Allowed, "the slot is held")
		assert.Equal(t, 4, results[1].Remaining, "the rate part is untouched by the denial")
		lease, err = lease.Extend(ctx)
		require.NoError(t, err)
		require.NoError(t, lease.Release(ctx), "the part releases the Composite's lease")
		_, d, err := jobs.Acquire(ctx, key, 0)
		require.NoError(t, err)
		assert.Equal(t, 1, d.Remaining, "keyed %v: the slot came back", keyed)
	}
}
