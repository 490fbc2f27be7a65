package ratelimit

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// step is one call in a scenario: move the clock by advance (negative moves it
// back), then Allow(key, n), and expect want and an error matching err.
type step struct {
	advance time.Duration
	key     string
	n       int
	want    Result
	err     error
}

// scenario is a run of steps against a fresh limiter of limit tokens that
// takes period to go from empty to full (a token bucket of capacity limit and
// rate limit/period, a GCRA of limit per period, a window of limit per
// period).
type scenario struct {
	name   string
	limit  int
	period time.Duration
	steps  []step
}

// subject is one Limiter implementation under test. newLimiter returns a
// fresh limiter built with opts, and a function that moves the time it sees.
type subject struct {
	name       string
	newLimiter func(t *testing.T, limit int, period time.Duration, opts ...Option) (Limiter, func(time.Duration))
}

// runScenarios runs every scenario against every subject.
func runScenarios(t *testing.T, subjects []subject, scenarios []scenario) {
	t.Helper()
	for _, sub := range subjects {
		for _, sc := range scenarios {
			t.Run(sub.name+"/"+sc.name, func(t *testing.T) {
				l, advance := sub.newLimiter(t, sc.limit, sc.period)
				for i, st := range sc.steps {
					if st.advance != 0 {
						advance(st.advance)
					}
					got, err := l.Allow(context.Background(), st.key, st.n)
					msg := fmt.Sprintf("step %d: advance %v, Allow(%q, %d)", i, st.advance, st.key, st.n)
					if st.err != nil {
						require.ErrorIs(t, err, st.err, msg)
					} else {
						require.NoError(t, err, msg)
					}
					assert.Equal(t, st.want, got, msg)
				}
			})
		}
	}
}

// ok and no build expected Results for the bucket scenarios.
func ok(limit, remaining int, reset time.Duration) Result {
	return Result{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

func no(limit, remaining int, retry, reset time.Duration) Result {
	return Result{Allowed: false, Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

const ms = time.Millisecond

// bucketScenarios hold for every limiter that behaves as a token bucket: the
// in-process and Redis token buckets and GCRAs. Every period here is a whole
// number of microseconds per token, so in-process and Redis limiters agree to
// the nanosecond.
var bucketScenarios = []scenario{
	{
		// Capacity 5, 2 tokens/s, a request every 0.3 s from t=0: the burst
		// and the refill allow 0–10, then denials and grants alternate.
		name: "request every 0.3 s on 5 at 2/s", limit: 5, period: 2500 * ms,
		steps: []step{
			{0, "k", 1, ok(5, 4, 500*ms), nil},
			{300 * ms, "k", 1, ok(5, 3, 700*ms), nil},
			{300 * ms, "k", 1, ok(5, 3, 900*ms), nil},
			{300 * ms, "k", 1, ok(5, 2, 1100*ms), nil},
			{300 * ms, "k", 1, ok(5, 2, 1300*ms), nil},
			{300 * ms, "k", 1, ok(5, 2, 1500*ms), nil},
			{300 * ms, "k", 1, ok(5, 1, 1700*ms), nil},
			{300 * ms, "k", 1, ok(5, 1, 1900*ms), nil},
			{300 * ms, "k", 1, ok(5, 0, 2100*ms), nil},
			{300 * ms, "k", 1, ok(5, 0, 2300*ms), nil},
			{300 * ms, "k", 1, ok(5, 0, 2500*ms), nil},
			{300 * ms, "k", 1, no(5, 0, 200*ms, 2200*ms), nil},
			{300 * ms, "k", 1, ok(5, 0, 2400*ms), nil},
			{300 * ms, "k", 1, no(5, 0, 100*ms, 2100*ms), nil},
			{300 * ms, "k", 1, ok(5, 0, 2300*ms), nil},
		},
	},
	{
		name: "drains then waits exactly RetryAfter", limit: 3, period: 3 * time.Second,
		steps: []step{
			{0, "k", 1, ok(3, 2, time.Second), nil},
			{0, "k", 2, ok(3, 0, 3*time.Second), nil},
			{0, "k", 1, no(3, 0, time.Second, 3*time.Second), nil},
			{time.Second - time.Microsecond, "k", 1, no(3, 0, time.Microsecond, 2*time.Second+time.Microsecond), nil},
			{time.Microsecond, "k", 1, ok(3, 0, 3*time.Second), nil},
		},
	},
	{
		name: "a denial takes nothing", limit: 2, period: 2 * time.Second,
		steps: []step{
			{0, "k", 2, ok(2, 0, 2*time.Second), nil},
			{0, "k", 1, no(2, 0, time.Second, 2*time.Second), nil},
			{0, "k", 1, no(2, 0, time.Second, 2*time.Second), nil},
			{500 * ms, "k", 1, no(2, 0, 500*ms, 1500*ms), nil},
			{500 * ms, "k", 1, ok(2, 0, 2*time.Second), nil},
		},
	},
	{
		name: "a large request waits while a small one passes", limit: 5, period: 5 * time.Second,
		steps: []step{
			{0, "k", 3, ok(5, 2, 3*time.Second), nil},
			{0, "k", 3, no(5, 2, time.Second, 3*time.Second), nil},
			{0, "k", 2, ok(5, 0, 5*time.Second), nil},
			{2500 * ms, "k", 3, no(5, 2, 500*ms, 2500*ms), nil},
			{500 * ms, "k", 3, ok(5, 0, 5*time.Second), nil},
		},
	},
	{
		name: "refill stops at capacity", limit: 4, period: 2 * time.Second,
		steps: []step{
			{0, "k", 4, ok(4, 0, 2*time.Second), nil},
			{time.Hour, "k", 0, ok(4, 4, 0), nil},
			{0, "k", 1, ok(4, 3, 500*ms), nil},
		},
	},
	{
		name: "peek consumes nothing", limit: 3, period: 3 * time.Second,
		steps: []step{
			{0, "k", 0, ok(3, 3, 0), nil},
			{0, "k", 2, ok(3, 1, 2*time.Second), nil},
			{0, "k", 0, ok(3, 1, 2*time.Second), nil},
			{0, "k", 0, ok(3, 1, 2*time.Second), nil},
			{0, "k", 1, ok(3, 0, 3*time.Second), nil},
			{0, "k", 0, ok(3, 0, 3*time.Second), nil},
		},
	},
	{
		name: "invalid and impossible costs change nothing", limit: 3, period: 3 * time.Second,
		steps: []step{
			{0, "k", -1, Result{Limit: 3}, ErrInvalidCost},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{0, "k", 1, ok(3, 2, time.Second), nil},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{0, "k", -5, Result{Limit: 3}, ErrInvalidCost},
			{0, "k", 2, ok(3, 0, 3*time.Second), nil},
		},
	},
	{
		name: "keys are independent", limit: 2, period: 2 * time.Second,
		steps: []step{
			{0, "a", 2, ok(2, 0, 2*time.Second), nil},
			{0, "b", 1, ok(2, 1, time.Second), nil},
			{0, "a", 1, no(2, 0, time.Second, 2*time.Second), nil},
			{0, "", 2, ok(2, 0, 2*time.Second), nil},
			{0, "b", 1, ok(2, 0, 2*time.Second), nil},
		},
	},
	{
		name: "a clock going backwards creates no tokens", limit: 2, period: 2 * time.Second,
		steps: []step{
			{0, "k", 2, ok(2, 0, 2*time.Second), nil},
			// The key is empty: in process its time stands still until the
			// clock catches up, on Redis it owes the step, and either way
			// the waits count the catching up.
			{-time.Hour, "k", 1, no(2, 0, time.Hour+time.Second, time.Hour+2*time.Second), nil},
			{-time.Hour, "k", 0, ok(2, 0, 2*time.Hour+2*time.Second), nil},
			{2 * time.Hour, "k", 1, no(2, 0, time.Second, 2*time.Second), nil},
			{time.Second, "k", 1, ok(2, 0, 2*time.Second), nil},
		},
	},
}

// windowScenarios hold for the fixed windows, in process and on Redis. Every
// time here is whole milliseconds, the unit of Redis expiry.
var windowScenarios = []scenario{
	{
		name: "counts up to the limit; denials do not count", limit: 3, period: 10 * time.Second,
		steps: []step{
			{0, "k", 1, ok(3, 2, 10*time.Second), nil},
			{0, "k", 2, ok(3, 0, 10*time.Second), nil},
			{4 * time.Second, "k", 1, no(3, 0, 6*time.Second, 6*time.Second), nil},
			{0, "k", 1, no(3, 0, 6*time.Second, 6*time.Second), nil},
			{6*time.Second - ms, "k", 1, no(3, 0, ms, ms), nil},
			{ms, "k", 1, ok(3, 2, 10*time.Second), nil},
		},
	},
	{
		name: "the window opens at the first counted request", limit: 2, period: 10 * time.Second,
		steps: []step{
			{0, "k", 0, ok(2, 2, 0), nil},
			{5 * time.Second, "k", 0, ok(2, 2, 0), nil},
			{0, "k", 1, ok(2, 1, 10*time.Second), nil},
			{9 * time.Second, "k", 0, ok(2, 1, time.Second), nil},
			{0, "k", 1, ok(2, 0, time.Second), nil},
			{time.Second, "k", 2, ok(2, 0, 10*time.Second), nil},
		},
	},
	{
		name: "a burst across the boundary gets through twice", limit: 3, period: 10 * time.Second,
		steps: []step{
			{0, "k", 1, ok(3, 2, 10*time.Second), nil},
			{9900 * ms, "k", 2, ok(3, 0, 100*ms), nil},
			{100 * ms, "k", 3, ok(3, 0, 10*time.Second), nil},
			{0, "k", 1, no(3, 0, 10*time.Second, 10*time.Second), nil},
		},
	},
	{
		name: "invalid and impossible costs change nothing", limit: 3, period: 10 * time.Second,
		steps: []step{
			{0, "k", -1, Result{Limit: 3}, ErrInvalidCost},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{0, "k", 0, ok(3, 3, 0), nil},
			{0, "k", 3, ok(3, 0, 10*time.Second), nil},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{0, "k", 1, no(3, 0, 10*time.Second, 10*time.Second), nil},
		},
	},
	{
		name: "keys are independent", limit: 2, period: 10 * time.Second,
		steps: []step{
			{0, "a", 2, ok(2, 0, 10*time.Second), nil},
			{time.Second, "b", 1, ok(2, 1, 10*time.Second), nil},
			{0, "a", 1, no(2, 0, 9*time.Second, 9*time.Second), nil},
			{0, "b", 1, ok(2, 0, 10*time.Second), nil},
		},
	},
	{
		name: "a clock going backwards opens no window early", limit: 2, period: 10 * time.Second,
		steps: []step{
			{0, "k", 2, ok(2, 0, 10*time.Second), nil},
			{-time.Hour, "k", 1, no(2, 0, time.Hour+10*time.Second, time.Hour+10*time.Second), nil},
			{time.Hour, "k", 1, no(2, 0, 10*time.Second, 10*time.Second), nil},
			{10 * time.Second, "k", 1, ok(2, 1, 10*time.Second), nil},
		},
	},
}

// logScenarios hold for the sliding logs, in process and on Redis. Every
// time here is whole milliseconds, the unit of Redis expiry.
var logScenarios = []scenario{
	{
		name: "each unit counts for a window after it was taken", limit: 3, period: 10 * time.Second,
		steps: []step{
			{0, "k", 1, ok(3, 2, 10*time.Second), nil},
			{4 * time.Second, "k", 2, ok(3, 0, 10*time.Second), nil},
			{0, "k", 1, no(3, 0, 6*time.Second, 10*time.Second), nil},
			{6*time.Second - ms, "k", 1, no(3, 0, ms, 4*time.Second+ms), nil},
			{ms, "k", 1, ok(3, 0, 10*time.Second), nil},
			{0, "k", 2, no(3, 0, 4*time.Second, 10*time.Second), nil},
			{4 * time.Second, "k", 2, ok(3, 0, 10*time.Second), nil},
		},
	},
	{
		name: "no burst across a boundary", limit: 3, period: 10 * time.Second,
		steps: []step{
			{0, "k", 1, ok(3, 2, 10*time.Second), nil},
			{9900 * ms, "k", 2, ok(3, 0, 10*time.Second), nil},
			{100 * ms, "k", 3, no(3, 1, 9900*ms, 9900*ms), nil},
			{0, "k", 1, ok(3, 0, 10*time.Second), nil},
		},
	},
	{
		name: "a large request waits for more of the oldest units to leave", limit: 5, period: 10 * time.Second,
		steps: []step{
			{0, "k", 2, ok(5, 3, 10*time.Second), nil},
			{time.Second, "k", 2, ok(5, 1, 10*time.Second), nil},
			{time.Second, "k", 1, ok(5, 0, 10*time.Second), nil},
			{0, "k", 4, no(5, 0, 9*time.Second, 10*time.Second), nil},
			{0, "k", 1, no(5, 0, 8*time.Second, 10*time.Second), nil},
			{8 * time.Second, "k", 4, no(5, 2, time.Second, 2*time.Second), nil},
			{time.Second, "k", 4, ok(5, 0, 10*time.Second), nil},
		},
	},
	{
		name: "invalid and impossible costs change nothing; a peek takes nothing", limit: 3, period: 10 * time.Second,
		steps: []step{
			{0, "k", -1, Result{Limit: 3}, ErrInvalidCost},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{0, "k", 0, ok(3, 3, 0), nil},
			{0, "k", 3, ok(3, 0, 10*time.Second), nil},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{time.Second, "k", 0, ok(3, 0, 9*time.Second), nil},
			{0, "k", 1, no(3, 0, 9*time.Second, 9*time.Second), nil},
		},
	},
	{
		name: "keys are independent", limit: 2, period: 10 * time.Second,
		steps: []step{
			{0, "a", 2, ok(2, 0, 10*time.Second), nil},
			{time.Second, "b", 1, ok(2, 1, 10*time.Second), nil},
			{0, "a", 1, no(2, 0, 9*time.Second, 9*time.Second), nil},
			{0, "b", 1, ok(2, 0, 10*time.Second), nil},
		},
	},
	{
		name: "a clock going backwards lets no unit leave early", limit: 2, period: 10 * time.Second,
		steps: []step{
			{0, "k", 2, ok(2, 0, 10*time.Second), nil},
			{-time.Hour, "k", 1, no(2, 0, time.Hour+10*time.Second, time.Hour+10*time.Second), nil},
			{time.Hour, "k", 1, no(2, 0, 10*time.Second, 10*time.Second), nil},
			{10 * time.Second, "k", 1, ok(2, 1, 10*time.Second), nil},
		},
	},
}

// counterScenarios hold for the sliding-window counters, in process and on
// Redis. Every wait here is whole milliseconds, so that both agree to the
// nanosecond.
var counterScenarios = []scenario{
	{
		name: "the previous window weighs its share still in the span", limit: 4, period: 10 * time.Second,
		steps: []step{
			{0, "k", 2, ok(4, 2, 20*time.Second), nil},
			{10 * time.Second, "k", 2, ok(4, 0, 20*time.Second), nil}, // prev 2 weighs 2
			{0, "k", 1, no(4, 0, 5*time.Second, 20*time.Second), nil}, // until prev weighs 1
			{5 * time.Second, "k", 1, ok(4, 0, 15*time.Second), nil},
			{2500 * ms, "k", 0, ok(4, 0, 12500*ms), nil},  // ⌈2 × 1/4⌉ = 1
			{0, "k", 1, no(4, 0, 2500*ms, 12500*ms), nil}, // the next window, where 3 weigh 3
			{2500 * ms, "k", 1, ok(4, 0, 20*time.Second), nil},
			{20 * time.Second, "k", 0, ok(4, 4, 0), nil},
		},
	},
	{
		name: "a key holds nothing two windows after its start", limit: 2, period: 10 * time.Second,
		steps: []step{
			{0, "k", 1, ok(2, 1, 20*time.Second), nil},
			{15 * time.Second, "k", 0, ok(2, 1, 5*time.Second), nil},
			{5 * time.Second, "k", 0, ok(2, 2, 0), nil},
			{0, "k", 2, ok(2, 0, 20*time.Second), nil},
		},
	},
	{
		name: "a denial waits into the next window", limit: 3, period: 9 * time.Second,
		steps: []step{
			{0, "k", 3, ok(3, 0, 18*time.Second), nil},
			{time.Second, "k", 1, no(3, 0, 11*time.Second, 17*time.Second), nil}, // until ⌈3 × 6/9⌉ = 2
			{11 * time.Second, "k", 1, ok(3, 0, 15*time.Second), nil},
			{0, "k", 3, no(3, 0, 15*time.Second, 15*time.Second), nil}, // the whole limit: until the key is empty
		},
	},
	{
		name: "invalid and impossible costs change nothing", limit: 3, period: 10 * time.Second,
		steps: []step{
			{0, "k", -1, Result{Limit: 3}, ErrInvalidCost},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{0, "k", 0, ok(3, 3, 0), nil},
			{0, "k", 3, ok(3, 0, 20*time.Second), nil},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{0, "k", 3, no(3, 0, 20*time.Second, 20*time.Second), nil},
		},
	},
	{
		name: "keys are independent", limit: 2, period: 10 * time.Second,
		steps: []step{
			{0, "a", 2, ok(2, 0, 20*time.Second), nil},
			{time.Second, "b", 1, ok(2, 1, 20*time.Second), nil},
			{0, "a", 1, no(2, 0, 14*time.Second, 19*time.Second), nil},
			{0, "b", 1, ok(2, 0, 20*time.Second), nil},
		},
	},
	{
		name: "a clock going backwards frees nothing early", limit: 2, period: 10 * time.Second,
		steps: []step{
			{0, "k", 2, ok(2, 0, 20*time.Second), nil},
			{-time.Hour, "k", 1, no(2, 0, time.Hour+15*time.Second, time.Hour+20*time.Second), nil},
			{time.Hour, "k", 1, no(2, 0, 15*time.Second, 20*time.Second), nil},
			{15 * time.Second, "k", 1, ok(2, 0, 15*time.Second), nil},
		},
	},
}

// calendarScenarios hold for the calendar windows, in process and on
// Redis, from epoch, the start of a minute, an hour and a day.
var calendarScenarios = []scenario{
	{
		name: "counts up to the limit in the minute open now", limit: 3, period: time.Minute,
		steps: []step{
			{0, "k", 1, ok(3, 2, time.Minute), nil},
			{0, "k", 2, ok(3, 0, time.Minute), nil},
			{20 * time.Second, "k", 1, no(3, 0, 40*time.Second, 40*time.Second), nil},
			{40*time.Second - ms, "k", 1, no(3, 0, ms, ms), nil},
			{ms, "k", 1, ok(3, 2, time.Minute), nil},
		},
	},
	{
		name: "the window is the calendar's, whenever the first request came", limit: 3, period: time.Minute,
		steps: []step{
			{30 * time.Second, "k", 0, ok(3, 3, 0), nil},
			{0, "k", 1, ok(3, 2, 30*time.Second), nil},
			{30 * time.Second, "k", 3, ok(3, 0, time.Minute), nil},
		},
	},
	{
		name: "invalid and impossible costs change nothing", limit: 3, period: time.Minute,
		steps: []step{
			{0, "k", -1, Result{Limit: 3}, ErrInvalidCost},
			{0, "k", 4, Result{Limit: 3}, ErrCostExceedsLimit},
			{0, "k", 0, ok(3, 3, 0), nil},
			{0, "k", 3, ok(3, 0, time.Minute), nil},
			{0, "k", 1, no(3, 0, time.Minute, time.Minute), nil},
		},
	},
	{
		name: "every key resets at the same boundary", limit: 3, period: time.Minute,
		steps: []step{
			{0, "a", 3, ok(3, 0, time.Minute), nil},
			{10 * time.Second, "b", 1, ok(3, 2, 50*time.Second), nil},
			{50 * time.Second, "a", 1, ok(3, 2, time.Minute), nil},
			{0, "b", 0, ok(3, 3, 0), nil},
		},
	},
	{
		name: "an hour", limit: 2, period: time.Hour,
		steps: []step{
			{59 * time.Minute, "k", 2, ok(2, 0, time.Minute), nil},
			{0, "k", 1, no(2, 0, time.Minute, time.Minute), nil},
			{time.Minute, "k", 2, ok(2, 0, time.Hour), nil},
		},
	},
	{
		name: "a clock going backwards opens no window again", limit: 3, period: time.Minute,
		steps: []step{
			{0, "k", 3, ok(3, 0, time.Minute), nil},
			{-time.Hour, "k", 1, no(3, 0, time.Hour+time.Minute, time.Hour+time.Minute), nil},
			{time.Hour, "k", 1, no(3, 0, time.Minute, time.Minute), nil},
			{time.Minute, "k", 1, ok(3, 2, time.Minute), nil},
		},
	},
}
