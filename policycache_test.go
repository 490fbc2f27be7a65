package ratelimit

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// A remembered policy gives back what its check gave, and a policy never
// put is not found.
func TestCheckedPoliciesRememberWhatTheCheckGave(t *testing.T) {
	var c checkedPolicies
	p := Policy{Limit: 10, Window: time.Minute}
	_, _, ok := c.get(p)
	assert.False(t, ok, "empty")
	c.put(p, 10, int64(6*time.Second))
	limit, param, ok := c.get(p)
	assert.True(t, ok)
	assert.Equal(t, int64(10), limit)
	assert.Equal(t, int64(6*time.Second), param)
	_, _, ok = c.get(Policy{Limit: 11, Window: time.Minute})
	assert.False(t, ok, "another policy")
}

// Readers racing writers of the same slots never see one policy's numbers
// under another's.
func TestCheckedPoliciesNeverTearUnderConcurrentWrites(t *testing.T) {
	var c checkedPolicies
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20000 {
				p := Policy{Limit: 1 + (i+g)%64, Window: time.Duration(1+(i+g)%64) * time.Second}
				if limit, param, ok := c.get(p); ok {
					if int64(p.Limit) != limit || int64(p.Window)/int64(p.Limit) != param {
						t.Errorf("policy %v read as %d, %d", p, limit, param)
						return
					}
					continue
				}
				c.put(p, int64(p.Limit), int64(p.Window)/int64(p.Limit))
			}
		}()
	}
	wg.Wait()
}

// A writer that finds the slot being written by another call (its
// sequence odd) skips it, so the policy stays unremembered and the other
// call's write stands; once that write ends, a put takes the slot. The
// concurrent test reaches the skip only when two writers happen to meet.
func TestCheckedPoliciesPutSkipsASlotAnotherCallIsWriting(t *testing.T) {
	var c checkedPolicies
	p := Policy{Limit: 10, Window: time.Minute}
	e := c.slot(p)
	e.seq.Store(1) // another call is writing
	c.put(p, 10, int64(6*time.Second))
	assert.Equal(t, uint64(1), e.seq.Load(), "the slot is left to the other call")
	_, _, ok := c.get(p)
	assert.False(t, ok, "not remembered")

	e.seq.Store(2) // the other call is done
	c.put(p, 10, int64(6*time.Second))
	limit, param, ok := c.get(p)
	assert.True(t, ok)
	assert.Equal(t, [2]int64{10, int64(6 * time.Second)}, [2]int64{limit, param})
}
