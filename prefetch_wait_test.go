package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gateHooks holds the backend's first decision after it is armed until
// release is closed; entered is closed when that decision arrives.
type gateHooks struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gateHooks) Decided(Event) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
}

func (g *gateHooks) BreakerChanged(BreakerState, BreakerState) {}

// doneWatch is a context that closes waiting the first time its Done is
// asked for: when a caller starts to wait on it.
type doneWatch struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func (c *doneWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// A call on a hot key that finds another call taking the key's next block
// waits for that take and then decides from the block it brought (no call
// of its own to the backend), and a call that finds one taking with a
// context that ends meanwhile returns the context's error as a backend
// error. The take is held in the backend's hook; the clock stands still.
func TestPrefetchCallerWaitsForTheBlockAnotherCallIsTaking(t *testing.T) {
	t.Parallel()
	clock := ratelimittest.NewClock(epoch)
	gate := &gateHooks{entered: make(chan struct{}), release: make(chan struct{})}
	tb, err := NewTokenBucket(PerSecond(1000), 1_000_000, WithClock(clock), WithHooks(gate))
	require.NoError(t, err)
	l, err := NewPrefetch(tb, PrefetchConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	for range 1000 { // the key turns hot and holds blocks
		d, err := l.Decide(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		clock.Advance(10 * time.Microsecond)
	}

	gate.armed.Store(true)
	taker := make(chan error, 1)
	go func() { // spends the block until its call takes the next one
		for {
			_, err := l.Decide(ctx, "k", 1)
			select {
			case <-gate.entered:
				taker <- err
				return
			default:
			}
			if err != nil {
				taker <- err
				return
			}
		}
	}()
	<-gate.entered

	// A call whose context has ended finds the take and does not wait.
	ended, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.Decide(ended, "k", 1)
	require.ErrorIs(t, err, ErrBackend)
	assert.ErrorIs(t, err, context.Canceled)

	// A call that waits for the take, which ends once it waits.
	watch := &doneWatch{Context: ctx, waiting: make(chan struct{})}
	go func() {
		<-watch.waiting
		close(gate.release)
	}()
	d, err := l.Decide(watch, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, FromBackend, d.Source)
	require.NoError(t, <-taker)
	require.NoError(t, l.Close(ctx))
}
