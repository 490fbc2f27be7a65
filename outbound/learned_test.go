package outbound

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTighterAllowsNoMoreThanEitherPolicy(t *testing.T) {
	sec := time.Second
	for _, tc := range []struct {
		name      string
		a, b, out ratelimit.Policy
	}{
		{"the same", ratelimit.Policy{Limit: 10, Window: sec}, ratelimit.Policy{Limit: 10, Window: sec}, ratelimit.Policy{Limit: 10, Window: sec}},
		{"a slower rate, same window", ratelimit.Policy{Limit: 10, Window: sec}, ratelimit.Policy{Limit: 5, Window: sec}, ratelimit.Policy{Limit: 5, Window: sec}},
		{"a slower rate over a longer window keeps the smaller limit", ratelimit.Policy{Limit: 10, Window: sec}, ratelimit.Policy{Limit: 300, Window: 60 * sec}, ratelimit.Policy{Limit: 10, Window: 2 * sec}},
		{"a smaller limit at a faster rate keeps the slower rate", ratelimit.Policy{Limit: 10, Window: sec}, ratelimit.Policy{Limit: 4, Window: 100 * time.Millisecond}, ratelimit.Policy{Limit: 4, Window: 400 * time.Millisecond}},
		{"a larger policy changes nothing", ratelimit.Policy{Limit: 10, Window: sec}, ratelimit.Policy{Limit: 1000, Window: sec}, ratelimit.Policy{Limit: 10, Window: sec}},
		{"the zero policy changes nothing", ratelimit.Policy{Limit: 10, Window: sec}, ratelimit.Policy{}, ratelimit.Policy{Limit: 10, Window: sec}},
		{"from the zero policy", ratelimit.Policy{}, ratelimit.Policy{Limit: 3, Window: sec}, ratelimit.Policy{Limit: 3, Window: sec}},
		{"a window rounded up", ratelimit.Policy{Limit: 2, Window: sec}, ratelimit.Policy{Limit: 3, Window: 2 * sec}, ratelimit.Policy{Limit: 2, Window: 1333333334}},
		{"huge numbers do not overflow", ratelimit.Policy{Limit: math.MaxInt, Window: math.MaxInt64}, ratelimit.Policy{Limit: math.MaxInt - 1, Window: math.MaxInt64}, ratelimit.Policy{Limit: math.MaxInt - 1, Window: math.MaxInt64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.out, tighter(tc.a, tc.b))
			assert.Equal(t, tc.out, tighter(tc.b, tc.a), "in either order")
		})
	}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	ft := newFakeTime()
	learning := newLearningGCRA(t, ft, 10, time.Second)
	plain, err := ratelimit.NewGCRA(10, time.Second)
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		limiter ratelimit.Limiter
		cfg     Config
		want    string
	}{
		{"a nil limiter", nil, Config{}, "nil limiter"},
		{"a typed nil limiter", (*ratelimit.GCRA)(nil), Config{}, "nil limiter"},
		{"a limiter that does not read LearnedPolicy", plain, Config{}, "WithPolicyFunc(outbound.LearnedPolicy)"},
		{"a negative MaxPause", learning, Config{MaxPause: -1}, "MaxPause"},
		{"a negative Forget", learning, Config{Forget: -1}, "Forget"},
		{"a negative LimitedPause", learning, Config{LimitedPause: -1}, "LimitedPause"},
		{"a nil parser", learning, Config{Parsers: []Parser{IETFFields, nil}}, "Parsers[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.limiter, tc.cfg)
			require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	_, err = New(plain, Config{IgnorePolicies: true})
	assert.NoError(t, err, "a limiter that learns pauses only")
}

func TestAStatedLimitLowersTheLimiterUntilItIsForgotten(t *testing.T) {
	ft := newFakeTime()
	store := NewMemoryStore(ft.clock)
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 10, time.Second), Config{Store: store, MaxWait: -1, Forget: time.Minute})
	ctx := context.Background()
	learn(t, store, ctx, "api", ratelimit.Policy{Limit: 4, Window: time.Second}, time.Minute)

	assert.Equal(t, 4, burst(t, u, "api"), "the stated 4 per second")
	ft.clock.Advance(time.Minute)
	assert.Equal(t, 10, burst(t, u, "api"), "forgotten after a minute: the limiter's own")
}

func TestAStatedLimitAboveTheLimitersOwnNeverRaisesIt(t *testing.T) {
	ft := newFakeTime()
	store := NewMemoryStore(ft.clock)
	u, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 10, time.Second), Config{Store: store, MaxWait: -1})
	learn(t, store, context.Background(), "api", ratelimit.Policy{Limit: 1000, Window: time.Second}, time.Minute)
	assert.Equal(t, 10, burst(t, u, "api"))
}

// burst returns how many calls u, which never waits, admits at once in
// partition.
func burst(t *testing.T, u *Upstream, partition string) int {
	t.Helper()
	n := 0
	for ; n < 10_000; n++ {
		if _, err := u.Admit(context.Background(), partition, 1); err != nil {
			require.ErrorIs(t, err, ErrLimited)
			break
		}
	}
	return n
}

func TestLearnedPolicyTellsTheLimitersOwnOutsideAnUpstream(t *testing.T) {
	p, err := LearnedPolicy(context.Background(), "api")
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Policy{}, p)
}

func TestNewRefusesToLearnALimitForALimiterOfCallsInFlight(t *testing.T) {
	c, err := ratelimit.NewConcurrency(5, time.Minute, ratelimit.WithPolicyFunc(LearnedPolicy))
	require.NoError(t, err)
	_, err = New(c, Config{})
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.ErrorContains(t, err, "IgnorePolicies")
	_, err = New(c, Config{IgnorePolicies: true})
	assert.NoError(t, err)
}

func TestNewRefusesToLearnForACalendarWindow(t *testing.T) {
	cal, err := ratelimit.NewCalendarWindow(100, ratelimit.Calendar{Period: ratelimit.CalendarDay}, ratelimit.WithPolicyFunc(LearnedPolicy))
	require.NoError(t, err)
	_, err = New(cal, Config{})
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.ErrorContains(t, err, "IgnorePolicies")
	_, err = New(cal, Config{IgnorePolicies: true})
	assert.NoError(t, err)
}

func TestUpstreamsOfCallsAndOfTokensNeverReadEachOthersLimitsThroughOneStore(t *testing.T) {
	ft := newFakeTime()
	store := NewMemoryStore(ft.clock)
	calls, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 100, time.Minute), Config{Store: store, MaxWait: -1})
	tokens, _ := newTestUpstream(t, ft, newLearningGCRA(t, ft, 90000, time.Minute), Config{Store: store, MaxWait: -1, Unit: "tokens"})
	ctx := context.Background()
	stated := answer(200, ft.clock.Now(), "RateLimit-Policy", `"rpm";q=10;w=60, "tpm";q=9000;w=60;qu="tokens"`)
	for _, u := range []*Upstream{calls, tokens} {
		p, err := u.Admit(ctx, "api", 1)
		require.NoError(t, err)
		u.Observe(ctx, p, stated)
	}
	st, err := store.Load(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Policy{Limit: 10, Window: time.Minute}, st.Policy)
	st, err = store.Load(ctx, "api qu=tokens")
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Policy{Limit: 9000, Window: time.Minute}, st.Policy)

	_, err = New(newLearningGCRA(t, ft, 1, time.Second), Config{Unit: "my tokens"})
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, err = New(newLearningGCRA(t, ft, 1, time.Second), Config{Unit: "requests"})
	require.NoError(t, err)
}
