package ratelimit

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// windowModel is the reference fixed window: a count and an end per key, the
// definition written out plainly. Like the limiters, it lets time stand still
// while the clock reads earlier than the latest decision.
type windowModel struct {
	limit, window int64
	now, latest   int64
	windows       map[string]*modelWindow
}

type modelWindow struct{ end, count int64 }

func newWindowModel(limit int, window time.Duration) *windowModel {
	return &windowModel{limit: int64(limit), window: int64(window), windows: map[string]*modelWindow{}}
}

func (m *windowModel) advance(d time.Duration) { m.now += int64(d) }

func (m *windowModel) allow(key string, n int) Result {
	res := Result{Limit: int(m.limit)}
	if int64(n) > m.limit {
		return res
	}
	m.latest = max(m.latest, m.now)
	at, lag := m.latest, m.latest-m.now
	w, ok := m.windows[key]
	if !ok || w.end <= at {
		w = &modelWindow{}
		m.windows[key] = w
	}
	if w.count+int64(n) <= m.limit {
		res.Allowed = true
		if n > 0 && w.count == 0 {
			w.end = at + m.window
		}
		w.count += int64(n)
	}
	res.Remaining = int(m.limit - w.count)
	if w.count > 0 {
		res.ResetAfter = time.Duration(w.end - at + lag)
	}
	if !res.Allowed {
		res.RetryAfter = res.ResetAfter
	}
	return res
}

func TestFixedWindowsMatchTheModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 8))
	for round := 0; round < sized(5, 40); round++ {
		limit := 1 + r.IntN(10)
		window := time.Duration(1+r.Int64N(5000)) * time.Millisecond
		// The clock may step back only in runs on one key (see
		// randomSchedule); Redis expiry is in whole ms, so steps are too.
		back := round%2 == 0
		keys := []string{"a", "b", "c"}
		if back {
			keys = keys[:1]
		}
		clock := ratelimittest.NewClock(epoch)
		local, err := NewFixedWindow(limit, window, WithClock(clock))
		require.NoError(t, err)
		_, client, advance := miniredisClock(t)
		remote, err := NewRedisFixedWindow(client, limit, window)
		require.NoError(t, err)
		model := newWindowModel(limit, window)

		step := window / time.Duration(limit)
		for i, c := range randomSchedule(r, 300, limit, step, back, keys...) {
			c.advance = c.advance.Truncate(time.Millisecond)
			clock.Advance(c.advance)
			advance(c.advance)
			model.advance(c.advance)
			want := model.allow(c.key, c.n)
			for name, l := range map[string]Limiter{"FixedWindow": local, "RedisFixedWindow": remote} {
				if back && name == "RedisFixedWindow" {
					// A Redis window's time is its TTL, which a clock
					// stepping back lengthens rather than freezes.
					continue
				}
				got, err := l.Allow(context.Background(), c.key, c.n)
				require.Equal(t, c.n > limit, err != nil, "%s: %v", name, err)
				require.Equal(t, want, got, "%s round %d step %d: %d per %v, %+v", name, round, i, limit, window, c)
			}
		}
	}
}

func TestFixedWindowMemoryIsBoundedByOpenWindows(t *testing.T) {
	t.Parallel()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewFixedWindow(5, time.Second, WithClock(clock))
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 100_000; i++ {
		_, err := l.Allow(ctx, "a:"+strconv.Itoa(i), 1)
		require.NoError(t, err)
	}
	assert.Equal(t, 100_000, l.windows.len())
	clock.Advance(2 * time.Second) // every window has ended
	for i := 0; i < 100_000; i++ {
		_, err := l.Allow(ctx, "b:"+strconv.Itoa(i), 1)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, l.windows.len(), 100_000)
	clock.Advance(2 * time.Second)
	for i := 0; i < 1000; i++ {
		_, err := l.Allow(ctx, "c:"+strconv.Itoa(i), 0)
		require.NoError(t, err)
	}
	assert.Equal(t, 0, l.windows.len(), "peeks create nothing, and ended windows are gone")
}

func TestNewFixedWindowRejectsBadConfig(t *testing.T) {
	cases := []struct {
		name   string
		limit  int
		window time.Duration
		opts   []Option
		want   string
	}{
		{"zero limit", 0, time.Second, nil, "limit 0"},
		{"zero window", 1, 0, nil, "window 0s"},
		{"negative window", 1, -time.Second, nil, "window -1s"},
		{"window overflows", 1, 1 << 62, nil, "overflows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewFixedWindow(tc.limit, tc.window, tc.opts...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestFixedWindowWithTheLargestLimitNeverOverflows(t *testing.T) {
	// count + n would wrap around past MaxInt64 and allow.
	l, err := NewFixedWindow(math.MaxInt, time.Second, WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	ctx := context.Background()
	res, err := l.Allow(ctx, "k", math.MaxInt)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
	assert.Zero(t, res.Remaining)
	for _, n := range []int{1, math.MaxInt} {
		res, err = l.Allow(ctx, "k", n)
		require.NoError(t, err)
		assert.False(t, res.Allowed, "n = %d", n)
		assert.Equal(t, time.Second, res.RetryAfter)
	}
}
