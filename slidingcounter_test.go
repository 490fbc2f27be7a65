package ratelimit

import (
	"context"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSlidingCounterMatchesTheModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(24, 2))
	for round := 0; round < sized(20, 80); round++ {
		limit := 1 + r.IntN(10)
		window := time.Duration(1+r.Int64N(5000)) * time.Millisecond
		// The clock steps back only in runs on one key (see
		// randomSchedule).
		back := round%2 == 0
		keys := []string{"a", "b", "c"}
		if back {
			keys = keys[:1]
		}
		clock := ratelimittest.NewClock(epoch)
		l, err := NewSlidingCounter(limit, window, WithClock(clock))
		require.NoError(t, err)
		model := newCounterModel(limit, window, 1)
		for i, c := range randomSchedule(r, 300, limit, window/time.Duration(limit), back, keys...) {
			clock.Advance(c.advance)
			model.advance(c.advance)
			want := model.allow(c.key, c.n)
			got, err := l.Allow(context.Background(), c.key, c.n)
			require.Equal(t, c.n > limit, err != nil, "%v", err)
			require.Equal(t, want, got, "round %d step %d: %d per %v, %+v", round, i, limit, window, c)
		}
	}
}

// taken is a unit count allowed at a time, for a brute-force sliding count.
type taken struct{ at, n int64 }

// sumIn returns the units of log taken in (from, to].
func sumIn(log []taken, from, to int64) int64 {
	var sum int64
	for _, x := range log {
		if x.at > from && x.at <= to {
			sum += x.n
		}
	}
	return sum
}

// checkCounterBound checks the documented error bound of a sliding-window
// counter against a brute-force sliding count on random schedules of one
// key, l deciding at the times advance moves to (from epoch):
//
//   - an allowed call of n at now finds S + n <= L + ⌊prev × e / W⌋ <= 2L − 1
//     (S + n <= L when prev is 0), S being the units taken in
//     (now − W, now] before it, prev and e the previous window's units and
//     the time since the window open now started, as the model has them;
//   - a denied call of n at now that a sliding log would allow (S + n <= L)
//     finds q < ⌈prev × (W − e) / W⌉, q being the previous window's units
//     in the span (those taken in (now − W, start)).
//
// unit is the grid of the limiter's waits: 1 ns in process, 1 µs on Redis.
func checkCounterBound(t *testing.T, r *rand.Rand, rounds int, unit time.Duration, newLimiter func(t *testing.T, limit int, window time.Duration) (Limiter, func(time.Duration))) {
	var generous, strict int
	for round := 0; round < rounds; round++ {
		limit := 1 + r.IntN(12)
		window := time.Duration(1+r.Int64N(3000)) * time.Millisecond
		l, advance := newLimiter(t, limit, window)
		model := newCounterModel(limit, window, unit)
		L, W := int64(limit), int64(window)
		var log []taken
		for i, c := range randomSchedule(r, 200, limit, window/time.Duration(limit), false, "k") {
			c.advance = c.advance.Truncate(time.Microsecond)
			advance(c.advance)
			model.advance(c.advance)
			now := model.now
			k, _ := model.state("k", now)
			e := now - k.start
			S := sumIn(log, now-W, now)
			n := int64(c.n)
			got, err := l.Allow(context.Background(), "k", c.n)
			want := model.allow("k", c.n)
			if n > L {
				require.ErrorIs(t, err, ErrCostExceedsLimit)
				continue
			}
			require.NoError(t, err)
			require.Equal(t, want, got, "round %d step %d", round, i)
			msg := "round %d step %d: %d per %v, prev %d, e %v, S %d, n %d"
			if got.Allowed {
				bound := L + k.prev*e/W
				require.LessOrEqual(t, S+n, bound, msg, round, i, L, window, k.prev, e, S, n)
				if k.prev > 0 {
					require.Less(t, bound, L+k.prev, msg, round, i, L, window, k.prev, e, S, n)
					require.LessOrEqual(t, bound, 2*L-1, msg, round, i, L, window, k.prev, e, S, n)
				} else {
					require.LessOrEqual(t, S+n, L, msg, round, i, L, window, k.prev, e, S, n)
				}
				if S+n > L {
					generous++
				}
				if n > 0 {
					log = append(log, taken{now, n})
				}
			} else if S+n <= L {
				q := sumIn(log, now-W, k.start-1)
				weight := (k.prev*(W-e) + W - 1) / W
				require.Less(t, q, weight, msg, round, i, L, window, k.prev, e, S, n)
				strict++
			}
		}
	}
	// Both kinds of error happen on these schedules: the test checks them.
	assert.Positive(t, generous, "calls allowed beyond a sliding log's count")
	assert.Positive(t, strict, "calls denied that a sliding log allows")
}

func TestSlidingCounterStaysWithinItsErrorBound(t *testing.T) {
	t.Parallel()
	checkCounterBound(t, rand.New(rand.NewPCG(24, 3)), sized(20, 80), 1, func(t *testing.T, limit int, window time.Duration) (Limiter, func(time.Duration)) {
		clock := ratelimittest.NewClock(epoch)
		l, err := NewSlidingCounter(limit, window, WithClock(clock))
		require.NoError(t, err)
		return l, clock.Advance
	})
}

func TestSlidingCounterMemoryIsBoundedByActiveKeys(t *testing.T) {
	t.Parallel()
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingCounter(5, time.Second, WithClock(clock))
	require.NoError(t, err)
	ctx := context.Background()
	for i := 0; i < 10_000; i++ {
		_, err := l.Allow(ctx, "a:"+strconv.Itoa(i), 1)
		require.NoError(t, err)
	}
	assert.Equal(t, 10_000, l.keys.len())
	clock.Advance(4 * time.Second) // every key's estimate is 0
	for i := 0; i < 10_000; i++ {
		_, err := l.Allow(ctx, "b:"+strconv.Itoa(i), 1)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, l.keys.len(), 10_000)
	clock.Advance(4 * time.Second)
	for i := 0; i < 1000; i++ {
		_, err := l.Allow(ctx, "c:"+strconv.Itoa(i), 0)
		require.NoError(t, err)
	}
	assert.Equal(t, 0, l.keys.len(), "peeks create nothing, and keys whose estimate is 0 are gone")
}

func TestNewSlidingCounterRejectsBadConfig(t *testing.T) {
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
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := NewSlidingCounter(c.limit, c.window, c.opts...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), c.want)
			assert.Nil(t, l)
		})
	}
}

func TestSlidingCounterWithTheLargestNumbersDecidesExactly(t *testing.T) {
	t.Parallel()
	const L = math.MaxInt64
	W := time.Duration(maxSpan)
	clock := ratelimittest.NewClock(epoch)
	l, err := NewSlidingCounter(L, W, WithClock(clock))
	require.NoError(t, err)
	ctx := context.Background()
	got, err := l.Allow(ctx, "k", L-1)
	require.NoError(t, err)
	assert.Equal(t, ok(L, 1, 2*W), got)
	// In the next window, a quarter of it gone: the previous window weighs
	// ⌈(L−1) × 3/4⌉ exactly.
	clock.Advance(W + W/4)
	num := new(big.Int).Mul(big.NewInt(L-1), big.NewInt(int64(W-W/4)))
	num.Add(num, big.NewInt(int64(W)-1))
	weight := num.Quo(num, big.NewInt(int64(W))).Int64()
	got, err = l.Allow(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(L, int(L-weight), W-W/4), got)
	got, err = l.Allow(ctx, "k", L)
	require.NoError(t, err)
	assert.False(t, got.Allowed)
	assert.Equal(t, W-W/4, got.RetryAfter, "all of L fits once the previous window has left the span")
}
