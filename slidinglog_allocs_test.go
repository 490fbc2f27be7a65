package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// callClock is a Clock that moves step forward on every reading, so that a
// loop of calls walks through time at a fixed pace whatever the machine's
// speed. It is not safe for concurrent use.
type callClock struct {
	now  time.Time
	step time.Duration
}

// Now moves the clock one step and returns its time.
func (c *callClock) Now() time.Time {
	c.now = c.now.Add(c.step)
	return c.now
}

// TestSlidingLogOverManyKeysAllocatesNothingInSteadyState walks a sliding
// log of 8 per window over many keys, each seen about 16 times a window, so
// that every log fills to its limit and slides, and the shards' generations
// turn many times: once the logs have grown, a window of calls (allowed and
// denied) allocates nothing. Serial: AllocsPerRun counts every goroutine's
// allocations.
func TestSlidingLogOverManyKeysAllocatesNothingInSteadyState(t *testing.T) {
	const limit, visits = 8, 16 // per window
	keys := make([]string, sized(10_000, 100_000))
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	clock := &callClock{now: epoch, step: time.Microsecond}
	window := time.Duration(visits*len(keys)) * clock.step
	l, err := NewSlidingLog(limit, window, WithClock(clock))
	require.NoError(t, err)
	ctx := context.Background()
	i, allowed, calls := 0, 0, 0
	walk := func() { // one window of calls
		for range visits * len(keys) {
			if res, _ := l.Allow(ctx, keys[i], 1); res.Allowed {
				allowed++
			}
			calls++
			if i += 7919; i >= len(keys) {
				i -= len(keys)
			}
		}
	}
	walk()
	walk()
	allowed, calls = 0, 0
	allocs := testing.AllocsPerRun(2, walk)
	assert.Equal(t, 0.0, allocs, "allocations per window of %d calls", visits*len(keys))
	assert.InDelta(t, float64(limit)/visits, float64(allowed)/float64(calls), 0.01, "the logs are full and slide: a limit's worth of the visits of each window is allowed")
}
