package leaseholdtest

import "github.com/ratelimit-go/ratelimit"

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
