package ratelimit

import (
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// calendarSubject makes a subject of a calendar window in UTC whose period
// is the scenario's period's (its nominal length), on a clock that starts
// at epoch, a boundary of every period.
func calendarSubject(name string, newLimiter func(limit int, cal Calendar, opts ...Option) (Limiter, error)) subject {
	return inProcessSubject(name, func(limit int, period time.Duration, opts ...Option) (Limiter, error) {
		return newLimiter(limit, Calendar{Period: periodOfNominal(period)}, opts...)
	})
}

// redisCalendarSubject makes a subject of a Redis calendar window on a
// miniredis whose time, and the client's clock, the test moves.
func redisCalendarSubject(name string, newLimiter func(client *redis.Client, limit int, cal Calendar, opts ...Option) (Limiter, error)) subject {
	return subject{name + "/miniredis", func(t *testing.T, limit int, period time.Duration, opts ...Option) (Limiter, func(time.Duration)) {
		_, client, advance := redistest.Miniredis(t, epoch)
		clock := ratelimittest.NewClock(epoch)
		l, err := newLimiter(client, limit, Calendar{Period: periodOfNominal(period)}, append(opts[:len(opts):len(opts)], WithClock(clock))...)
		require.NoError(t, err)
		return l, func(d time.Duration) {
			clock.Advance(d)
			advance(d)
		}
	}}
}

// calendarSubjects are the calendar windows: limit per minute or hour of
// the wall clock in UTC.
var calendarSubjects = []subject{
	calendarSubject("CalendarWindow", func(limit int, cal Calendar, opts ...Option) (Limiter, error) {
		return NewCalendarWindow(limit, cal, opts...)
	}),
	redisCalendarSubject("RedisCalendarWindow", func(client *redis.Client, limit int, cal Calendar, opts ...Option) (Limiter, error) {
		return NewRedisCalendarWindow(client, limit, cal, redisOpts(opts)...)
	}),
	// Built with another policy and a PolicyFunc that gives every key the
	// scenario's: they decide the same.
	calendarSubject("CalendarWindow/PolicyFunc", func(limit int, cal Calendar, opts ...Option) (Limiter, error) {
		return NewCalendarWindow(7, Calendar{Period: CalendarMonth}, append(opts, WithPolicyFunc(everyKey(limit, cal.Period.Nominal())))...)
	}),
	redisCalendarSubject("RedisCalendarWindow/PolicyFunc", func(client *redis.Client, limit int, cal Calendar, opts ...Option) (Limiter, error) {
		return NewRedisCalendarWindow(client, 7, Calendar{Period: CalendarMonth}, append(redisOpts(opts), WithPolicyFunc(everyKey(limit, cal.Period.Nominal())))...)
	}),
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

func TestCalendarScenarios(t *testing.T) {
	runScenarios(t, calendarSubjects, calendarScenarios)
}
