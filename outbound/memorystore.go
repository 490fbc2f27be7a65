package outbound

import (
	"context"
	"sync"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// MemoryStore is a Store in the process: what one Upstream, or the
// Upstreams that share it, learned. It is what an Upstream uses when its
// Config names no Store. Its zero value is not usable: build one with
// NewMemoryStore. It is safe for concurrent use.
//
// A partition's entry is dropped once its pause has ended and its policy
// been forgotten, when the store next grows to twice the entries it held
// after its last sweep, so that memory follows the partitions in use.
type MemoryStore struct {
	clock ratelimit.Clock

	mu      sync.Mutex
	entries map[string]*memoryEntry
	swept   int // entries after the last sweep
}

// memoryEntry is one partition's state, in times of the store's clock.
type memoryEntry struct {
	pauseEnd  time.Time
	policy    ratelimit.Policy
	policyEnd time.Time
}

// NewMemoryStore returns an empty MemoryStore on clock, or on the system
// clock when clock is nil.
func NewMemoryStore(clock ratelimit.Clock) *MemoryStore {
	if clock == nil {
		clock = systemClock{}
	}
	return &MemoryStore{clock: clock, entries: make(map[string]*memoryEntry)}
}

// systemClock is the system's clock.
type systemClock struct{}

// Now returns time.Now().
func (systemClock) Now() time.Time { return time.Now() }

// Load returns partition's state now. It never fails; ctx is not used.
func (s *MemoryStore) Load(_ context.Context, partition string) (State, error) {
	if s == nil || s.entries == nil {
		return State{}, errNilStore
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[partition]
	if e == nil {
		return State{}, nil
	}
	now := s.clock.Now()
	var st State
	if d := e.pauseEnd.Sub(now); d > 0 {
		st.Pause = d
	}
	if d := e.policyEnd.Sub(now); d > 0 {
		st.Policy, st.PolicyLeft = e.policy, d
	}
	return st, nil
}

// Pause makes partition paused for at least d from now. It fails only for
// d <= 0; ctx is not used.
func (s *MemoryStore) Pause(_ context.Context, partition string, d time.Duration) error {
	if s == nil || s.entries == nil {
		return errNilStore
	}
	if d <= 0 {
		return errPauseNotPositive(d)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(partition, now)
	if end := now.Add(d); end.After(e.pauseEnd) {
		e.pauseEnd = end
	}
	return nil
}

// Learn makes p partition's stated limit for keep from now, or forgets it
// for the zero p, and reports whether the limit changed. It fails only for
// keep <= 0; ctx is not used.
func (s *MemoryStore) Learn(_ context.Context, partition string, p ratelimit.Policy, keep time.Duration) (bool, error) {
	if s == nil || s.entries == nil {
		return false, errNilStore
	}
	if keep <= 0 {
		return false, errKeepNotPositive(keep)
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entry(partition, now)
	old := e.policy
	if !e.policyEnd.After(now) {
		old = ratelimit.Policy{}
	}
	if p == (ratelimit.Policy{}) {
		e.policy, e.policyEnd = ratelimit.Policy{}, time.Time{}
	} else {
		e.policy, e.policyEnd = p, now.Add(keep)
	}
	return p != old, nil
}

// entry returns partition's entry, made if need be, sweeping the ended
// entries first when the map has doubled since the last sweep. s.mu is
// held.
func (s *MemoryStore) entry(partition string, now time.Time) *memoryEntry {
	if e := s.entries[partition]; e != nil {
		return e
	}
	if len(s.entries) >= 2*max(s.swept, 64) {
		for k, e := range s.entries {
			if !e.pauseEnd.After(now) && !e.policyEnd.After(now) {
				delete(s.entries, k)
			}
		}
		s.swept = len(s.entries)
	}
	e := new(memoryEntry)
	s.entries[partition] = e
	return e
}
