package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// strayAllocs is how many allocations of other goroutines (a client's
// pool or a server another test left) an allocation test of thousands of
// calls lets through: a limiter that allocated would make one per call or
// per key.
const strayAllocs float64 = 8

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
// allocations, and a goroutine another test left (a client's pool, a
// server) may allocate now and then: a handful is let through, against the
// 832 per window of a log that allocates.
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
	assert.LessOrEqual(t, allocs, strayAllocs, "allocations per window of %d calls", visits*len(keys))
	assert.InDelta(t, float64(limit)/visits, float64(allowed)/float64(calls), 0.01, "the logs are full and slide: a limit's worth of the visits of each window is allowed")
}

// TestSlidingLogOverKeysThatComeAndGoAllocatesNothing walks a sliding log
// over many keys each seen once every two windows, so that every key is
// forgotten between its calls and comes back as a new key: once the shards
// have turned a few times, the new keys take the rings of the forgotten
// ones, and a pass over the keys allocates nothing. Each call finds an
// empty log, whatever ring it took. Serial: AllocsPerRun counts every
// goroutine's allocations (see strayAllocs).
func TestSlidingLogOverKeysThatComeAndGoAllocatesNothing(t *testing.T) {
	const limit = 8
	keys := make([]string, sized(10_000, 100_000))
	for i := range keys {
		keys[i] = "key:" + strconv.Itoa(i)
	}
	clock := &callClock{now: epoch, step: time.Microsecond}
	window := time.Duration(len(keys)/2) * clock.step
	l, err := NewSlidingLog(limit, window, WithClock(clock))
	require.NoError(t, err)
	ctx := context.Background()
	i, wrong := 0, 0
	pass := func() {
		for range len(keys) {
			if res, _ := l.Allow(ctx, keys[i], 1); !res.Allowed || res.Remaining != limit-1 {
				wrong++
			}
			if i += 7919; i >= len(keys) {
				i -= len(keys)
			}
		}
	}
	for range 4 {
		pass()
	}
	allocs := testing.AllocsPerRun(4, pass)
	assert.LessOrEqual(t, allocs, strayAllocs, "allocations per pass of %d calls", len(keys))
	assert.Zero(t, wrong, "calls not allowed with limit-1 remaining")
}

// TestSlidingLogTwiceInACompositeHandsNoRingsToNewKeys builds a Composite
// with one sliding log as two parts: the second part's clock reading may
// turn a shard after the first has read a key's log there and before it
// writes it back, so the log stops handing the rings of forgotten keys to
// new keys (a ring would otherwise serve two keys); a log that is one part
// keeps doing so.
func TestSlidingLogTwiceInACompositeHandsNoRingsToNewKeys(t *testing.T) {
	twice, err := NewSlidingLog(8, time.Second)
	require.NoError(t, err)
	once, err := NewSlidingLog(8, time.Second)
	require.NoError(t, err)
	_, err = NewComposite(
		Part{Name: "first", Limiter: twice, Key: func(k string) string { return k + ":a" }},
		Part{Name: "second", Limiter: twice, Key: func(k string) string { return k + ":b" }},
		Part{Name: "other", Limiter: once})
	require.NoError(t, err)
	for i := range twice.logs.shards {
		assert.Nil(t, twice.logs.shards[i].recycle, "shard %d of the log that is two parts", i)
		assert.NotNil(t, once.logs.shards[i].recycle, "shard %d of the log that is one part", i)
	}
}
