package ratelimit

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"
)

// fuzzVerdict is one check's part of a batch script record: allowed (plus
// 2 when a next unit follows, which the caller appends), then remaining,
// retry_after and reset_after (µs), big-endian.
func fuzzVerdict(allowed byte, remaining, retry, reset uint64) []byte {
	b := []byte{allowed}
	for _, n := range []uint64{remaining, retry, reset} {
		b = binary.BigEndian.AppendUint64(b, n)
	}
	return b
}

// FuzzRedisReply answers the Redis limiters' script calls with corrupted
// replies (any bytes; records of the script's format with any numbers,
// refusals naming any check, cut or grown), and checks what a caller gets:
// never a panic, and either an error of class ErrBackend or ErrCorruptState
// with a Result of the limit alone, or a Result a script of the limiter
// could give: within the limit, a wait only on a denial, never a negative
// time. A reply is never trusted to allow what it cannot mean.
func FuzzRedisReply(f *testing.F) {
	f.Add([]byte{}, byte(0), byte(0))
	f.Add(fuzzVerdict(1, 2, 0, 1000), byte(0), byte(0))
	f.Add(fuzzVerdict(0, 0, 500000, 1000000), byte(1), byte(0))
	f.Add(append(fuzzVerdict(1, 2, 0, 1000), fuzzVerdict(1, 9, 0, 1)...), byte(3), byte(0))
	f.Add(fuzzVerdict(1, 4, 0, 1<<63), byte(2), byte(1))
	f.Add(binary.BigEndian.AppendUint64(fuzzVerdict(3, 2, 0, 1000), 500), byte(3), byte(0)) // a next unit
	f.Add(binary.BigEndian.AppendUint64(fuzzVerdict(2, 0, 0, 1000), 0), byte(3), byte(0))
	f.Add([]byte{0xff, 1, 0, 9, 'n', 'o', 't', ' ', 'a', ' ', 'H', 'A', 'S'}, byte(4), byte(0))
	f.Add([]byte{0xff, 3, 0, 2, 'x', 'y'}, byte(3), byte(0))
	f.Fuzz(func(t *testing.T, reply []byte, which, op byte) {
		ctx := context.Background()
		script := cannedScripter{reply: string(reply)}
		const limit = 3
		var l Limiter
		var err error
		switch which % 6 {
		case 0:
			l, err = NewRedisTokenBucket(script, PerSecond(1), limit)
		case 1:
			l, err = NewRedisGCRA(script, limit, time.Second)
		case 2:
			l, err = NewRedisFixedWindow(script, limit, time.Second)
		case 3:
			var a, b Limiter
			if a, err = NewRedisSlidingLog(script, limit, time.Second); err == nil {
				if b, err = NewRedisSlidingCounter(script, 5, time.Second); err == nil {
					l, err = NewComposite(Part{Name: "log", Limiter: a}, Part{Name: "counter", Limiter: b})
				}
			}
		case 4:
			l, err = NewRedisConcurrency(script, limit, time.Minute)
		default:
			l, err = NewRedisCalendarWindow(script, limit, Calendar{Period: CalendarDay})
		}
		if err != nil {
			t.Fatal(err)
		}
		var res Result
		switch op % 3 {
		case 0:
			var d Decision
			d, err = l.(Decider).Decide(ctx, "k", 1)
			res = d.Result
			for i := range d.Policies {
				if next, ok := d.NextUnit(i); ok && next <= 0 {
					t.Fatalf("reply %q believed: a next unit %v of policy %d", reply, next, i)
				}
			}
		case 1:
			if a, ok := l.(Adjuster); ok {
				res, err = a.Settle(ctx, "k", 1, 2)
			} else {
				res, err = l.Allow(ctx, "k", 0)
			}
		default:
			if a, ok := l.(Acquirer); ok {
				var lease Lease
				lease, _, err = a.Acquire(ctx, "k", 1)
				if lease.Held() {
					err = errors.Join(err, lease.Release(ctx))
					if _, xerr := lease.Extend(ctx); xerr != nil && !errors.Is(xerr, ErrBackend) && !errors.Is(xerr, ErrCorruptState) && !errors.Is(xerr, ErrLeaseExpired) {
						t.Fatalf("Extend on reply %q: %v", reply, xerr)
					}
				}
			} else {
				res, err = l.Allow(ctx, "k", 1)
			}
		}
		if err != nil {
			if !errors.Is(err, ErrBackend) && !errors.Is(err, ErrCorruptState) {
				t.Fatalf("reply %q: an error of neither ErrBackend nor ErrCorruptState: %v", reply, err)
			}
			if res.Allowed || res.Remaining != 0 || res.RetryAfter != 0 || res.ResetAfter != 0 {
				t.Fatalf("reply %q: %v with %+v", reply, err, res)
			}
			return
		}
		if res.Remaining < 0 || res.Remaining > res.Limit || res.RetryAfter < 0 || res.ResetAfter < 0 ||
			res.Allowed && res.RetryAfter != 0 {
			t.Fatalf("reply %q believed: %+v", reply, res)
		}
	})
}
