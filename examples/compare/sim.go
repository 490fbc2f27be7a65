package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// Five of the limiters are configured to the same nominal rate: 10 requests
// per 10 s, with bursts of up to 10. The calendar window is a quota of the
// wall clock's minute instead.
const (
	limit  = 10               // capacity, GCRA burst and window limit
	period = 10 * time.Second // GCRA period and the windows' length
	rate   = 1.0              // token-bucket refill, tokens per second: limit/period
	// quota is the calendar window's limit per minute of the wall clock.
	quota = 30
)

// start is the wall-clock time the simulation starts at: 29 s into a
// minute, so that the calendar window's minute ends at 31 s, where the
// fixed window opened at 21 s ends too.
var start = time.Date(2025, time.January, 1, 12, 0, 29, 0, time.UTC)

// The traffic's landmarks, as offsets from the start of the simulation.
const (
	// steadyEnd ends an opening stream of one request every 0.5 s: twice the
	// limiters' rate.
	steadyEnd = 15 * time.Second
	// opener is a lone request that, after a quiet spell, opens a new fixed
	// window. That window ends at boundary.
	opener = 21 * time.Second
	// boundary is where the window opener opened ends. A fixed window opens
	// at a key's first counted request, not at multiples of its length.
	boundary = opener + period
	// burstGap separates the requests within a burst.
	burstGap = 50 * time.Millisecond
	// bigBurst is a burst of more requests than any limiter lets through at
	// once, followed by a stream at exactly the limiters' rate.
	bigBurst = 42 * time.Second
	// horizon is where the simulation ends.
	horizon = 60 * time.Second
)

// Algorithm names, in the order the picture draws them from the top.
const (
	nameTokenBucket = "token bucket"
	nameGCRA        = "GCRA"
	nameFixedWindow = "fixed window"
	nameSlidingLog  = "sliding log"
	nameCounter     = "sliding counter"
	nameCalendar    = "calendar minute"
)

// Decision is one limiter's answer to one request.
type Decision struct {
	At      time.Duration // when, from the start of the simulation
	Allowed bool
	// ResetAfter is the limiter's Result.ResetAfter: for an allowed request to
	// the fixed or the calendar window, the time until its window ends.
	ResetAfter time.Duration
}

// Outcome is one limiter's decisions, one per request, in request order.
type Outcome struct {
	Name      string
	Decisions []Decision
}

// Traffic returns the request times, in order: the same for every limiter.
//
//   - 0–14.5 s: one request every 0.5 s, twice the rate.
//   - 21 s: a lone request, which opens a fixed window ending at 31 s.
//   - 30.5–30.95 s: 10 requests just before that window ends,
//     31.0–31.45 s: 10 just after.
//   - 42.0–42.7 s: a burst of 15.
//   - 43–60 s: one request a second, exactly the rate.
func Traffic() []time.Duration {
	var ts []time.Duration
	for t := time.Duration(0); t < steadyEnd; t += 500 * time.Millisecond {
		ts = append(ts, t)
	}
	ts = append(ts, opener)
	for i := range 2 * limit {
		ts = append(ts, boundary-limit*burstGap+time.Duration(i)*burstGap)
	}
	for i := range 15 {
		ts = append(ts, bigBurst+time.Duration(i)*burstGap)
	}
	for t := bigBurst + time.Second; t <= horizon; t += time.Second {
		ts = append(ts, t)
	}
	return ts
}

// Simulate feeds reqs, which must be in order, to a token bucket, a GCRA, a
// fixed window, a sliding log and a sliding counter, each configured to 10
// per 10 s, and to a calendar window of 30 per minute of the wall clock in
// UTC, all reading one ratelimittest.Clock that is set to each request's time. It
// returns their outcomes in that order.
func Simulate(reqs []time.Duration) ([]Outcome, error) {
	clock := ratelimittest.NewClock(start)
	opt := ratelimit.WithClock(clock)

	tb, err := ratelimit.NewTokenBucket(ratelimit.Per(limit, period), limit, opt)
	if err != nil {
		return nil, err
	}
	gcra, err := ratelimit.NewGCRA(limit, period, opt)
	if err != nil {
		return nil, err
	}
	fw, err := ratelimit.NewFixedWindow(limit, period, opt)
	if err != nil {
		return nil, err
	}
	log, err := ratelimit.NewSlidingLog(limit, period, opt)
	if err != nil {
		return nil, err
	}
	counter, err := ratelimit.NewSlidingCounter(limit, period, opt)
	if err != nil {
		return nil, err
	}
	cal, err := ratelimit.NewCalendarWindow(quota, ratelimit.Calendar{Period: ratelimit.CalendarMinute}, opt)
	if err != nil {
		return nil, err
	}
	limiters := []struct {
		name string
		l    ratelimit.Limiter
	}{
		{nameTokenBucket, tb},
		{nameGCRA, gcra},
		{nameFixedWindow, fw},
		{nameSlidingLog, log},
		{nameCounter, counter},
		{nameCalendar, cal},
	}

	outs := make([]Outcome, len(limiters))
	for i, l := range limiters {
		outs[i] = Outcome{Name: l.name, Decisions: make([]Decision, 0, len(reqs))}
	}
	ctx := context.Background()
	for i, at := range reqs {
		if i > 0 && at < reqs[i-1] {
			return nil, fmt.Errorf("request %d at %v comes before request %d at %v", i, at, i-1, reqs[i-1])
		}
		clock.Set(start.Add(at))
		for j, l := range limiters {
			res, err := l.l.Allow(ctx, "client", 1)
			if err != nil {
				return nil, fmt.Errorf("%s at %v: %w", l.name, at, err)
			}
			outs[j].Decisions = append(outs[j].Decisions, Decision{At: at, Allowed: res.Allowed, ResetAfter: res.ResetAfter})
		}
	}
	return outs, nil
}

// Allowed returns the times of the allowed requests, in order.
func (o Outcome) Allowed() []time.Duration {
	var ts []time.Duration
	for _, d := range o.Decisions {
		if d.Allowed {
			ts = append(ts, d.At)
		}
	}
	return ts
}

// Counts returns how many requests were allowed and denied.
func (o Outcome) Counts() (allowed, denied int) {
	for _, d := range o.Decisions {
		if d.Allowed {
			allowed++
		} else {
			denied++
		}
	}
	return allowed, denied
}

// Busiest returns the most requests allowed within any half-open span
// [from, from+span), and the earliest such from. ts must be in order.
func Busiest(ts []time.Duration, span time.Duration) (count int, from time.Duration) {
	hi := 0
	for lo, t := range ts {
		for hi < len(ts) && ts[hi] < t+span {
			hi++
		}
		if hi-lo > count {
			count, from = hi-lo, t
		}
	}
	return count, from
}

// Window is a span of time during which a fixed or calendar window was
// open.
type Window struct{ Start, End time.Duration }

// Windows returns the windows a fixed or calendar window's allowed
// decisions fell in, as the limiter reported them: an allowed request's
// window ends ResetAfter after it, and began length before that.
func (o Outcome) Windows(length time.Duration) []Window {
	var ws []Window
	for _, d := range o.Decisions {
		if !d.Allowed {
			continue
		}
		end := d.At + d.ResetAfter
		if len(ws) == 0 || ws[len(ws)-1].End != end {
			ws = append(ws, Window{Start: end - length, End: end})
		}
	}
	return ws
}

// Between returns how many requests in [from, to) there were and how many of
// them were allowed.
func (o Outcome) Between(from, to time.Duration) (allowed, total int) {
	for _, d := range o.Decisions {
		if d.At >= from && d.At < to {
			total++
			if d.Allowed {
				allowed++
			}
		}
	}
	return allowed, total
}
