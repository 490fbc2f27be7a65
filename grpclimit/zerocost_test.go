package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/grpclimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A call of cost 0 never runs while its key is in debt: 100 calls of cost
// 0 on a key three hours in debt all ran when a cost of 0 was a peek.
func TestACostOfZeroDoesNotRunOnAKeyInDebt(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	l, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(1), 10, ratelimit.WithClock(clock), ratelimit.WithMaxDebt(4*3600), ratelimit.WithMaxSettle(ratelimit.UnboundedSettle))
	require.NoError(t, err)
	_, err = l.Settle(context.Background(), "alice", 0, 10+3*3600)
	require.NoError(t, err)
	in, err := grpclimit.NewInterceptor(l, grpclimit.KeyByMetadata("x-api-key"),
		grpclimit.WithCost(func(context.Context, string) (int, error) { return 0, nil }))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)
	ran := 0
	for range 100 {
		_, err := check(t, c, "x-api-key", "alice")
		if err == nil {
			ran++
			continue
		}
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	}
	assert.Equal(t, 0, ran)
}

// A call of cost 0 takes 1 unit: a key of 3 runs three of them.
func TestACostOfZeroTakesAUnit(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	l, err := ratelimit.NewTokenBucket(ratelimit.Every(1000*time.Second), 3, ratelimit.WithClock(clock))
	require.NoError(t, err)
	in, err := grpclimit.NewInterceptor(l, grpclimit.KeyByMetadata("x-api-key"),
		grpclimit.WithCost(func(context.Context, string) (int, error) { return 0, nil }))
	require.NoError(t, err)
	c := serve(t, interceptors(in)...)
	for i := range 3 {
		hdr, err := check(t, c, "x-api-key", "alice")
		require.NoError(t, err, "call %d", i)
		assert.Equal(t, []string{[]string{"2", "1", "0"}[i]}, hdr["ratelimit-remaining"])
	}
	_, err = check(t, c, "x-api-key", "alice")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}
