package outbound

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAdmitWaitsExactlyForTheLimitersNextUnitWithoutJitter(t *testing.T) {
	ft := newFakeTime()
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 2, time.Second), Config{NoJitter: true})
	ctx := context.Background()
	for range 2 {
		_, err := u.Admit(ctx, "api", 1)
		require.NoError(t, err)
	}
	assert.Empty(t, ft.slept(), "a burst of 2 waits for nothing")
	assert.Empty(t, ev.of(Waited))

	p, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{500 * time.Millisecond}, ft.slept())
	assert.Equal(t, "api", p.Partition())
	assert.Equal(t, 1, p.Cost())
	waited := ev.of(Waited)
	require.Len(t, waited, 1)
	assert.Equal(t, 500*time.Millisecond, waited[0].Wait)
}

func TestAdmitLengthensEachSleepByAtMostATenthOfItAsJitter(t *testing.T) {
	ft := newFakeTime()
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{})
	ctx := context.Background()
	_, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	_, err = u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{time.Second + 100*time.Millisecond}, ft.slept(), "the fake jitter is its bound")
}

func TestAdmitRefusesAtOnceAWaitPastMaxWaitAndTakesNothing(t *testing.T) {
	ft := newFakeTime()
	g := newLearningGCRA(t, ft, 1, time.Second)
	u, ev := newTestUpstream(t, ft, g, Config{MaxWait: 999 * time.Millisecond})
	ctx := context.Background()
	_, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)

	_, err = u.Admit(ctx, "api", 1)
	require.ErrorIs(t, err, ErrLimited)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, ft.slept(), "no sleep in vain")
	refused := ev.of(Refused)
	require.Len(t, refused, 1)
	assert.ErrorIs(t, refused[0].Err, ErrLimited)

	ft.clock.Advance(time.Second)
	res, err := g.Allow(ctx, "api", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed, "the refused call took nothing")
}

func TestAdmitWithANegativeMaxWaitNeverWaits(t *testing.T) {
	ft := newFakeTime()
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{MaxWait: -1})
	ctx := context.Background()
	_, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	_, err = u.Admit(ctx, "api", 1)
	require.ErrorIs(t, err, ErrLimited)
	assert.Empty(t, ft.slept())
}

func TestAdmitRefusesAtOnceAWaitPastTheContextsDeadline(t *testing.T) {
	ft := newFakeTime()
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{})
	_, err := u.Admit(context.Background(), "api", 1)
	require.NoError(t, err)

	ctx, cancel := context.WithDeadline(context.Background(), ft.clock.Now().Add(500*time.Millisecond))
	defer cancel()
	_, err = u.Admit(ctx, "api", 1)
	require.ErrorIs(t, err, ErrLimited)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, ft.slept())
}

func TestAdmitsJitterNeverSleepsPastTheDeadline(t *testing.T) {
	ft := newFakeTime()
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{})
	_, err := u.Admit(context.Background(), "api", 1)
	require.NoError(t, err)

	ctx, cancel := context.WithDeadline(context.Background(), ft.clock.Now().Add(time.Second+30*time.Millisecond))
	defer cancel()
	_, err = u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{time.Second + 30*time.Millisecond}, ft.slept(), "the jitter is cut at the deadline")
}

func TestAdmitReturnsTheContextsErrorWhenCancelledDuringAWait(t *testing.T) {
	ft := newFakeTime()
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{})
	_, err := u.Admit(context.Background(), "api", 1)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	ft.onSleep = cancel
	_, err = u.Admit(ctx, "api", 1)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrLimited)
	assert.Len(t, ev.of(Refused), 1)
}

func TestAdmitWaitsForAPauseToEndBeforeAskingTheLimiter(t *testing.T) {
	ft := newFakeTime()
	store := NewMemoryStore(ft.clock)
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 10, time.Second), Config{Store: store, NoJitter: true})
	ctx := context.Background()
	require.NoError(t, store.Pause(ctx, "api", 2*time.Second))

	_, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{2 * time.Second}, ft.slept())
	_, err = u.Admit(ctx, "other", 1)
	require.NoError(t, err)
	assert.Len(t, ft.slept(), 1, "a pause holds one partition")
}

func TestAdmitPassesTheLimitersErrorOn(t *testing.T) {
	ft := newFakeTime()
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 2, time.Second), Config{})
	_, err := u.Admit(context.Background(), "api", 3)
	require.ErrorIs(t, err, ratelimit.ErrCostExceedsLimit)
	assert.NotErrorIs(t, err, ErrLimited)
	assert.Len(t, ev.of(Refused), 1)
}

// failingStore is a Store whose every method fails.
type failingStore struct{}

var errStoreDown = errors.New("store down")

func (failingStore) Load(context.Context, string) (State, error)        { return State{}, errStoreDown }
func (failingStore) Pause(context.Context, string, time.Duration) error { return errStoreDown }
func (failingStore) Learn(context.Context, string, ratelimit.Policy, time.Duration) (bool, error) {
	return false, errStoreDown
}

func TestAStoreThatFailsIsReportedAndTheLimiterStillHoldsTheBudget(t *testing.T) {
	ft := newFakeTime()
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{Store: failingStore{}, MaxWait: -1})
	ctx := context.Background()
	p, err := u.Admit(ctx, "api", 1)
	require.NoError(t, err)
	_, err = u.Admit(ctx, "api", 1)
	require.ErrorIs(t, err, ErrLimited)

	u.Observe(ctx, p, Answer{Status: 429, Header: map[string][]string{}, Now: ft.clock.Now()})
	failed := ev.of(StoreFailed)
	require.Len(t, failed, 3, "two loads and the pause")
	for _, e := range failed {
		assert.ErrorIs(t, e.Err, errStoreDown)
	}
}

func TestANilOrZeroUpstreamFailsWithoutPanicking(t *testing.T) {
	for _, u := range []*Upstream{nil, {}} {
		_, err := u.Admit(context.Background(), "api", 1)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		assert.Equal(t, Lesson{}, u.Observe(context.Background(), Permit{}, Answer{Status: 429}))
		require.ErrorIs(t, u.Settle(context.Background(), Permit{}, 1), ratelimit.ErrInvalidConfig)
	}
}

func TestAdmitsJitterNeverSleepsPastMaxWait(t *testing.T) {
	ft := newFakeTime()
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{MaxWait: time.Second + 30*time.Millisecond})
	_, err := u.Admit(context.Background(), "api", 1)
	require.NoError(t, err)
	_, err = u.Admit(context.Background(), "api", 1)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{time.Second + 30*time.Millisecond}, ft.slept(), "the jitter is cut at MaxWait")
}

func TestAdmitsLongestWaitsDoNotOverflow(t *testing.T) {
	ft := newFakeTime()
	store := NewMemoryStore(ft.clock)
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{Store: store, MaxWait: time.Duration(math.MaxInt64), MaxPause: time.Duration(math.MaxInt64)})
	require.NoError(t, store.Pause(context.Background(), "api", time.Duration(math.MaxInt64)-time.Hour))
	_, err := u.Admit(context.Background(), "api", 1)
	require.NoError(t, err)
	slept := ft.slept()
	require.Len(t, slept, 1)
	assert.Positive(t, slept[0])
}

func TestAdmitRefusesACostBelowOneThatWouldSendACallOutsideTheBudget(t *testing.T) {
	ft := newFakeTime()
	u, ev := newTestUpstream(t, ft, newLearningGCRA(t, ft, 1, time.Second), Config{MaxWait: -1})
	for _, cost := range []int{0, -1} {
		_, err := u.Admit(context.Background(), "api", cost)
		require.ErrorIs(t, err, ratelimit.ErrInvalidCost)
		assert.NotErrorIs(t, err, ErrLimited)
	}
	assert.Len(t, ev.of(Refused), 2)
	_, err := u.Admit(context.Background(), "api", 1)
	require.NoError(t, err, "the refused calls took nothing")
}
