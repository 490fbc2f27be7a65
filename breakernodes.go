package ratelimit

import (
	"sync"
	"sync/atomic"
	"time"
)

// breakers is the circuit breaker of a Guard, or of a Breaker that Guards
// share: one breaker per node of a backend on a Redis Cluster or Ring
// client (the server that serves a call's key, see nodesOf), made at the
// node's first call, and one for every call whose node is not known, which
// is every call of a backend on one server. So a node that fails opens its
// own breaker, and the keys of the others stay on Redis.
//
// Memory: one breaker per node seen. Once maxNodeBreakers are held, adding
// one drops those that are closed with no failure counted, which know
// nothing a new breaker would not.
//
// It is safe for concurrent use: nodes is replaced whole, under mu, when a
// node is added.
type breakers struct {
	threshold int
	coolDown  time.Duration
	one       breaker // node "": a backend on one server, or a node not known
	mu        sync.Mutex
	nodes     atomic.Pointer[map[string]*breaker]
}

// maxNodeBreakers is how many nodes' breakers a breakers holds before it
// drops the idle ones.
const maxNodeBreakers = 64

// init makes s the closed breakers of threshold consecutive failures and
// coolDown, before its first use.
func (s *breakers) init(threshold int, coolDown time.Duration) *breakers {
	s.threshold, s.coolDown = threshold, coolDown
	s.one.threshold, s.one.coolDown = threshold, coolDown
	return s
}

// of returns the breaker of node ("" for one not known).
func (s *breakers) of(node string) *breaker {
	if node == "" {
		return &s.one
	}
	if m := s.nodes.Load(); m != nil {
		if b, ok := (*m)[node]; ok {
			return b
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.nodes.Load()
	var held map[string]*breaker
	if old != nil {
		held = *old
		if b, ok := held[node]; ok {
			return b
		}
	}
	m := make(map[string]*breaker, len(held)+1)
	for name, b := range held {
		if len(held) < maxNodeBreakers || !b.idle() {
			m[name] = b
		}
	}
	b := &breaker{threshold: s.threshold, coolDown: s.coolDown}
	m[node] = b
	s.nodes.Store(&m)
	return b
}

// state returns the state of the most open breaker: open, then half-open,
// then closed.
func (s *breakers) state() BreakerState {
	worst := s.one.current()
	if m := s.nodes.Load(); m != nil {
		for _, b := range *m {
			if st := b.current(); openness(st) > openness(worst) {
				worst = st
			}
		}
	}
	return worst
}

// openness orders breaker states from closed to open.
func openness(s BreakerState) int {
	switch s {
	case BreakerOpen:
		return 2
	case BreakerHalfOpen:
		return 1
	}
	return 0
}
