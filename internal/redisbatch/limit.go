package redisbatch

import (
	"fmt"
	"sync/atomic"
)

// Kind is the batch script's name of an algorithm.
type Kind string

// The algorithms of the batch script (see callformat.go).
const (
	TokenBucket Kind = "t" // a token bucket: Param is µs per token
	GCRA        Kind = "g" // GCRA: Param is µs per unit
	FixedWindow Kind = "w" // a fixed window: Param is the window in ms
	// TokenBucketWithInterval and GCRAWithInterval keep their interval with each key's
	// state, for a limiter whose policy is chosen per key; a fixed window
	// keeps nothing more, and is FixedWindow then too.
	TokenBucketWithInterval Kind = "T"
	GCRAWithInterval        Kind = "G"
	// Concurrency limits units in flight, each held by a lease: Units is
	// the most in flight, Param a lease's TTL in µs. Its key's state does
	// not depend on the policy, so a limiter whose policy is chosen per
	// key uses it too. An Allow's check of this kind takes Request.Lease.
	Concurrency Kind = "c"
	// SlidingLog is a sliding log: at most Units in any window of Param
	// ms. Its key's state does not depend on the policy, so a limiter
	// whose policy is chosen per key uses it too.
	SlidingLog Kind = "l"
	// CalendarWindow counts in windows aligned to a calendar: Units is the
	// limit, and Bounds are the windows the client's clock sees about now
	// (see NewCalendarLimit); Param is 0.
	CalendarWindow Kind = "k"
	// SlidingCounter is a sliding-window counter: Param is the window in
	// ms. Its keys keep their expiry, so a limiter whose policy is chosen
	// per key uses it too.
	SlidingCounter Kind = "s"
)

// Limit is one limit a request's checks refer to: the algorithm, its limit
// in whole units (a capacity, or a window's limit) and its param. A Limit
// is immutable once made by NewLimit, which makes its script arguments
// once so that sending it allocates nothing.
type Limit struct {
	Kind  Kind
	Units int64
	Param int64
	// Bounds are a CalendarWindow's windows, in µs of Unix time: the
	// previous window's start, the current one's start and end, and the
	// next one's end; zero for every other kind.
	Bounds [4]int64
	args   [3]any // Kind, Units and Param (Bounds, for a CalendarWindow) as script arguments
}

// NewLimit returns the Limit of kind, units and param.
func NewLimit(kind Kind, units, param int64) *Limit {
	return &Limit{Kind: kind, Units: units, Param: param, args: [3]any{string(kind), units, param}}
}

// NewCalendarLimit returns the Limit of kind CalendarWindow of units and
// bounds (see Limit.Bounds), whose third script argument is the text
// "prev:start:end:next".
func NewCalendarLimit(units int64, bounds [4]int64) *Limit {
	text := fmt.Sprintf("%d:%d:%d:%d", bounds[0], bounds[1], bounds[2], bounds[3])
	return &Limit{Kind: CalendarWindow, Units: units, Bounds: bounds, args: [3]any{string(CalendarWindow), units, text}}
}

// same reports whether l and m are the same limit.
func (l *Limit) same(m *Limit) bool {
	return l == m || l.Kind == m.Kind && l.Units == m.Units && l.Param == m.Param && l.Bounds == m.Bounds
}

// LimitCache holds the Limits of the policies a limiter whose policy is
// chosen per key used last, so that a call of a policy in use allocates
// none. Each policy may sit in either of two slots its hash picks, so that
// two policies that share one slot both stay; a new policy takes an empty
// one of its two, or replaces the first. Its memory is bounded whatever the
// number of policies. Its zero value is not usable; make one with
// NewLimitCache. It is safe for concurrent use.
type LimitCache struct {
	kind   Kind
	bounds [4]int64 // of every Limit, for a cache of CalendarWindow limits
	slots  [cacheSlots]atomic.Pointer[Limit]
}

// cacheSlots is how many policies a LimitCache holds at most: enough for
// the plans of a service; per-customer overrides beyond it cost a small
// allocation per call.
const cacheSlots = 1 << cacheBits

// cacheBits is the bits of a policy's hash that pick each of its slots.
const cacheBits = 5

// NewLimitCache returns an empty LimitCache of Limits of kind.
func NewLimitCache(kind Kind) *LimitCache { return &LimitCache{kind: kind} }

// NewCalendarLimitCache returns an empty LimitCache of Limits of kind
// CalendarWindow of bounds, whose param is never read.
func NewCalendarLimitCache(bounds [4]int64) *LimitCache {
	return &LimitCache{kind: CalendarWindow, bounds: bounds}
}

// Get returns the Limit of the cache's kind, units and param.
func (c *LimitCache) Get(units, param int64) *Limit {
	// A multiplicative hash, so that policies whose numbers share factors
	// (windows of whole seconds, say) still spread over the slots; its top
	// bits pick the first slot, the next ones the second.
	h := (uint64(units)*0x9E3779B97F4A7C15 ^ uint64(param)) * 0xBF58476D1CE4E5B9
	first := &c.slots[h>>(64-cacheBits)]
	second := &c.slots[(h>>(64-2*cacheBits))%cacheSlots]
	a := first.Load()
	if a != nil && a.Units == units && a.Param == param {
		return a
	}
	b := second.Load()
	if b != nil && b.Units == units && b.Param == param {
		return b
	}
	var l *Limit
	if c.kind == CalendarWindow {
		l = NewCalendarLimit(units, c.bounds)
		l.Param = param
	} else {
		l = NewLimit(c.kind, units, param)
	}
	if a != nil && b == nil {
		second.Store(l)
	} else {
		first.Store(l)
	}
	return l
}
