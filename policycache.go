package ratelimit

import "sync/atomic"

// checkedPolicies remembers the last policies a policyFunc checked, with
// the limit and param its check gave each, so that a key on a plan other
// than the limiter's own is not checked again on every call: the check
// costs a few integer divisions, a hit here a handful of loads. Each slot
// is a sequence lock: readers never wait and never see a torn entry, and a
// writer that finds the slot being written skips it. Its zero value is
// empty and ready; it is safe for concurrent use, and never allocates.
type checkedPolicies struct {
	slots [8]checkedPolicy
}

// checkedPolicy is one slot: a policy (limit and window) and what its check
// gave, valid while seq is even and above 0 and unchanged across the read.
type checkedPolicy struct {
	seq           atomic.Uint64
	limit, window atomic.Int64
	outLimit      atomic.Int64
	outParam      atomic.Int64
}

// slot returns p's slot.
func (c *checkedPolicies) slot(p Policy) *checkedPolicy {
	h := uint64(p.Limit)*0x9e3779b97f4a7c15 ^ uint64(p.Window)*0xc2b2ae3d27d4eb4f
	return &c.slots[h>>61]
}

// get returns the limit and param p's check gave, and true; or false when
// p is not remembered.
func (c *checkedPolicies) get(p Policy) (limit, param int64, ok bool) {
	e := c.slot(p)
	s := e.seq.Load()
	if s == 0 || s&1 != 0 || e.limit.Load() != int64(p.Limit) || e.window.Load() != int64(p.Window) {
		return 0, 0, false
	}
	limit, param = e.outLimit.Load(), e.outParam.Load()
	return limit, param, e.seq.Load() == s
}

// put remembers that p's check gave limit and param, unless another call
// is writing p's slot.
func (c *checkedPolicies) put(p Policy, limit, param int64) {
	e := c.slot(p)
	s := e.seq.Load()
	if s&1 != 0 || !e.seq.CompareAndSwap(s, s+1) {
		return
	}
	e.limit.Store(int64(p.Limit))
	e.window.Store(int64(p.Window))
	e.outLimit.Store(limit)
	e.outParam.Store(param)
	e.seq.Store(s + 2)
}
