package ratelimit

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plainLeases is the exact rule of a concurrency limit, written as plainly
// as possible: a list of leases, each with its expiry.
type plainLeases struct {
	limit int64
	ttl   time.Duration
	held  map[string][]plainLease
}

type plainLease struct {
	id     int
	units  int64
	expiry time.Duration
}

// live returns key's leases that have not expired at now.
func (m *plainLeases) live(key string, now time.Duration) []plainLease {
	var out []plainLease
	for _, l := range m.held[key] {
		if l.expiry > now {
			out = append(out, l)
		}
	}
	m.held[key] = out
	return out
}

func (m *plainLeases) acquire(key string, n int64, id int, now time.Duration) Result {
	ls := m.live(key, now)
	var used int64
	var latest time.Duration
	for _, l := range ls {
		used += l.units
		latest = max(latest, l.expiry)
	}
	res := Result{Limit: int(m.limit)}
	if n == 0 || used+n <= m.limit {
		res.Allowed = true
		if n > 0 {
			m.held[key] = append(ls, plainLease{id: id, units: n, expiry: now + m.ttl})
			used += n
			latest = now + m.ttl
		}
	} else {
		byExpiry := slices.Clone(ls)
		slices.SortFunc(byExpiry, func(a, b plainLease) int { return int(a.expiry - b.expiry) })
		free := m.limit - used
		for _, l := range byExpiry {
			free += l.units
			if free >= n {
				res.RetryAfter = l.expiry - now
				break
			}
		}
	}
	res.Remaining = int(max(m.limit-used, 0))
	if used > 0 {
		res.ResetAfter = latest - now
	}
	return res
}

func (m *plainLeases) release(key string, id int) {
	m.held[key] = slices.DeleteFunc(m.held[key], func(l plainLease) bool { return l.id == id })
}

func (m *plainLeases) extend(key string, id int, now time.Duration) bool {
	ls := m.live(key, now)
	for i := range ls {
		if ls[i].id == id {
			ls[i].expiry = now + m.ttl
			return true
		}
	}
	return false
}

func TestConcurrencyDecidesAsTheModelOnRandomSchedules(t *testing.T) {
	ctx := context.Background()
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 23))
		limit := 1 + rng.IntN(5)
		ttl := time.Duration(1+rng.IntN(5)) * time.Second
		start := epoch
		clock := ratelimittest.NewClock(start)
		c, err := NewConcurrency(limit, ttl, WithClock(clock))
		require.NoError(t, err)
		m := &plainLeases{limit: int64(limit), ttl: ttl, held: map[string][]plainLease{}}
		type held struct {
			lease Lease
			id    int
		}
		var leases []held
		for step := range 400 {
			now := clock.Now().Sub(start)
			key := []string{"a", "b"}[rng.IntN(2)]
			switch op := rng.IntN(10); {
			case op < 5:
				n := rng.IntN(limit + 1)
				lease, d, err := c.Acquire(ctx, key, n)
				require.NoError(t, err)
				want := m.acquire(key, int64(n), step, now)
				require.Equal(t, want, d.Result, "seed %d step %d: acquire %d of %q at %v", seed, step, n, key, now)
				assert.Equal(t, want.Allowed && n > 0, lease.Held())
				if lease.Held() {
					leases = append(leases, held{lease, step})
				}
			case op < 7 && len(leases) > 0:
				i := rng.IntN(len(leases))
				require.NoError(t, leases[i].lease.Release(ctx))
				m.release(leases[i].lease.Key(), leases[i].id)
			case op < 8 && len(leases) > 0:
				i := rng.IntN(len(leases))
				renewed, err := leases[i].lease.Extend(ctx)
				if m.extend(leases[i].lease.Key(), leases[i].id, now) {
					require.NoError(t, err, "seed %d step %d", seed, step)
					leases[i].lease = renewed
				} else {
					require.ErrorIs(t, err, ErrLeaseExpired, "seed %d step %d", seed, step)
				}
			default:
				clock.Advance(time.Duration(rng.IntN(1500)) * time.Millisecond)
			}
		}
	}
}

func TestConcurrencyNeverHoldsMoreThanItsLimitUnderContention(t *testing.T) {
	const limit, keys, workers = 3, 4, 64
	c, err := NewConcurrency(limit, time.Minute)
	require.NoError(t, err)
	ctx := context.Background()
	var inFlight [keys]atomic.Int64
	var peak [keys]atomic.Int64
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range 300 {
				k := (w + i) % keys
				lease, d, err := c.Acquire(ctx, string(rune('a'+k)), 1)
				if err != nil || !d.Allowed {
					continue
				}
				allowed.Add(1)
				now := inFlight[k].Add(1)
				for p := peak[k].Load(); now > p && !peak[k].CompareAndSwap(p, now); p = peak[k].Load() {
				}
				inFlight[k].Add(-1)
				_ = lease.Release(ctx)
			}
		})
	}
	wg.Wait()
	assert.Positive(t, allowed.Load(), "some acquires were allowed")
	for k := range keys {
		assert.Positive(t, peak[k].Load())
		assert.LessOrEqual(t, peak[k].Load(), int64(limit))
		_, d, err := c.Acquire(ctx, string(rune('a'+k)), 0)
		require.NoError(t, err)
		assert.Equal(t, limit, d.Remaining, "every unit came back")
	}
}

func TestConcurrencyForgetsKeysWhoseLeasesEnded(t *testing.T) {
	ctx := context.Background()
	clock := ratelimittest.NewClock(epoch)
	c, err := NewConcurrency(2, time.Second, WithClock(clock))
	require.NoError(t, err)
	for i := range 5000 {
		lease, _, err := c.Acquire(ctx, "old:"+string(rune(i)), 1)
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, lease.Release(ctx))
		}
	}
	clock.Advance(3 * time.Second)
	// As many new keys as old ones, so that every shard is used again
	// (500 left one of the 64 shards untouched in about one run in 40,
	// with its old keys not yet swept).
	for i := range 5000 {
		_, _, err := c.Acquire(ctx, "new:"+string(rune(i)), 1)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, c.keys.len(), 5000, "only the keys that hold leases now are kept")
}
