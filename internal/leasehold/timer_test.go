package leasehold_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold"
	"github.com/ratelimit-go/ratelimit/internal/leasehold/leaseholdtest"
)

// AfterFunc's timer is the system's: it calls its function once its time
// has passed, and Stop after that reports it was not set.
func TestAfterFuncFiresOnTheSystemsTimer(t *testing.T) {
	fired := make(chan struct{})
	timer := leasehold.AfterFunc(time.Millisecond, func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("not fired within 5 s")
	}
	assert.False(t, timer.Stop())
}

// The fakes are what they stand for.
var (
	_ leasehold.Timer       = (*leaseholdtest.Timer)(nil)
	_ ratelimit.Hooks       = leaseholdtest.AdjustEvents(nil)
	_ ratelimit.AdjustHooks = leaseholdtest.AdjustEvents(nil)
	_ leasehold.Reporter    = (*leaseholdtest.Reports)(nil)
)
