package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAClockSetBackByCenturiesSaturatesTheCatchUp(t *testing.T) {
	// Set back by 500 years, the clock reads further behind the limiters'
	// time than a time.Duration can say: the wait to catch up saturates
	// at the most the limiters count (about 73 years), and is never lost.
	subjects := []struct {
		name string
		new  func(Clock) (Limiter, error)
	}{
		{"TokenBucket", func(c Clock) (Limiter, error) { return NewTokenBucket(1, 1, WithClock(c)) }},
		{"GCRA", func(c Clock) (Limiter, error) { return NewGCRA(1, time.Second, WithClock(c)) }},
		{"FixedWindow", func(c Clock) (Limiter, error) { return NewFixedWindow(1, time.Second, WithClock(c)) }},
	}
	for _, sub := range subjects {
		for _, back := range []int{100, 500, 5000} {
			clock := NewFakeClock(epoch)
			l, err := sub.new(clock)
			require.NoError(t, err)
			ctx := context.Background()
			res, err := l.Allow(ctx, "k", 1)
			require.NoError(t, err)
			require.True(t, res.Allowed)

			clock.Set(epoch.AddDate(-back, 0, 0))
			res, err = l.Allow(ctx, "k", 1)
			require.NoError(t, err, "%s, %d years back", sub.name, back)
			assert.False(t, res.Allowed, "%s, %d years back: no token is created", sub.name, back)
			assert.GreaterOrEqual(t, res.RetryAfter, time.Duration(maxSpan), "%s, %d years back: the catch-up is in the wait", sub.name, back)
			assert.GreaterOrEqual(t, res.ResetAfter, res.RetryAfter, "%s, %d years back", sub.name, back)
		}
	}
}

func TestLagBehindSaturates(t *testing.T) {
	const minInt64 = -1 << 63
	assert.Equal(t, int64(0), lagBehind(5, 5))
	assert.Equal(t, int64(0), lagBehind(5, 9))
	assert.Equal(t, int64(3), lagBehind(5, 2))
	assert.Equal(t, int64(maxSpan), lagBehind(5, minInt64))
	assert.Equal(t, int64(maxSpan), lagBehind(maxSpan, 0))
	assert.Equal(t, int64(maxSpan-1), lagBehind(maxSpan, 1))
}
