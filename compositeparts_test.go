package ratelimit

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEveryLimiterIsACompositePartThroughItsKindFile checks that the
// Composite's engines reach every limiter of the registry's kinds as a part
// through the interfaces its kind file implements, never by its type: an
// in-process limiter is a partLimiter, whose zero value has no part engine
// (and is refused as a part, naming its type), and a Redis limiter a
// redisPartLimiter.
func TestEveryLimiterIsACompositePartThroughItsKindFile(t *testing.T) {
	for _, l := range kindShells {
		typ := reflect.TypeOf(l).Elem().Name()
		if strings.HasPrefix(typ, "Redis") {
			_, ok := l.(redisPartLimiter)
			assert.True(t, ok, "%s is a Redis part", typ)
			continue
		}
		zero := reflect.New(reflect.TypeOf(l).Elem()).Interface().(Limiter)
		p, ok := zero.(partLimiter)
		require.True(t, ok, "%s is an in-process part", typ)
		assert.Nil(t, p.part(), "a zero-value %s has no part engine", typ)
		_, err := NewComposite(Part{Name: "a", Limiter: zero})
		require.Error(t, err, typ)
		assert.Contains(t, err.Error(), "nil or zero-value *ratelimit."+typ)
	}
}

// TestCompositeAllowDecideAndAcquireDoNotAllocateTheirCall checks that a
// Composite's decisions in process allocate nothing for their call (its
// buffers on the stack, its parts' partCalls from localParts' pool): Allow
// allocates nothing, Decide and Acquire only the Decision's Parts.
func TestCompositeAllowDecideAndAcquireDoNotAllocateTheirCall(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	b, err := NewTokenBucket(PerSecond(1e9), 1<<30, WithClock(clock))
	require.NoError(t, err)
	w, err := NewFixedWindow(1<<30, time.Hour, WithClock(clock))
	require.NoError(t, err)
	slots, err := NewConcurrency(60000, time.Hour, WithClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "b", Limiter: b}, Part{Name: "w", Limiter: w}, Part{Name: "c", Limiter: slots})
	require.NoError(t, err)
	ctx := context.Background()
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops buffers at random: counted without -race")
	}

	allow := testing.AllocsPerRun(100, func() { _, _ = c.Allow(ctx, "k", 1) })
	decide := testing.AllocsPerRun(100, func() { _, _ = c.Decide(ctx, "k", 1) })
	acquire := testing.AllocsPerRun(100, func() { _, _, _ = c.Acquire(ctx, "k", 1) })
	assert.Equal(t, 0.0, allow, "Allow")
	assert.Equal(t, 1.0, decide, "Decide: the Decision's Parts")
	assert.Equal(t, 1.0, acquire, "Acquire: the Decision's Parts (its lease's units are the key's)")
}

// TestCompositePoolKeepsNothingOfACall checks that the partCalls a
// Composite's in-process engine returns to its pool are cleared: the pool
// keeps no key's shard, log, leases or Lease of the calls it served.
func TestCompositePoolKeepsNothingOfACall(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	g, err := NewSlidingLog(10, time.Minute, WithClock(clock))
	require.NoError(t, err)
	slots, err := NewConcurrency(10, time.Hour, WithClock(clock))
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "g", Limiter: g}, Part{Name: "c", Limiter: slots})
	require.NoError(t, err)
	ctx := context.Background()
	lease, _, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.NotZero(t, lease)
	_, err = c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	// The pool may drop what it was given (it does at random under -race).
	if b, ok := c.local.buffers.Get().(*callBuffer); ok {
		require.Len(t, b.calls, 2)
		for i := range b.calls {
			assert.True(t, reflect.ValueOf(b.calls[i]).IsZero(), "partCall %d is cleared", i)
		}
	}
}

// TestCompositeOfMoreThanFourPartsReportsEveryPart checks a Composite of
// more parts than a call's stack buffers hold: every part's Result, next
// unit and the concurrency part's Lease come back as with few parts.
func TestCompositeOfMoreThanFourPartsReportsEveryPart(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	var parts []Part
	for i, limit := range []int{5, 4, 3, 2} {
		b, err := NewFixedWindow(limit, time.Minute, WithClock(clock))
		require.NoError(t, err)
		parts = append(parts, Part{Name: string(rune('a' + i)), Limiter: b})
	}
	log, err := NewSlidingLog(6, time.Minute, WithClock(clock))
	require.NoError(t, err)
	slots, err := NewConcurrency(7, time.Hour, WithClock(clock))
	require.NoError(t, err)
	parts = append(parts, Part{Name: "log", Limiter: log}, Part{Name: "slots", Limiter: slots})
	c, err := NewComposite(parts...)
	require.NoError(t, err)
	ctx := context.Background()

	lease, d, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	assert.True(t, lease.Held(), "the concurrency part's lease")
	require.Len(t, d.Parts, 6)
	for i, want := range []int{4, 3, 2, 1, 5, 6} {
		assert.Equal(t, want, d.Parts[i].Remaining, "part %d", i)
	}
	assert.Equal(t, time.Minute, d.partNext[4], "the sliding log's next unit")

	res, err := c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	res, err = c.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed, "the fourth part's limit of 2 is spent")
}
