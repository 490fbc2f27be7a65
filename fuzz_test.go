package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// FuzzTokenBucket drives a TokenBucket with arbitrary schedules and checks
// its invariants: it decides as the exact model does (so it never denies what
// the model allows), and in any stretch of calls it never allows more than
// capacity + rate × elapsed tokens.
func FuzzTokenBucket(f *testing.F) {
	f.Add(uint8(5), uint16(500), []byte{0, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1, 3, 1})
	f.Add(uint8(1), uint16(1), []byte{255, 1, 0, 2, 128, 1})
	f.Add(uint8(3), uint16(1000), []byte{0, 3, 0, 1, 250, 2, 7, 0})
	f.Fuzz(func(t *testing.T, capacity uint8, intervalMs uint16, program []byte) {
		if capacity == 0 || intervalMs == 0 || len(program) > 400 {
			return
		}
		c := int(capacity)
		interval := time.Duration(intervalMs) * time.Millisecond
		clock := ratelimittest.NewClock(epoch)
		l, err := NewTokenBucket(Every(interval), c, WithClock(clock))
		if err != nil {
			t.Fatalf("NewTokenBucket(Every(%v), %d): %v", interval, c, err)
		}
		model := newBucketModel(c, interval)

		// Each pair of bytes is one call: a clock step of 0..255 tenths of
		// an interval (the top values step back), then a cost.
		type grant struct {
			at time.Duration
			n  int
		}
		// high is the latest clock reading a decision was made at: a clock
		// that steps back and forward again has not made time pass twice.
		// (A call with n above capacity is refused before the clock is
		// read, so its reading does not count.)
		var now, high time.Duration
		var grants []grant
		for i := 0; i+1 < len(program); i += 2 {
			step := time.Duration(program[i]) * interval / 10
			if program[i] >= 250 {
				step = -step
			}
			n := int(program[i+1]) % (c + 2)
			clock.Advance(step)
			model.advance(step)
			now += step
			if n <= c {
				high = max(high, now)
			}
			got, err := l.Allow(context.Background(), "k", n)
			want := model.allow("k", n)
			if (err != nil) != (n > c) {
				t.Fatalf("call %d: Allow(%d) error %v with capacity %d", i/2, n, err, c)
			}
			if got != want {
				t.Fatalf("call %d: Allow(%d) after %v = %+v, model says %+v", i/2, n, step, got, want)
			}
			if got.Allowed && n > 0 {
				grants = append(grants, grant{high, n})
			}
		}
		// In any run of grants from i to j, tokens handed out are at most
		// capacity plus what refilled over the clock's forward progress.
		for i := range grants {
			total := 0
			for j := i; j < len(grants); j++ {
				total += grants[j].n
				elapsed := grants[j].at - grants[i].at
				if total > c+int(elapsed/interval) {
					t.Fatalf("grants %d..%d: %d tokens in %v with capacity %d and one per %v", i, j, total, elapsed, c, interval)
				}
			}
		}
	})
}

// FuzzGCRA checks the in-process GCRA against the exact token-bucket model
// it must equal, on arbitrary schedules over two keys.
func FuzzGCRA(f *testing.F) {
	f.Add(uint8(10), uint16(6000), []byte{0, 1, 0, 1, 60, 1, 0, 5, 255, 1})
	f.Add(uint8(1), uint16(1), []byte{1, 1, 1, 1, 250, 1})
	f.Fuzz(func(t *testing.T, limit uint8, intervalMs uint16, program []byte) {
		if limit == 0 || intervalMs == 0 || len(program) > 600 {
			return
		}
		interval := time.Duration(intervalMs) * time.Millisecond
		clock := ratelimittest.NewClock(epoch)
		l, err := NewGCRA(int(limit), interval*time.Duration(limit), WithClock(clock))
		if err != nil {
			t.Fatalf("NewGCRA(%d, %v): %v", limit, interval*time.Duration(limit), err)
		}
		model := newBucketModel(int(limit), interval)
		// Each triple of bytes is one call: a clock step of 0..255 tenths of
		// an interval, a key (odd or even), a cost. The clock never steps
		// back here: with two keys on two shards, time may stand still
		// differently for each (see randomSchedule).
		for i := 0; i+2 < len(program); i += 3 {
			step := time.Duration(program[i]) * interval / 10
			key := string('a' + program[i+1]%2)
			n := int(program[i+2]) % (int(limit) + 2)
			clock.Advance(step)
			model.advance(step)
			got, err := l.Allow(context.Background(), key, n)
			want := model.allow(key, n)
			if (err != nil) != (n > int(limit)) || got != want {
				t.Fatalf("call %d: Allow(%q, %d) = %+v, %v; model says %+v", i/3, key, n, got, err, want)
			}
		}
	})
}

// FuzzFixedWindow checks the in-process fixed window against its model on
// arbitrary schedules of one key, the clock stepping back now and then.
func FuzzFixedWindow(f *testing.F) {
	f.Add(uint8(20), uint16(30000), []byte{0, 1, 0, 1, 0, 25, 255, 1})
	f.Add(uint8(3), uint16(10), []byte{5, 3, 5, 3, 250, 1, 1, 1})
	f.Fuzz(func(t *testing.T, limit uint8, windowMs uint16, program []byte) {
		if limit == 0 || windowMs == 0 || len(program) > 400 {
			return
		}
		window := time.Duration(windowMs) * time.Millisecond
		clock := ratelimittest.NewClock(epoch)
		l, err := NewFixedWindow(int(limit), window, WithClock(clock))
		if err != nil {
			t.Fatalf("NewFixedWindow(%d, %v): %v", limit, window, err)
		}
		model := newWindowModel(int(limit), window)
		// Each pair of bytes is one call: a clock step of 0..255 tenths of
		// a window's limit-th part (the top values step back), then a cost.
		for i := 0; i+1 < len(program); i += 2 {
			step := time.Duration(program[i]) * window / time.Duration(10*int(limit))
			if program[i] >= 250 {
				step = -step
			}
			n := int(program[i+1]) % (int(limit) + 2)
			clock.Advance(step)
			model.advance(step)
			got, err := l.Allow(context.Background(), "k", n)
			want := model.allow("k", n)
			if (err != nil) != (n > int(limit)) || got != want {
				t.Fatalf("call %d: Allow(%d) after %v = %+v, %v; model says %+v", i/2, n, step, got, err, want)
			}
		}
	})
}

// FuzzSlidingCounter checks the in-process sliding-window counter against
// its model on arbitrary schedules of one key, the clock stepping back now
// and then.
func FuzzSlidingCounter(f *testing.F) {
	f.Add(uint8(20), uint16(30000), []byte{0, 1, 0, 1, 0, 25, 255, 1})
	f.Add(uint8(3), uint16(10), []byte{5, 3, 5, 3, 250, 1, 1, 1})
	f.Add(uint8(7), uint16(999), []byte{0, 7, 70, 3, 35, 2, 10, 6, 200, 1})
	f.Fuzz(func(t *testing.T, limit uint8, windowMs uint16, program []byte) {
		if limit == 0 || windowMs == 0 || len(program) > 400 {
			return
		}
		window := time.Duration(windowMs) * time.Millisecond
		clock := ratelimittest.NewClock(epoch)
		l, err := NewSlidingCounter(int(limit), window, WithClock(clock))
		if err != nil {
			t.Fatalf("NewSlidingCounter(%d, %v): %v", limit, window, err)
		}
		model := newCounterModel(int(limit), window, 1)
		// Each pair of bytes is one call: a clock step of 0..255 tenths of
		// a window's limit-th part (the top values step back), then a cost.
		for i := 0; i+1 < len(program); i += 2 {
			step := time.Duration(program[i]) * window / time.Duration(10*int(limit))
			if program[i] >= 250 {
				step = -step
			}
			n := int(program[i+1]) % (int(limit) + 2)
			clock.Advance(step)
			model.advance(step)
			got, err := l.Allow(context.Background(), "k", n)
			want := model.allow("k", n)
			if (err != nil) != (n > int(limit)) || got != want {
				t.Fatalf("call %d: Allow(%d) after %v = %+v, %v; model says %+v", i/2, n, step, got, err, want)
			}
		}
	})
}

// FuzzPolicyTableField checks a PolicyTable's parser of its HASH's
// fields on arbitrary fields and values: it never panics, and what it
// accepts is within the table's bounds, passes the checks Set applies and
// reads back as it was written; a field it refuses changes nothing a copy
// holds (see fuzzTableField).
func FuzzPolicyTableField(f *testing.F) {
	f.Add("p:acme", "10/60000000000", false)
	f.Add("p:acme", "@free", false)
	f.Add("plan:free", `""10/60000000000,"day"1000/86400000000000`, false)
	f.Add("f:enforce", "1", false)
	f.Add("p:acme", "2/1", false)
	f.Add("plan:x", `"a"1/5,"a"2/5`, false)
	f.Add("p:acme", "", true)
	f.Add("log:3", "1:2:p:a", false)
	f.Fuzz(fuzzTableField)
}

// FuzzPolicyTableReply checks a PolicyTable's reader of its read script's
// replies on arbitrary replies (elements split at NUL bytes, a leading
// '#' making an element an integer): it never panics, and what it accepts
// leaves a copy that holds only what passes the checks Set applies (see
// fuzzTableReply).
func FuzzPolicyTableReply(f *testing.F) {
	f.Add([]byte("changes\x00123\x00p:acme\x00=10/60000000000\x00plan:free\x00=\"\"2/1"))
	f.Add([]byte("same\x00123"))
	f.Add([]byte("reload\x00123"))
	f.Add([]byte("changes\x00123\x00p:acme\x00\x00f:x\x00=1"))
	f.Add([]byte("changes\x00#5\x00p:a\x00#1"))
	f.Fuzz(fuzzTableReply)
}

// FuzzSettleBoundsDebt checks the in-process limiters' Allow, Settle and
// Refund against the model of their parts, which knows the bound on debt
// (WithMaxDebt), on arbitrary schedules of one key: whatever the costs
// settled, a key owes at most its bound, and decides as the model does. A
// Settle above the bound on one Settle (WithMaxSettle: the default ten
// limits, or none) is refused and changes nothing.
func FuzzSettleBoundsDebt(f *testing.F) {
	f.Add(uint8(0), uint8(4), uint16(250), uint8(1), []byte{0, 0, 3, 1, 1, 255, 0, 0, 1, 2, 2, 0})
	f.Add(uint8(2), uint8(3), uint16(1000), uint8(0), []byte{1, 1, 3, 5, 1, 255, 7, 2, 1})
	f.Add(uint8(1), uint8(10), uint16(600), uint8(255), []byte{0, 1, 10, 255, 9, 0, 10})
	f.Fuzz(func(t *testing.T, algorithm, limit uint8, intervalMs uint16, bound uint8, program []byte) {
		if limit == 0 || intervalMs == 0 || len(program) > 600 {
			return
		}
		l := int(limit)
		interval := time.Duration(intervalMs) * time.Millisecond
		// bound 255 is UnboundedDebt; otherwise 0 to 3 limits.
		debt := int(bound % 4)
		if bound == 255 {
			debt = UnboundedDebt
		}
		// bound's bit 2 lifts the bound on one Settle (set for 255).
		most := DefaultMaxSettle
		if bound&4 != 0 {
			most = UnboundedSettle
		}
		clock := ratelimittest.NewClock(epoch)
		opts := []Option{WithClock(clock), WithMaxDebt(debt), WithMaxSettle(most)}
		var a Adjuster
		var m *partModel
		var err error
		switch algorithm % 3 {
		case 0:
			a, err = NewTokenBucket(Every(interval), l, opts...)
			m = newBucketPart(l, interval)
		case 1:
			a, err = NewGCRA(l, interval*time.Duration(l), opts...)
			m = newBucketPart(l, interval)
		default:
			a, err = NewFixedWindow(l, interval*time.Duration(l), opts...)
			m = newWindowPart(l, interval*time.Duration(l))
		}
		if err != nil {
			t.Fatalf("limit %d, interval %v: %v", l, interval, err)
		}
		m.withDebt(debt)
		ctx := context.Background()
		var now int64
		// Each triple of bytes is one call: a clock step of 0..255 tenths
		// of an interval; a kind (an Allow, a Refund, or a Settle); and a
		// cost: an Allow's or Refund's n, or a Settle's cost (taken 1 when
		// the limit allows), where 255 is 10^9.
		for i := 0; i+2 < len(program); i += 3 {
			step := time.Duration(program[i]) * interval / 10
			clock.Advance(step)
			now += int64(step)
			var got, want Result
			switch kind, c := program[i+1]%3, int(program[i+2]); kind {
			case 0:
				n := c % (l + 1)
				allowed, taken, _, denied, commit := m.take("k", int64(n), now)
				want = denied
				if allowed {
					want = taken
					commit()
				}
				got, err = a.Allow(ctx, "k", n)
			case 1:
				n := c % (l + 1)
				want = m.settle("k", int64(-n), now, 0, false)
				got, err = a.Refund(ctx, "k", n)
			default:
				cost := c
				if c == 255 {
					cost = 1_000_000_000
				}
				if most > 0 && cost > most*l {
					got, err = a.Settle(ctx, "k", 1, cost)
					if !errors.Is(err, ErrInvalidCost) || got != (Result{Limit: l}) {
						t.Fatalf("call %d (%v): %+v, %v; a Settle above %d limits is refused", i/3, program[i:i+3], got, err, most)
					}
					continue
				}
				want = m.settle("k", int64(cost-1), now, 0, false)
				got, err = a.Settle(ctx, "k", 1, cost)
			}
			if err != nil || got != want {
				t.Fatalf("call %d (%v): %+v, %v; model says %+v", i/3, program[i:i+3], got, err, want)
			}
			if debt >= 0 && got.ResetAfter > time.Duration(1+debt)*interval*time.Duration(l) {
				t.Fatalf("call %d: ResetAfter %v beyond %d limits of debt", i/3, got.ResetAfter, debt)
			}
		}
	})
}

// calendarZones are the zones FuzzCalendarWindow picks from: UTC, a
// northern and a southern zone with daylight saving, one that moves by 30
// minutes, and one of a half-hour offset.
var calendarZones = []string{"UTC", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe", "Asia/Kolkata"}

// FuzzCalendarWindow checks the in-process calendar window against its
// model on arbitrary schedules of one key from an arbitrary day of 2026
// to 2028, in zones with daylight saving, the clock stepping back now and
// then (one key: time stands still per shard).
func FuzzCalendarWindow(f *testing.F) {
	f.Add(uint8(2), uint8(1), uint8(3), uint16(297), []byte{0, 1, 0, 1, 200, 2, 0, 1, 255, 1, 100, 3})
	f.Add(uint8(1), uint8(2), uint8(2), uint16(276), []byte{5, 1, 5, 2, 250, 1, 60, 1})
	f.Add(uint8(4), uint8(4), uint8(5), uint16(790), []byte{0, 5, 30, 1, 30, 1, 251, 1})
	f.Fuzz(func(t *testing.T, period, zoneIndex, limit uint8, day uint16, program []byte) {
		if limit == 0 || len(program) > 300 {
			return
		}
		loc, err := time.LoadLocation(calendarZones[int(zoneIndex)%len(calendarZones)])
		if err != nil {
			t.Fatal(err)
		}
		cal := Calendar{Period: CalendarPeriod(1 + int(period)%5), Location: loc, FirstWeekday: time.Weekday(int(period) / 5 % 7)}
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(day%1100) * 24 * time.Hour).Add(time.Duration(int(period)*7) * time.Minute)
		clock := ratelimittest.NewClock(start)
		l, err := NewCalendarWindow(int(limit), cal, WithClock(clock))
		if err != nil {
			t.Fatalf("NewCalendarWindow(%d, %+v): %v", limit, cal, err)
		}
		model := newCalendarModel(int(limit), cal, start)
		// Each pair of bytes is one call: a clock step of 0..249
		// fiftieths of the period's nominal length (the top values step
		// back by a fiftieth each), then a cost.
		unit := cal.Period.Nominal() / 50
		for i := 0; i+1 < len(program); i += 2 {
			step := time.Duration(program[i]) * unit
			if program[i] >= 250 {
				step = -time.Duration(program[i]-249) * unit
			}
			key := "k"
			n := int(program[i+1]) % (int(limit) + 2)
			clock.Advance(step)
			model.advance(step)
			got, err := l.Allow(context.Background(), key, n)
			if n > int(limit) {
				if err == nil {
					t.Fatalf("call %d: Allow(%d) above the limit: no error", i/2, n)
				}
				continue
			}
			want := model.allow(key, n)
			if err != nil || got != want {
				t.Fatalf("call %d: Allow(%q, %d) at %v = %+v, %v; model says %+v", i/2, key, n, clock.Now(), got, err, want)
			}
		}
	})
}
