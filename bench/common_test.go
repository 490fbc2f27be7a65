package bench

import (
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// numMemoryKeys is how many keys BenchmarkMemoryPerKey inserts, and
// numParallelKeys how many BenchmarkManyKeysParallel walks; the latter are the
// first numParallelKeys of the former.
const (
	numMemoryKeys   = 1_000_000
	numParallelKeys = 100_000
)

var (
	keysOnce sync.Once
	keysAll  []string
)

// benchKeys returns "key:0", "key:1", ... "key:<n-1>", built once for the
// whole test binary and kept reachable for its lifetime, so that no benchmark
// counts or times the building of key strings.
func benchKeys(n int) []string {
	keysOnce.Do(func() {
		keysAll = make([]string, numMemoryKeys)
		for i := range keysAll {
			keysAll[i] = "key:" + strconv.Itoa(i)
		}
	})
	return keysAll[:n]
}

// mutexRateMap is the per-key map of *rate.Limiter that services commonly
// write by hand around golang.org/x/time/rate: one sync.Mutex over a plain
// map, a limiter created on first use and never removed.
type mutexRateMap struct {
	mu    sync.Mutex
	m     map[string]*rate.Limiter
	limit rate.Limit
	burst int
}

func newMutexRateMap(limit rate.Limit, burst int) *mutexRateMap {
	return &mutexRateMap{m: make(map[string]*rate.Limiter), limit: limit, burst: burst}
}

// allowN reports whether n events for key may happen at now.
func (r *mutexRateMap) allowN(key string, now time.Time, n int) bool {
	r.mu.Lock()
	l, ok := r.m[key]
	if !ok {
		l = rate.NewLimiter(r.limit, r.burst)
		r.m[key] = l
	}
	r.mu.Unlock()
	return l.AllowN(now, n)
}

// syncRateMap is the other common hand-rolled shape: a sync.Map of
// *rate.Limiter, Load first and LoadOrStore on a miss, never removed.
type syncRateMap struct {
	m     sync.Map // string → *rate.Limiter
	limit rate.Limit
	burst int
}

func newSyncRateMap(limit rate.Limit, burst int) *syncRateMap {
	return &syncRateMap{limit: limit, burst: burst}
}

// allowN reports whether n events for key may happen at now.
func (r *syncRateMap) allowN(key string, now time.Time, n int) bool {
	v, ok := r.m.Load(key)
	if !ok {
		v, _ = r.m.LoadOrStore(key, rate.NewLimiter(r.limit, r.burst))
	}
	return v.(*rate.Limiter).AllowN(now, n)
}
