package redisbatch

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
)

// encodeCheck appends one check's part of an answered record, as the batch
// script writes it (see record.go): allowed, plus NextMark with a next
// unit, then remaining, retry_after, reset_after and the next unit, if
// any, big-endian.
func encodeCheck(b []byte, v Verdict) []byte {
	first := byte(v.Allowed)
	numbers := []int64{v.Remaining, v.RetryAfter, v.ResetAfter}
	if v.HasNext {
		first |= NextMark
		numbers = append(numbers, v.Next)
	}
	b = append(b, first)
	for _, n := range numbers {
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return b
}

// encodeRefusal appends a refused record of check (from 1) and reason.
func encodeRefusal(b []byte, check int, reason string) []byte {
	b = append(b, refusedMark, byte(check))
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	return append(b, reason...)
}

// fuzzBatch returns a batch of requests whose numbers of checks shape gives,
// one request per byte (1 to 4 checks), at most 8.
func fuzzBatch(shape []byte) []*Request {
	if len(shape) > 8 {
		shape = shape[:8]
	}
	batch := make([]*Request, len(shape))
	for i, s := range shape {
		batch[i] = &Request{More: make([]string, int(s)%4)}
	}
	return batch
}

// checkRecords checks what splitReply made of reply for batch when it
// returned nil: records that, in order, are reply, each a refusal of the
// length it declares or an answered record of its request's checks.
func checkRecords(t *testing.T, reply string, batch []*Request) {
	t.Helper()
	var joined strings.Builder
	for i, p := range batch {
		r := p.Record
		joined.WriteString(string(r))
		if check, reason, ok := r.Refusal(); ok {
			if len(r) != 4+len(reason) || check != int(r[1]) {
				t.Fatalf("request %d: refusal record %q of check %d, reason %q", i, r, check, reason)
			}
			continue
		}
		n, ok := r.Checks()
		if !ok || n != p.checks() {
			t.Fatalf("request %d of %d checks: record %q holds %d (%v)", i, p.checks(), r, n, ok)
		}
		var again []byte
		for c := range n {
			again = encodeCheck(again, r.Check(c))
		}
		if string(again) != string(r) {
			t.Fatalf("request %d: record %q reads back as %q", i, r, again)
		}
	}
	if joined.String() != reply {
		t.Fatalf("the records %q are not the reply %q", joined.String(), reply)
	}
}

// FuzzSplitReply feeds the reply decoder corrupted replies: arbitrary
// bytes, and well-formed replies of the script's format cut short, grown or
// with one byte changed. It must never panic nor read past the reply, and
// a reply it accepts is cut into one well-formed record per request that
// together are the reply; a well-formed reply is always accepted and read
// back as written.
func FuzzSplitReply(f *testing.F) {
	f.Add([]byte{}, []byte{0}, []byte{1, 0, 0, 0, 0, 0, 0, 0, 3}, uint16(0), byte(0), byte(0))
	f.Add([]byte{refusedMark, 1, 0, 3, 'b', 'a', 'd'}, []byte{0, 1}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, uint16(30), byte(2), byte(0xff))
	f.Add([]byte{1, 2, 3}, []byte{3, 0, 2}, []byte{1, 1, 0, 1}, uint16(5), byte(1), byte(7))
	f.Fuzz(func(t *testing.T, raw, shape, values []byte, at uint16, how, with byte) {
		// Arbitrary bytes.
		batch := fuzzBatch(shape)
		if err := splitReply(string(raw), batch); err == nil {
			checkRecords(t, string(raw), batch)
		}

		// A well-formed reply from values: per request, a refusal when its
		// first value byte is odd, else its checks' verdicts.
		batch = fuzzBatch(shape)
		var reply []byte
		next := func() int64 {
			if len(values) == 0 {
				return 0
			}
			v := int64(values[0])
			values = values[1:]
			return v
		}
		for _, p := range batch {
			if next()%2 == 1 {
				reply = encodeRefusal(reply, int(next())%p.checks()+1, strings.Repeat("r", int(next())%40))
				continue
			}
			for range p.checks() {
				v := Verdict{Allowed: next() % 2, Remaining: next() << 40, RetryAfter: next(), ResetAfter: next() << 20}
				if next()%3 == 0 {
					v.Next, v.HasNext = next()<<30, true
				}
				reply = encodeCheck(reply, v)
			}
		}
		if err := splitReply(string(reply), batch); err != nil {
			t.Fatalf("a well-formed reply %q for %d requests: %v", reply, len(batch), err)
		}
		checkRecords(t, string(reply), batch)

		// The same reply corrupted: cut, grown or changed at one byte.
		if len(reply) == 0 {
			return
		}
		i := int(at) % len(reply)
		switch how % 3 {
		case 0:
			reply = reply[:i]
		case 1:
			reply = append(reply, with)
		default:
			reply[i] = with
		}
		batch = fuzzBatch(shape)
		if err := splitReply(string(reply), batch); err == nil {
			checkRecords(t, string(reply), batch)
		}
	})
}

// refSlot is Redis Cluster's key slot as its specification writes it,
// written here apart from HashSlot: CRC16/XMODEM, bit by bit, of the text
// between the first '{' and the next '}' when it is not empty, else of the
// whole key; modulo 16384.
func refSlot(key string) int {
	s := key
	if open := strings.Index(key, "{"); open >= 0 {
		if end := strings.Index(key[open+1:], "}"); end > 0 {
			s = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc & 16383)
}

// FuzzHashSlotAndTokenKey checks, for any key and token, that HashSlot is
// Redis Cluster's slot; that the name StoredKey gives the key is in the
// key's slot, has the hash tag storedTag says, and reads back as the key;
// and that the key remembering a Settle's token is in the key's slot and
// reads back as the one (key, token) pair it was made of.
func FuzzHashSlotAndTokenKey(f *testing.F) {
	for _, s := range [][2]string{
		{"", ""}, {"user:1000", "req-1"}, {"{user1000}.following", "{t}"}, {"foo{}{bar}", "a:b}"},
		{"ac}me", "}{"}, {"{}", "x"}, {"ratelimit:tb:10:360000000:{tenant}:user", "tok"}, {"}{a}", ":"},
		{"{acme}:alice", "x:y"}, {"{acme}:alice:x", "y"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, key, token string) {
		slot := HashSlot(key)
		if want := refSlot(key); slot != want {
			t.Fatalf("HashSlot(%q) = %d, Redis says %d", key, slot, want)
		}
		stored := StoredKey("ratelimit:tb:10:100000:", "day:UTC:", key)
		if refSlot(stored) != slot {
			t.Fatalf("the stored name %q of %q is in slot %d, not %d", stored, key, refSlot(stored), slot)
		}
		if hashTag(stored) != storedTag(key) {
			t.Fatalf("the stored name %q of %q has hash tag %q, storedTag says %q", stored, key, hashTag(stored), storedTag(key))
		}
		if got := KeyOf(FormAfter(stored[len("ratelimit:tb:10:100000:"):], 2)); got != key {
			t.Fatalf("the stored name %q of %q reads back as %q", stored, key, got)
		}
		name := tokenKey(stored, token)
		if again := tokenKey(stored, token); again != name {
			t.Fatalf("tokenKey(%q, %q) is %q, then %q", stored, token, name, again)
		}
		if refSlot(name) != slot {
			t.Fatalf("the token key %q of %q is in slot %d, not %d", name, stored, refSlot(name), slot)
		}
		if k, tok, ok := readTokenKey(name); !ok || k != stored || tok != token {
			t.Fatalf("the token key %q of (%q, %q) reads back as (%q, %q, %v)", name, stored, token, k, tok, ok)
		}
	})
}

// readTokenKey returns the key and token whose tokenKey is name.
func readTokenKey(name string) (key, token string, ok bool) {
	rest, ok := strings.CutPrefix(name, tokenPrefix)
	if !ok {
		return "", "", false
	}
	if strings.HasPrefix(rest, "{") {
		end := strings.IndexByte(rest, '}')
		if end != 4 {
			return "", "", false
		}
		rest = rest[end+1:]
	}
	n, rest, ok := strings.Cut(rest, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size+1 > len(rest) || rest[size] != ':' {
		return "", "", false
	}
	return rest[:size], rest[size+1:], true
}
