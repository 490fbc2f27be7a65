package ratelimit

import "sync/atomic"

// specCache holds the batch script's limits (algorithm, limit and param)
// of the policies a limiter built WithPolicyFunc used last, so that a call
// of a policy in use allocates none: one entry per slot, replaced by the
// next policy that lands there, so its memory is bounded whatever the
// number of policies. It is safe for concurrent use.
type specCache struct {
	algo  string
	slots [specSlots]atomic.Pointer[cachedSpec]
}

// specSlots is how many policies a specCache holds: enough for the plans
// of a service; per-customer overrides beyond it cost a small allocation
// per call.
const specSlots = 16

// cachedSpec is one policy's limit and param, and its script limit.
type cachedSpec struct {
	limit, param int64
	spec         [3]any
}

// spec returns the script's limit for limit and param.
func (c *specCache) spec(limit, param int64) *[3]any {
	slot := &c.slots[uint64(limit*31+param)%specSlots]
	if s := slot.Load(); s != nil && s.limit == limit && s.param == param {
		return &s.spec
	}
	s := &cachedSpec{limit: limit, param: param, spec: [3]any{c.algo, limit, param}}
	slot.Store(s)
	return &s.spec
}
