package ratelimit

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// The tests of Wait's loop run waitWith on a waitFakeTime: its sleeps return
// at once and only move a fake clock, so no test sleeps for real.

// waitAnswer is one scripted answer of a waitScript.
type waitAnswer struct {
	res Result
	err error
}

// waitScript is a Limiter that gives its answers in order and records the
// key and cost of each call. A call past the end of the script fails the test.
type waitScript struct {
	t       *testing.T
	answers []waitAnswer
	keys    []string
	costs   []int
}

func (s *waitScript) Allow(_ context.Context, key string, n int) (Result, error) {
	s.keys = append(s.keys, key)
	s.costs = append(s.costs, n)
	i := len(s.keys) - 1
	if i >= len(s.answers) {
		s.t.Errorf("Allow called %d times, the script has %d answers", i+1, len(s.answers))
		return Result{}, errors.New("script exhausted")
	}
	return s.answers[i].res, s.answers[i].err
}

// calls returns how many times Allow was called.
func (s *waitScript) calls() int { return len(s.keys) }

// waitDenied returns a denial that asks to retry after d.
func waitDenied(d time.Duration) waitAnswer {
	return waitAnswer{res: Result{Limit: 5, RetryAfter: d, ResetAfter: 2 * d}}
}

// waitAllowed is an answer that allows the request.
var waitAllowed = waitAnswer{res: Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: time.Second}}

// waitFakeTime is a fake waitTime. Each sleep is recorded and moves the clock
// at once, unless block is set: then the sleep reports itself on block and
// waits for ctx to be done. Each jitter bound asked is recorded, and the
// jitter returned is the bound when atMax is set, 0 otherwise.
type waitFakeTime struct {
	now    time.Time
	sleeps []time.Duration
	bounds []time.Duration
	atMax  bool
	block  chan time.Duration
}

func newWaitFakeTime() *waitFakeTime { return &waitFakeTime{now: epoch} }

func (f *waitFakeTime) waitTime() waitTime {
	return waitTime{
		fraction: defaultJitterFraction, maxJitter: defaultMaxJitter,
		now: func() time.Time { return f.now },
		sleep: func(ctx context.Context, d time.Duration) error {
			f.sleeps = append(f.sleeps, d)
			if f.block != nil {
				f.block <- d
				<-ctx.Done()
				return ctx.Err()
			}
			f.now = f.now.Add(d)
			return nil
		},
		jitter: func(bound time.Duration) time.Duration {
			f.bounds = append(f.bounds, bound)
			if f.atMax {
				return bound
			}
			return 0
		},
	}
}

// waitDeadlineContext is a context whose deadline is fixed on the fake clock
// and never fires by itself.
type waitDeadlineContext struct {
	context.Context
	deadline time.Time
}

func (c waitDeadlineContext) Deadline() (time.Time, bool) { return c.deadline, true }

// withFakeDeadline returns a context whose deadline is d after epoch.
func withFakeDeadline(d time.Duration) context.Context {
	return waitDeadlineContext{Context: context.Background(), deadline: epoch.Add(d)}
}

func TestWaitSleepsRetryAfterBetweenTries(t *testing.T) {
	l := &waitScript{t: t, answers: []waitAnswer{waitDenied(200 * time.Millisecond), waitDenied(50 * time.Millisecond), waitAllowed}}
	ft := newWaitFakeTime()

	res, err := waitWith(context.Background(), l, "user:7", 3, ft.waitTime())
	require.NoError(t, err)
	assert.Equal(t, waitAllowed.res, res)
	assert.Equal(t, []time.Duration{200 * time.Millisecond, 50 * time.Millisecond}, ft.sleeps)
	assert.Equal(t, []string{"user:7", "user:7", "user:7"}, l.keys)
	assert.Equal(t, []int{3, 3, 3}, l.costs)
}

func TestWaitDoesNotSleepWhenAllowedAtOnce(t *testing.T) {
	l := &waitScript{t: t, answers: []waitAnswer{waitAllowed}}
	ft := newWaitFakeTime()

	res, err := waitWith(withFakeDeadline(time.Nanosecond), l, "k", 1, ft.waitTime())
	require.NoError(t, err)
	assert.Equal(t, waitAllowed.res, res)
	assert.Empty(t, ft.sleeps)
	assert.Empty(t, ft.bounds)
}

func TestWaitJitterIsUpToATenthOfTheWaitAndAtMost250ms(t *testing.T) {
	tests := []struct {
		name       string
		retryAfter time.Duration
		wantBound  time.Duration
	}{
		{"a tenth of a short wait", time.Second, 100 * time.Millisecond},
		{"a tenth of 2.5 s is exactly the cap", 2500 * time.Millisecond, 250 * time.Millisecond},
		{"capped on a long wait", 10 * time.Second, 250 * time.Millisecond},
		{"capped on a wait of an hour", time.Hour, 250 * time.Millisecond},
		{"a tenth of a wait of nanoseconds", 1234567 * time.Nanosecond, 123456 * time.Nanosecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, atMax := range []bool{false, true} {
				l := &waitScript{t: t, answers: []waitAnswer{waitDenied(tt.retryAfter), waitAllowed}}
				ft := newWaitFakeTime()
				ft.atMax = atMax

				_, err := waitWith(context.Background(), l, "k", 1, ft.waitTime())
				require.NoError(t, err)
				assert.Equal(t, []time.Duration{tt.wantBound}, ft.bounds)
				want := tt.retryAfter
				if atMax {
					want += tt.wantBound
				}
				assert.Equal(t, []time.Duration{want}, ft.sleeps, "jitter at its max: %v", atMax)
			}
		})
	}
}

func TestWaitSleepsAtLeastAMillisecondOnANonPositiveRetryAfter(t *testing.T) {
	l := &waitScript{t: t, answers: []waitAnswer{waitDenied(0), waitDenied(-5 * time.Second), waitDenied(time.Nanosecond), waitAllowed}}
	ft := newWaitFakeTime()
	ft.atMax = true

	res, err := waitWith(context.Background(), l, "k", 1, ft.waitTime())
	require.NoError(t, err)
	assert.Equal(t, waitAllowed.res, res)
	assert.Equal(t, []time.Duration{100 * time.Microsecond, 100 * time.Microsecond, 100 * time.Microsecond}, ft.bounds)
	want := time.Millisecond + 100*time.Microsecond
	assert.Equal(t, []time.Duration{want, want, want}, ft.sleeps)
}

func TestWaitGivesUpAtOnceWhenTheDeadlineComesBeforeRetryAfter(t *testing.T) {
	denial := waitDenied(time.Second)
	l := &waitScript{t: t, answers: []waitAnswer{denial}}
	ft := newWaitFakeTime()

	res, err := waitWith(withFakeDeadline(999*time.Millisecond), l, "k", 1, ft.waitTime())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, denial.res, res)
	assert.Empty(t, ft.sleeps)
	assert.Equal(t, 1, l.calls())
}

func TestWaitGivesUpWhenTheTimeAlreadySpentLeavesTooLittle(t *testing.T) {
	second := waitDenied(600 * time.Millisecond)
	l := &waitScript{t: t, answers: []waitAnswer{waitDenied(600 * time.Millisecond), second}}
	ft := newWaitFakeTime()

	res, err := waitWith(withFakeDeadline(time.Second), l, "k", 1, ft.waitTime())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, second.res, res)
	assert.Equal(t, []time.Duration{600 * time.Millisecond}, ft.sleeps)
}

func TestWaitCapsTheSleepAtTheTimeLeftBeforeTheDeadline(t *testing.T) {
	tests := []struct {
		name      string
		deadline  time.Duration
		wantSleep time.Duration
	}{
		{"the deadline falls inside the jitter", 1050 * time.Millisecond, 1050 * time.Millisecond},
		{"the deadline is exactly RetryAfter", time.Second, time.Second},
		{"the deadline is past the jitter", 2 * time.Second, 1100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &waitScript{t: t, answers: []waitAnswer{waitDenied(time.Second), waitAllowed}}
			ft := newWaitFakeTime()
			ft.atMax = true

			res, err := waitWith(withFakeDeadline(tt.deadline), l, "k", 1, ft.waitTime())
			require.NoError(t, err)
			assert.Equal(t, waitAllowed.res, res)
			assert.Equal(t, []time.Duration{tt.wantSleep}, ft.sleeps)
		})
	}
}

func TestWaitReturnsWhenTheContextIsCancelledDuringASleep(t *testing.T) {
	denial := waitDenied(time.Hour)
	l := &waitScript{t: t, answers: []waitAnswer{denial}}
	ft := newWaitFakeTime()
	ft.block = make(chan time.Duration)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	type outcome struct {
		res Result
		err error
	}
	done := make(chan outcome)
	go func() {
		res, err := waitWith(ctx, l, "k", 1, ft.waitTime())
		done <- outcome{res, err}
	}()
	assert.Equal(t, time.Hour, <-ft.block)
	cancel()
	got := <-done

	require.ErrorIs(t, got.err, context.Canceled)
	assert.Equal(t, denial.res, got.res)
	assert.Equal(t, 1, l.calls())
}

func TestWaitReturnsTheErrorOfAFailingTryAtOnce(t *testing.T) {
	boom := errors.New("backend down")
	failure := waitAnswer{res: Result{Limit: 5}, err: boom}
	l := &waitScript{t: t, answers: []waitAnswer{waitDenied(300 * time.Millisecond), failure}}
	ft := newWaitFakeTime()

	res, err := waitWith(context.Background(), l, "k", 1, ft.waitTime())
	require.ErrorIs(t, err, boom)
	assert.Equal(t, failure.res, res)
	assert.Equal(t, []time.Duration{300 * time.Millisecond}, ft.sleeps)
}

// The tests below run the real Wait; none of them sleeps.

func TestWaitRejectsANilContextWithoutCallingTheLimiter(t *testing.T) {
	l := &waitScript{t: t}
	var ctx context.Context // nil
	res, err := Wait(ctx, l, "k", 1)
	require.ErrorIs(t, err, errNilContext)
	assert.Equal(t, Result{}, res)
	assert.Equal(t, 0, l.calls())
}

func TestWaitRejectsANilLimiter(t *testing.T) {
	tests := []struct {
		name string
		l    Limiter
	}{
		{"nil interface", nil},
		{"nil *TokenBucket", (*TokenBucket)(nil)},
		{"nil pointer to a stub", (*waitScript)(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Wait(context.Background(), tt.l, "k", 1)
			require.ErrorIs(t, err, errNilLimiter)
			require.ErrorIs(t, err, ErrInvalidConfig)
			require.ErrorIs(t, err, ErrCaller)
			assert.EqualError(t, err, "ratelimit: invalid configuration: Wait: nil limiter")
			assert.Equal(t, Result{}, res)
		})
	}
}

func TestWaitReturnsAtOnceWhenAllowed(t *testing.T) {
	l, err := NewTokenBucket(PerSecond(1), 2)
	require.NoError(t, err)
	res, err := Wait(context.Background(), l, "k", 2)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Equal(t, 0, res.Remaining)
}

func TestWaitReturnsAtOnceWhenTheCostCanNeverSucceed(t *testing.T) {
	l, err := NewTokenBucket(PerSecond(1), 2)
	require.NoError(t, err)
	res, err := Wait(context.Background(), l, "k", 3)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	assert.False(t, res.Allowed)
	_, err = Wait(context.Background(), l, "k", -1)
	require.ErrorIs(t, err, ErrInvalidCost)
}

func TestWaitGivesUpAtOnceOnARealDeadlineBeforeRetryAfter(t *testing.T) {
	l, err := NewTokenBucket(Every(10000*time.Second), 1) // one token every 10,000 s, past the hour allowed
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k", 1)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	res, err := Wait(ctx, l, "k", 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, res.Allowed)
}

// waitOnGCRA runs a single worker that Waits for calls one-unit tries, with
// opts, on a GCRA of 1 per 200 ms (5 per second, a burst of 1, so that no
// late call is made up for) whose clock is ft's, and returns the fake time
// the calls took after the first (allowed at once).
func waitOnGCRA(t *testing.T, ft *waitFakeTime, calls int, opts ...WaitOption) time.Duration {
	t.Helper()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewGCRA(1, 200*time.Millisecond, WithClock(clock))
	require.NoError(t, err)
	wt, err := ft.waitTime().with(opts)
	require.NoError(t, err)
	sleep := wt.sleep
	wt.sleep = func(ctx context.Context, d time.Duration) error {
		clock.Advance(d)
		return sleep(ctx, d)
	}
	_, err = waitWith(context.Background(), l, "worker", 1, wt)
	require.NoError(t, err)
	start := ft.now
	for range calls {
		res, err := waitWith(context.Background(), l, "worker", 1, wt)
		require.NoError(t, err)
		require.True(t, res.Allowed)
	}
	return ft.now.Sub(start)
}

func TestWaitWithoutJitterGivesASingleWorkerExactlyTheLimitersRate(t *testing.T) {
	ft := newWaitFakeTime()
	ft.atMax = true // a jitter asked for would be its largest

	took := waitOnGCRA(t, ft, 1000, WithoutJitter())
	assert.Equal(t, 200*time.Second, took, "1,000 calls at 5 per second")
	assert.Empty(t, ft.bounds, "no jitter asked for")
	for _, d := range ft.sleeps {
		assert.Equal(t, 200*time.Millisecond, d)
	}
}

func TestWaitWithTheDefaultJitterSleepsUpToATenthLongerAsBefore(t *testing.T) {
	for _, opts := range [][]WaitOption{nil, {WithJitter(0.1, 250*time.Millisecond)}} {
		ft := newWaitFakeTime()
		ft.atMax = true // each jitter is its bound

		took := waitOnGCRA(t, ft, 1000, opts...)
		assert.Equal(t, 220*time.Second, took, "each 200 ms sleep 20 ms longer, options %v", opts)
		assert.Len(t, ft.bounds, 1000)
		for _, b := range ft.bounds {
			assert.Equal(t, 20*time.Millisecond, b)
		}
	}
}

func TestWaitWithJitterBoundsEachSleepByItsFractionAndMax(t *testing.T) {
	l := &waitScript{t: t, answers: []waitAnswer{waitDenied(200 * time.Millisecond), waitDenied(time.Second), waitAllowed}}
	ft := newWaitFakeTime()
	ft.atMax = true
	wt, err := ft.waitTime().with([]WaitOption{WithJitter(0.5, 300*time.Millisecond)})
	require.NoError(t, err)

	_, err = waitWith(context.Background(), l, "k", 1, wt)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{100 * time.Millisecond, 300 * time.Millisecond}, ft.bounds)
	assert.Equal(t, []time.Duration{300 * time.Millisecond, 1300 * time.Millisecond}, ft.sleeps)
}

func TestWaitTheLastJitterOptionWins(t *testing.T) {
	wt, err := systemWaitTime.with([]WaitOption{WithoutJitter(), WithJitter(1, time.Second)})
	require.NoError(t, err)
	assert.Equal(t, time.Second, wt.jitterBound(time.Hour))
	wt, err = systemWaitTime.with([]WaitOption{WithJitter(1, time.Second), WithoutJitter()})
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), wt.jitterBound(time.Hour))
}

func TestWaitJitterBoundDoesNotOverflowOnTheLongestWait(t *testing.T) {
	wt, err := systemWaitTime.with([]WaitOption{WithJitter(1, time.Duration(math.MaxInt64))})
	require.NoError(t, err)
	assert.Equal(t, time.Duration(math.MaxInt64), wt.jitterBound(time.Duration(math.MaxInt64)))
	assert.Equal(t, time.Hour, wt.jitterBound(time.Hour))
}

func TestWaitRefusesABadJitterByNameWithoutCallingTheLimiter(t *testing.T) {
	tests := []struct {
		name string
		opt  WaitOption
		want string
	}{
		{"a zero fraction", WithJitter(0, time.Second), "WithJitter's fraction 0 must be in (0, 1]"},
		{"a negative fraction", WithJitter(-0.1, time.Second), "WithJitter's fraction -0.1 must be in (0, 1]"},
		{"a fraction above 1", WithJitter(1.5, time.Second), "WithJitter's fraction 1.5 must be in (0, 1]"},
		{"a NaN fraction", WithJitter(math.NaN(), time.Second), "WithJitter's fraction NaN must be in (0, 1]"},
		{"an infinite fraction", WithJitter(math.Inf(1), time.Second), "WithJitter's fraction +Inf must be in (0, 1]"},
		{"a zero max", WithJitter(0.1, 0), "WithJitter's maxJitter 0s must be > 0"},
		{"a negative max", WithJitter(0.1, -time.Second), "WithJitter's maxJitter -1s must be > 0"},
		{"a zero WaitOption", WaitOption{}, "a zero WaitOption"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := &waitScript{t: t}
			res, err := Wait(context.Background(), l, "k", 1, WithoutJitter(), tt.opt)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.want)
			assert.Equal(t, Result{}, res)
			assert.Equal(t, 0, l.calls())
		})
	}
}

func TestLimiterOptionsDoNotCompileInWait(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("type-checks the package")
	}
	calls := []string{
		`ratelimit.Wait(nil, nil, "k", 1)`,
		`ratelimit.Wait(nil, nil, "k", 1, ratelimit.WithoutJitter(), ratelimit.WithJitter(0.2, time.Second))`,
		`ratelimit.Wait(nil, nil, "k", 1, ratelimit.WithName("n"))`,
		`ratelimit.Wait(nil, nil, "k", 1, ratelimit.WithKeyPrefix("x:"))`,
	}
	errs := typeErrors(t, calls)
	assert.Empty(t, errs[0], calls[0])
	assert.Empty(t, errs[1], calls[1])
	assert.NotEmpty(t, errs[2], calls[2])
	assert.NotEmpty(t, errs[3], calls[3])
}
