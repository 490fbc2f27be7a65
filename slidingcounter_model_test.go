package ratelimit

import (
	"math/big"
	"sort"
	"strconv"
	"time"
)

// counterModel is the reference sliding-window counter: per key, the
// window's start and the units of the window open and of the one before,
// its estimate in big integers, and a RetryAfter found by searching the
// times to come for the first that allows, on a grid of unit ns (1 in
// process, 1000 for Redis's µs). It shares no code with the limiters. Like
// them, it lets time stand still while the clock reads earlier than the
// latest decision.
type counterModel struct {
	limit, window, unit int64
	now, latest         int64
	keys                map[string]modelCounter
}

// modelCounter is one key's state: the window open at start, and its units
// and the previous window's.
type modelCounter struct{ start, prev, cur int64 }

func newCounterModel(limit int, window time.Duration, unit time.Duration) *counterModel {
	return &counterModel{limit: int64(limit), window: int64(window), unit: int64(unit), keys: map[string]modelCounter{}}
}

func (m *counterModel) advance(d time.Duration) { m.now += int64(d) }

// state returns key's state at t: the window open at t, the previous
// window's units; ok false when the key holds nothing.
func (m *counterModel) state(key string, t int64) (modelCounter, bool) {
	k, ok := m.keys[key]
	if !ok || k.prev == 0 && k.cur == 0 {
		return modelCounter{}, false
	}
	switch e := t - k.start; {
	case e < m.window:
		return k, true
	case e < 2*m.window && k.cur > 0:
		return modelCounter{start: k.start + m.window, prev: k.cur}, true
	}
	return modelCounter{}, false
}

// estimate returns cur + ⌈prev × (W − e) / W⌉ of k at t.
func (m *counterModel) estimate(k modelCounter, t int64) int64 {
	num := new(big.Int).Mul(big.NewInt(k.prev), big.NewInt(m.window-(t-k.start)))
	num.Add(num, big.NewInt(m.window-1))
	return k.cur + num.Quo(num, big.NewInt(m.window)).Int64()
}

// left returns the units n may be at t: limit minus the estimate, at
// least 0.
func (m *counterModel) left(key string, t int64) int64 {
	k, ok := m.state(key, t)
	if !ok {
		return m.limit
	}
	return max(m.limit-m.estimate(k, t), 0)
}

// allow decides n for key at the model's time.
func (m *counterModel) allow(key string, n int) Result {
	res := Result{Limit: int(m.limit)}
	if int64(n) > m.limit {
		return res
	}
	m.latest = max(m.latest, m.now)
	at, lag := m.latest, m.latest-m.now
	if int64(n) <= m.left(key, at) {
		res.Allowed = true
		if n > 0 {
			k, ok := m.state(key, at)
			if !ok {
				k = modelCounter{start: at}
			}
			k.cur += int64(n)
			m.keys[key] = k
		}
	} else {
		// The first time on the grid that allows n: the estimate never
		// grows with time, so the times that allow are an interval's end.
		k, _ := m.state(key, at)
		steps := (k.start + 2*m.window - at + m.unit - 1) / m.unit
		i := int64(sort.Search(int(steps)+1, func(i int) bool {
			return int64(n) <= m.left(key, at+int64(i)*m.unit)
		}))
		res.RetryAfter = time.Duration(i*m.unit + lag)
	}
	res.Remaining = int(m.left(key, at))
	if k, ok := m.state(key, at); ok {
		end := k.start + m.window
		if k.cur > 0 {
			end += m.window
		}
		res.ResetAfter = time.Duration(end - at + lag)
	}
	return res
}

// fmtCounter returns a Redis sliding counter key's value.
func fmtCounter(start, expiry, prev, cur int64) string {
	return strconv.FormatInt(start, 10) + ":" + strconv.FormatInt(expiry, 10) + ":" + strconv.FormatInt(prev, 10) + ":" + strconv.FormatInt(cur, 10)
}
