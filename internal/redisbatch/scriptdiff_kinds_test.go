package redisbatch

import (
	"strconv"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// diffKind is how the differential makes the limits and the foreign values
// of one kind of the batch script.
type diffKind struct {
	name string
	kind Kind
	// policies are the kind's usual limits, {units, param}, the first one
	// most often: param is the script's (µs per unit, a window in ms, a
	// lease's TTL in µs), but a calendar's, which is the period in ms of
	// the calendar whose windows the client computes.
	policies [][2]int64
	// edge is a limit at the edge of what the kind takes, sent now and
	// then.
	edge [2]int64
	// over is the percent of an Allow's costs that are the limit + 1,
	// which the root never sends (it answers ErrCostExceedsLimit first):
	// the script's header allows 0 to the limit, and the sliding log's
	// denial of more fails the whole call, so that its batches hold such a
	// cost more rarely.
	over int
	// keyed is set for the kinds that keep their interval with each key's
	// state: the root sends them only as limits its requests carry, in the
	// general form (the script has no compact form for them).
	keyed bool
}

// diffKinds are every kind of the batch script.
var diffKinds = []diffKind{
	{name: "t=TokenBucket", kind: TokenBucket, over: 5, policies: tatPolicies, edge: [2]int64{1 << 40, 3}},
	{name: "g=GCRA", kind: GCRA, over: 5, policies: tatPolicies, edge: [2]int64{1 << 40, 3}},
	{name: "w=FixedWindow", kind: FixedWindow, over: 5, policies: [][2]int64{{3, 1000}, {1, 100}, {5, 3000}}, edge: [2]int64{1 << 40, 60_000}},
	{name: "T=TokenBucketWithInterval", kind: TokenBucketWithInterval, over: 5, policies: tatPolicies, edge: [2]int64{1 << 40, 3}, keyed: true},
	{name: "G=GCRAWithInterval", kind: GCRAWithInterval, over: 5, policies: tatPolicies, edge: [2]int64{1 << 40, 3}, keyed: true},
	{name: "c=Concurrency", kind: Concurrency, over: 5, policies: [][2]int64{{3, 300_000}, {1, 1000}, {5, 2_000_000}}, edge: [2]int64{65536, 1_000_000}},
	{name: "l=SlidingLog", kind: SlidingLog, over: 1, policies: [][2]int64{{3, 1000}, {1, 200}, {6, 3000}}, edge: [2]int64{10_000, 1000}},
	{name: "s=SlidingCounter", kind: SlidingCounter, over: 5, policies: [][2]int64{{4, 1000}, {2, 200}, {10, 3000}}, edge: [2]int64{1 << 40, 60_000}},
	{name: "k=CalendarWindow", kind: CalendarWindow, over: 5, policies: [][2]int64{{3, 1000}, {1, 500}, {5, 3000}}, edge: [2]int64{1 << 40, 1000}},
}

// tatPolicies are the usual limits of the token bucket and GCRA kinds:
// units, and µs per unit.
var tatPolicies = [][2]int64{{3, 250_000}, {1, 100_000}, {5, 1_000_000}}

// calendarBounds returns the bounds a client whose clock reads at (µs of
// Unix time) sends for a calendar of period ms (see Limit.Bounds): the
// windows of a calendar whose window i starts at i periods plus up to a
// third of one, fixed per window, so that windows differ in length as
// months do.
func calendarBounds(period, at int64) [4]int64 {
	p := period * 1000
	start := func(i int64) int64 {
		h := uint64(i) * 0x9E3779B97F4A7C15
		h ^= h >> 29
		return i*p + int64(h%uint64(p/3))
	}
	i := at / p
	for start(i) > at {
		i--
	}
	for start(i+1) <= at {
		i++
	}
	return [4]int64{start(i - 1), start(i), start(i + 1), start(i + 2)}
}

// seeder writes one foreign value under key, of a server whose clock reads
// now (µs of Unix time).
type seeder func(m *miniredis.Miniredis, key string, now int64)

// foreign returns what the differential writes under the foreign keys of
// kind's pool: another type, other fields, other values, and values of the
// kind's own shape without the TTL it reads or with numbers it refuses.
func foreign(kind Kind) []seeder {
	str := func(v string, ttl time.Duration) seeder {
		return func(m *miniredis.Miniredis, key string, now int64) {
			_ = m.Set(key, expand(v, now))
			if ttl > 0 {
				m.SetTTL(key, ttl)
			}
		}
	}
	hash := func(ttl time.Duration, fv ...string) seeder {
		return func(m *miniredis.Miniredis, key string, now int64) {
			values := make([]string, len(fv))
			for i, v := range fv {
				values[i] = expand(v, now)
			}
			m.HSet(key, values...)
			if ttl > 0 {
				m.SetTTL(key, ttl)
			}
		}
	}
	s := []seeder{
		func(m *miniredis.Miniredis, key string, _ int64) { _, _ = m.Push(key, "x") },
		func(m *miniredis.Miniredis, key string, _ int64) { _, _ = m.ZAdd(key, 1, "x") },
		hash(time.Second, "credit", "250000", "last_refill", "NOW"),
		str("garbage", time.Second),
	}
	switch kind {
	case TokenBucket:
		s = append(s, hash(0, "tat", "NOW+500000"), hash(time.Second, "tat", "1.5"),
			hash(time.Second, "tat", "NOW", "interval", "100"), hash(time.Second, "tat", "0123"))
	case GCRA:
		s = append(s, str("NOW+500000", 0), str("-1", time.Second), str("1e6", time.Second), str("NOW:250000", time.Second))
	case TokenBucketWithInterval:
		s = append(s, hash(time.Second, "tat", "NOW"), hash(time.Second, "tat", "NOW", "interval", "0"),
			hash(0, "tat", "NOW+500000", "interval", "250000"))
	case GCRAWithInterval:
		s = append(s, str("NOW", time.Second), str("NOW:0", time.Second), str("NOW+500000:250000", 0))
	case FixedWindow:
		s = append(s, str("0", time.Second), str("3", 0), str("-2", time.Second), str("2", 10*time.Minute))
	case SlidingLog:
		s = append(s, hash(0, "n", "1", "h", "1", "t", "1", "a", "NOW", "z", "NOW", "1", "NOW"),
			hash(time.Second, "n", "2", "h", "1", "t", "1", "a", "NOW", "z", "NOW", "1", "NOW"),
			hash(time.Second, "n", "1", "h", "1", "t", "1", "a", "NOW", "z", "NOW"),
			hash(time.Second, "n", "1", "h", "1", "t", "1", "a", "NOW", "z", "NOW", "1", "NOW:0"))
	case SlidingCounter:
		s = append(s, str("NOW:NOW+2000000:1:1", 0), str("NOW:NOW:0:1", time.Second),
			str("NOW:NOW+2000000:0:0", time.Second), str("a:b:c:d", time.Second))
	case CalendarWindow:
		s = append(s, str("NOW:2", 0), str("NOW:0", time.Second), str("NOW", time.Second), str("NOW:1:2", time.Second))
	case Concurrency:
		s = append(s, str("L1:NOW+1000000", 0), str("L1:2:NOW+1000000", time.Second), str("L1", time.Second),
			hash(time.Second, "u", "1", "e", "NOW", "x", "NOW+1000000", "L1", "NOW+1000000"),
			hash(time.Second, "u", "2", "e", "NOW", "x", "NOW+1000000", "L1", "NOW+1000000"),
			hash(time.Second, "u", "1", "e", "NOW", "x", "NOW+1000000"))
	}
	return s
}

// expand returns v with "NOW" read as now, and "NOW+d" as now + d.
func expand(v string, now int64) string {
	out := ""
	for {
		i := strings.Index(v, "NOW")
		if i < 0 {
			return out + v
		}
		out += v[:i]
		v = v[i+3:]
		at := now
		if len(v) > 0 && v[0] == '+' {
			j := 1
			for j < len(v) && v[j] >= '0' && v[j] <= '9' {
				j++
			}
			d, _ := strconv.ParseInt(v[1:j], 10, 64)
			at += d
			v = v[j:]
		}
		out += strconv.FormatInt(at, 10)
	}
}
