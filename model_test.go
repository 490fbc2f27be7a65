package ratelimit

import (
	"context"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bucketModel is the reference token bucket: the textbook form with a token
// count and a last-refill time, in exact rational arithmetic, written for
// clarity rather than speed. It shares no code with the limiters.
type bucketModel struct {
	capacity int64
	interval int64 // ns per token
	now      int64 // ns; the clock's reading, which may go backwards
	buckets  map[string]*modelBucket
}

// modelBucket is one key's bucket: tokens at time last, the latest time the
// key was seen. A clock reading before last counts as last: time stands still
// for the key until the clock catches up.
type modelBucket struct {
	tokens *big.Rat
	last   int64
}

func newBucketModel(capacity int, interval time.Duration) *bucketModel {
	return &bucketModel{capacity: int64(capacity), interval: int64(interval), buckets: map[string]*modelBucket{}}
}

// advance moves the model's clock by d, backwards for a negative d.
func (m *bucketModel) advance(d time.Duration) {
	m.now += int64(d)
}

// tokens refills key's bucket to now and returns it.
func (m *bucketModel) bucket(key string) *modelBucket {
	b, ok := m.buckets[key]
	if !ok {
		// The limiter's creation, time 0, is the earliest time there is.
		b = &modelBucket{tokens: big.NewRat(m.capacity, 1), last: max(m.now, 0)}
		m.buckets[key] = b
	}
	if m.now <= b.last {
		return b
	}
	elapsed := big.NewRat(m.now-b.last, m.interval)
	b.tokens.Add(b.tokens, elapsed)
	if capacity := big.NewRat(m.capacity, 1); b.tokens.Cmp(capacity) > 0 {
		b.tokens = capacity
	}
	b.last = m.now
	return b
}

// allow decides n for key as an exact token bucket, with exact Result
// fields. An n above capacity changes nothing and says only the limit. When
// the clock is behind the key's last time, every wait includes the catching
// up.
func (m *bucketModel) allow(key string, n int) Result {
	res := Result{Limit: int(m.capacity)}
	if int64(n) > m.capacity {
		return res
	}
	b := m.bucket(key)
	lag := time.Duration(max(b.last-m.now, 0))
	want := big.NewRat(int64(n), 1)
	switch {
	case b.tokens.Cmp(want) >= 0:
		b.tokens.Sub(b.tokens, want)
		res.Allowed = true
	default:
		missing := new(big.Rat).Sub(want, b.tokens)
		res.RetryAfter = lag + time.Duration(ratNanos(missing, m.interval))
	}
	res.Remaining = int(new(big.Int).Quo(b.tokens.Num(), b.tokens.Denom()).Int64())
	empty := new(big.Rat).Sub(big.NewRat(m.capacity, 1), b.tokens)
	if empty.Sign() > 0 {
		res.ResetAfter = lag + time.Duration(ratNanos(empty, m.interval))
	}
	return res
}

// ratNanos is the time in whole ns that tokens take to refill; the limiters'
// integer time makes it a whole number.
func ratNanos(tokens *big.Rat, interval int64) int64 {
	ns := new(big.Rat).Mul(tokens, big.NewRat(interval, 1))
	if !ns.IsInt() {
		panic("model: refill time is not a whole number of ns: " + ns.String())
	}
	return ns.Num().Int64()
}

func TestInProcessLimitersMatchTheModel(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < sized(50, 200); round++ {
		capacity := 1 + r.IntN(12)
		interval := time.Duration(1 + r.Int64N(int64(2*time.Second)))
		// The clock steps back only in runs on one key: the in-process
		// limiters let time stand still per shard of keys, and the shards
		// are chosen by a random seed, so the model cannot follow a clock
		// going back over several keys.
		keys, back := []string{"a", "b", "c"}, round%2 == 0
		if back {
			keys = keys[:1]
		}
		calls := randomSchedule(r, 300, capacity, interval, back, keys...)
		for _, mk := range []struct {
			name string
			new  func(*ratelimittest.Clock) (Limiter, error)
		}{
			{"TokenBucket", func(c *ratelimittest.Clock) (Limiter, error) {
				return NewTokenBucket(capacity, float64(time.Second)/float64(interval), WithClock(c))
			}},
			{"GCRA", func(c *ratelimittest.Clock) (Limiter, error) {
				return NewGCRA(capacity, interval*time.Duration(capacity), WithClock(c))
			}},
		} {
			clock := ratelimittest.NewClock(epoch)
			l, err := mk.new(clock)
			require.NoError(t, err)
			model := newBucketModel(capacity, interval)
			for i, c := range calls {
				clock.Advance(c.advance)
				model.advance(c.advance)
				got, err := l.Allow(context.Background(), c.key, c.n)
				want := model.allow(c.key, c.n)
				if c.n > capacity {
					require.ErrorIs(t, err, ErrCostExceedsLimit)
				} else {
					require.NoError(t, err)
				}
				if !assert.Equal(t, want, got, "%s round %d step %d: capacity %d, interval %v, %+v", mk.name, round, i, capacity, interval, c) {
					return
				}
			}
		}
	}
}
