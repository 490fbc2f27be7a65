package leaseholdtest

import (
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// AdjustEvents is a ratelimit.Hooks that sends on its channel each
// AdjustEvent it hears (the Release and Extend of leases, among others),
// blocking while the channel is full, and ignores the rest.
type AdjustEvents chan ratelimit.AdjustEvent

// Decided does nothing.
func (AdjustEvents) Decided(ratelimit.Event) {}

// BreakerChanged does nothing.
func (AdjustEvents) BreakerChanged(_, _ ratelimit.BreakerState) {}

// Adjusted sends e on the channel.
func (a AdjustEvents) Adjusted(e ratelimit.AdjustEvent) { a <- e }

// AssertExtended waits for the next n events, at most 5 s for each, and
// reports whether each came and was an Extend that succeeded. A failure
// is marked with tb.Errorf, which any goroutine may call (a handler's
// too), and AssertExtended then returns false at once.
func (a AdjustEvents) AssertExtended(tb testing.TB, n int) bool {
	tb.Helper()
	for i := range n {
		select {
		case e := <-a:
			if e.Op != ratelimit.AdjustExtend || e.Err != nil {
				tb.Errorf("event %d: %v (error %v), want an Extend that succeeded", i, e.Op, e.Err)
				return false
			}
		case <-time.After(5 * time.Second):
			tb.Errorf("no extension %d within 5 s", i)
			return false
		}
	}
	return true
}

// NextRelease waits at most 5 s for a Release among the next events,
// skipping Extends, and returns it; it fails tb (and returns false) on any
// other event or when none comes in time.
func (a AdjustEvents) NextRelease(tb testing.TB) (ratelimit.AdjustEvent, bool) {
	tb.Helper()
	for {
		select {
		case e := <-a:
			switch e.Op {
			case ratelimit.AdjustRelease:
				return e, true
			case ratelimit.AdjustExtend:
				continue
			}
			tb.Errorf("got %v, want a Release", e.Op)
			return e, false
		case <-time.After(5 * time.Second):
			tb.Errorf("no release within 5 s")
			return ratelimit.AdjustEvent{}, false
		}
	}
}
