package redisbatch

import (
	"fmt"
	"math"
	"time"
)

// The batch script's reply is binary, so that the server formats no number
// as text (see callformat.go, Returns): a record per request, in
// order. An answered request's record holds, per check, CheckSize bytes,
// or CheckSize + NextSize when its first byte has the bit NextMark: that
// byte, allowed (0 or 1) plus NextMark when the check tells its next
// unit, then remaining, retry_after and reset_after (µs) and, with
// NextMark, next_unit (µs), as big-endian 64-bit integers. A refused
// request's record is refusedMark, the number of the refused check from
// 1, the length of the reason (two bytes, big-endian) and the reason.
const (
	// CheckSize is the size in bytes of one check's part of a record
	// without a next unit.
	CheckSize = 25
	// NextSize is the size in bytes of the next unit that follows a
	// check's part whose first byte has NextMark.
	NextSize = 8
	// NextMark is the bit of a check's first byte that says its next
	// unit follows.
	NextMark    = 2
	refusedMark = 0xFF
)

// Record is one request's record of the batch script's reply: a check's
// verdict per check, or a refusal. Its methods read it as it is; the
// caller checks its numbers before believing them.
type Record string

// Refusal returns the number (from 1) of the check a refusal record names,
// and its reason; ok is false for a record that is not a refusal.
func (r Record) Refusal() (check int, reason string, ok bool) {
	if len(r) < 4 || r[0] != refusedMark {
		return 0, "", false
	}
	return int(r[1]), string(r[4:]), true
}

// Checks returns how many checks an answered record holds, each of the
// size its first byte tells; ok is false when they do not fill r exactly,
// or r is a refusal.
func (r Record) Checks() (n int, ok bool) {
	if len(r) == 0 || r[0] == refusedMark {
		return 0, false
	}
	off := 0
	for off < len(r) {
		off += checkSize(r[off])
		n++
	}
	return n, off == len(r)
}

// checkSize returns the size of a check's part of a record whose first
// byte is first.
func checkSize(first byte) int {
	if first&NextMark != 0 {
		return CheckSize + NextSize
	}
	return CheckSize
}

// Verdict is one check's part of an answered record, as the script wrote
// it, unchecked: Allowed should be 0 or 1, the others ≥ 0; the times are
// in µs. HasNext reports that the check told Next, the wait until one
// unit more than Remaining can be taken (0 when it did not).
type Verdict struct {
	Allowed                           int64
	Remaining, RetryAfter, ResetAfter int64
	Next                              int64
	HasNext                           bool
}

// Check returns check i (from 0) of an answered record; the caller has
// checked that r holds it (Checks).
func (r Record) Check(i int) Verdict {
	off := 0
	for range i {
		off += checkSize(r[off])
	}
	first := r[off]
	c := r[off : off+checkSize(first)]
	v := Verdict{
		Allowed:    int64(first &^ NextMark),
		Remaining:  be64(c[1:9]),
		RetryAfter: be64(c[9:17]),
		ResetAfter: be64(c[17:25]),
	}
	if first&NextMark != 0 {
		v.Next, v.HasNext = be64(c[25:33]), true
	}
	return v
}

// be64 reads the big-endian 64-bit integer in the 8 bytes of b.
func be64(b Record) int64 {
	_ = b[7]
	return int64(uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]))
}

// splitReply sets the Record of each request of batch to its record of
// reply, or returns an error when reply is not one record per request,
// no more, no fewer.
func splitReply(reply string, batch []*Request) error {
	off := 0
	for _, p := range batch {
		end := off + 1
		switch {
		case off >= len(reply):
			return fmt.Errorf("unexpected reply from Redis script: %d bytes for %d requests", len(reply), len(batch))
		case reply[off] == refusedMark && off+4 <= len(reply):
			end = off + 4 + (int(reply[off+2])<<8 | int(reply[off+3]))
		case reply[off] != refusedMark:
			end = off
			for range p.checks() {
				if end >= len(reply) {
					end = len(reply) + 1 // cut short
					break
				}
				end += checkSize(reply[end])
			}
		}
		if end > len(reply) || end == off+1 {
			return fmt.Errorf("unexpected reply from Redis script: %d bytes for %d requests", len(reply), len(batch))
		}
		p.Record, off = Record(reply[off:end]), end
	}
	if off != len(reply) {
		return fmt.Errorf("unexpected reply from Redis script: %d bytes left over after %d requests", len(reply)-off, len(batch))
	}
	return nil
}

// Fault is what is wrong with the record of a request of one check, found
// when the reply is split (see readReply): Believed when nothing is.
type Fault uint8

const (
	// Believed is the Fault of a record whose verdict may be believed.
	Believed Fault = iota
	// Refused is the Fault of a refusal: the script refused a key that
	// does not hold its state (Record.Refusal gives the reason).
	Refused
	// Malformed is the Fault of a record that is not one check's verdict.
	Malformed
	// OutOfRange is the Fault of a verdict whose numbers cannot be right:
	// a script reply is never trusted to allow.
	OutOfRange
)

// readReply splits reply into the records of batch (see splitReply), and
// decodes and checks the record of each request of one check, once, into
// its Verdict and Fault; units is the limit of the checks of requests that
// carry none (the Sender's own).
func readReply(reply string, batch []*Request, units int64) error {
	if err := splitReply(reply, batch); err != nil {
		return err
	}
	for _, p := range batch {
		if p.checks() != 1 {
			continue
		}
		if p.Limit != nil {
			p.decode(p.Limit.Units)
		} else {
			p.decode(units)
		}
	}
	return nil
}

// decode decodes p's record, of one check, into p.Verdict, and checks it
// against units, the check's limit: p.Fault says what is wrong, if
// anything. A Release's or Extend's verdict is decoded unchecked: its
// caller reads it as the lease it is.
func (p *Request) decode(units int64) {
	if _, _, refused := p.Record.Refusal(); refused {
		p.Fault = Refused
		return
	}
	if n, ok := p.Record.Checks(); !ok || n != 1 {
		p.Fault = Malformed
		return
	}
	p.Verdict = p.Record.Check(0)
	if p.Op != Release && p.Op != Extend && !p.Verdict.inRange(units) {
		p.Fault = OutOfRange
	}
}

// maxMicros is the most µs a time.Duration holds.
const maxMicros = math.MaxInt64 / int64(time.Microsecond)

// inRange reports whether v, the verdict of a check of limit units that is
// the only check of its request, can be right: Allowed 0 or 1, Remaining
// from 0 to units, a wait after a denial and none after an allowed call,
// times no longer than a time.Duration holds, and a next unit, when told,
// of 1 µs at least.
func (v Verdict) inRange(units int64) bool {
	switch {
	case v.Allowed != 0 && v.Allowed != 1,
		v.Remaining < 0 || v.Remaining > units,
		v.RetryAfter < 0 || v.RetryAfter > maxMicros || v.Allowed == 1 && v.RetryAfter != 0 || v.Allowed == 0 && v.RetryAfter == 0,
		v.ResetAfter < 0 || v.ResetAfter > maxMicros,
		v.HasNext && (v.Next < 1 || v.Next > maxMicros):
		return false
	}
	return true
}
