package ratelimit

import "errors"

// localParts decides a Composite's in-process parts under all their locks.
type localParts struct{}

func newLocalParts(limiters []Limiter) (*localParts, error) {
	return nil, errors.New("not yet")
}

func (l *localParts) allow(keys []string, n int, results []Result) {}

func (l *localParts) settle(keys []string, taken, cost int, a adjustment, results []Result) {}

func (l *localParts) reset(keys []string) {}
