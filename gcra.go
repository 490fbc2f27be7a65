package ratelimit

import (
	"context"
	"time"
)

// GCRA is an in-process generic cell rate algorithm limiter: limit requests per
// period per key, with bursts of up to limit.
//
// It keeps one timestamp per key, the theoretical arrival time, and decides
// exactly as a TokenBucket with capacity limit and rate limit/period: with an
// emission interval T = period/limit, a request for n at now moves the key's
// time to max(tat, now) + n·T and is allowed iff that is at most limit·T ahead
// of now.
//
// A GCRA is safe for concurrent use. The zero value is not usable; create one
// with NewGCRA.
type GCRA struct {
	s *schedule
}

// NewGCRA returns an in-process GCRA allowing limit per period per key.
//
// The emission interval period/limit is rounded to the nearest nanosecond. It
// accepts WithClock. It returns an error wrapping ErrInvalidConfig for a limit
// <= 0, a period <= 0, a period/limit under 1 ns, or an option that does not
// apply.
func NewGCRA(limit int, period time.Duration, opts ...Option) (*GCRA, error) {
	const kind = "NewGCRA"
	cfg, err := applyOptions(kind, inProcess, opts)
	if err != nil {
		return nil, err
	}
	interval, err := periodInterval(kind, limit, period, time.Nanosecond)
	if err != nil {
		return nil, err
	}
	s, err := newSchedule(kind, limit, interval, cfg.clock)
	if err != nil {
		return nil, err
	}
	return &GCRA{s: s}, nil
}

// Allow decides n for key. See Limiter for the contract; ctx is not used, as
// the decision never blocks.
func (g *GCRA) Allow(_ context.Context, key string, n int) (Result, error) {
	return g.s.allow(key, n)
}

// FillTime returns the time a key takes to go from exhausted to its full
// limit: limit emission intervals, which is period up to rounding.
func (g *GCRA) FillTime() time.Duration { return g.s.fillTime() }

// Policy returns the limit and FillTime.
func (g *GCRA) Policy() Policy { return g.s.policy() }
