package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Wait sleeps for real, so these tests use short real waits: the limiters
// themselves are covered on fake clocks elsewhere.

func TestWaitSleepsUntilAllowed(t *testing.T) {
	l, err := NewTokenBucket(1, 50) // one token every 20 ms
	require.NoError(t, err)
	ctx := context.Background()
	_, err = l.Allow(ctx, "k", 1)
	require.NoError(t, err)

	start := time.Now()
	res, err := Wait(ctx, l, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.GreaterOrEqual(t, time.Since(start), 15*time.Millisecond, "Wait returned before a token could have refilled")
}

func TestWaitReturnsAtOnceWhenTheCostCanNeverSucceed(t *testing.T) {
	l, err := NewTokenBucket(2, 1)
	require.NoError(t, err)
	res, err := Wait(context.Background(), l, "k", 3)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.False(t, res.Allowed)
	_, err = Wait(context.Background(), l, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
}

func TestWaitGivesUpAtOnceWhenTheDeadlineComesFirst(t *testing.T) {
	l, err := NewTokenBucket(1, 0.1) // one token every 10 s
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k", 1)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	res, err := Wait(ctx, l, "k", 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, res.Allowed)
	assert.Less(t, time.Since(start), 500*time.Millisecond, "Wait slept although the deadline came first")
}

func TestWaitStopsWhenTheContextIsCancelled(t *testing.T) {
	l, err := NewTokenBucket(1, 0.1)
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k", 1)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = Wait(ctx, l, "k", 1)
	require.ErrorIs(t, err, context.Canceled)
}

func TestWaitPassesBackendErrors(t *testing.T) {
	boom := errors.New("backend down")
	_, err := Wait(context.Background(), failingLimiter{boom}, "k", 1)
	require.ErrorIs(t, err, boom)
	_, err = Wait(context.Background(), nil, "k", 1)
	require.Error(t, err)
}

// failingLimiter answers every call with err.
type failingLimiter struct{ err error }

func (f failingLimiter) Allow(context.Context, string, int) (Result, error) {
	return Result{}, f.err
}
