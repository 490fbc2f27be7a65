package ratelimittest

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// TestClockReadsItsStartUntilMoved: a new Clock reads its start, without
// the monotonic reading, until Advance or Set moves it, either way.
func TestClockReadsItsStartUntilMoved(t *testing.T) {
	c := NewClock(time.Now())
	assert.Equal(t, c.Now(), c.Now().Round(0), "no monotonic reading")
	c = NewClock(epoch)
	assert.Equal(t, epoch, c.Now())
	c.Advance(time.Second)
	assert.Equal(t, epoch.Add(time.Second), c.Now())
	c.Advance(-2 * time.Second)
	assert.Equal(t, epoch.Add(-time.Second), c.Now())
	c.Set(epoch.Add(time.Hour))
	assert.Equal(t, epoch.Add(time.Hour), c.Now())
	now := time.Now()
	c.Set(now)
	assert.Equal(t, now.Round(0), c.Now(), "Set drops the monotonic reading")
}

// TestClockIsSafeForConcurrentUse: goroutines that advance and read one
// Clock together lose no step (run it with -race).
func TestClockIsSafeForConcurrentUse(t *testing.T) {
	clock := NewClock(epoch)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				clock.Advance(time.Millisecond)
				_ = clock.Now()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, epoch.Add(8*time.Second), clock.Now())
	clock.Set(epoch)
	assert.Equal(t, epoch, clock.Now())
}
