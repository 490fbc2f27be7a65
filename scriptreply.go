package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// The batch script's reply is binary, so that the server formats no number
// as text (see scripts/batch.lua, Returns): a record per request, in
// order. An answered request's record holds checkRecordSize bytes per
// check: allowed (0 or 1), then remaining, retry_after and reset_after
// (µs) as big-endian 64-bit integers. A refused request's record is
// refusedMark, the number of the refused check from 1, the length of the
// reason (two bytes, big-endian) and the reason.
const (
	checkRecordSize = 25
	refusedMark     = 0xFF
)

// splitReply sets the line of each request of batch to its record of
// reply, or returns an error when reply is not one record per request,
// no more, no fewer.
func splitReply(reply string, batch []*pending) error {
	off := 0
	for _, p := range batch {
		end := off + 1
		switch {
		case off >= len(reply):
			return fmt.Errorf("unexpected reply from Redis script: %d bytes for %d requests", len(reply), len(batch))
		case reply[off] == refusedMark && off+4 <= len(reply):
			end = off + 4 + (int(reply[off+2])<<8 | int(reply[off+3]))
		case reply[off] != refusedMark:
			end = off + checkRecordSize*(1+len(p.more))
		}
		if end > len(reply) || end == off+1 {
			return fmt.Errorf("unexpected reply from Redis script: %d bytes for %d requests", len(reply), len(batch))
		}
		p.line, off = reply[off:end], end
	}
	if off != len(reply) {
		return fmt.Errorf("unexpected reply from Redis script: %d bytes left over after %d requests", len(reply)-off, len(batch))
	}
	return nil
}

// refusedCheck returns the number (from 1) of the check a refusal record
// names, and its reason; ok is false for a record that is not a refusal.
func refusedCheck(record string) (check int, reason string, ok bool) {
	if len(record) < 4 || record[0] != refusedMark {
		return 0, "", false
	}
	return int(record[1]), record[4:], true
}

// decisionFromLine checks the batch script's record for a request of one
// check and turns it into a Result. A record of any other shape is an
// error: a script reply is never trusted to allow.
func decisionFromLine(record string, limit int) (Result, error) {
	return parseLine(record, limit, false)
}

// parseLine parses one check's record, as decisionFromLine does. With
// part, the check is one of several of a request, and may be denied with
// no wait of its own (another check denied).
func parseLine(record string, limit int, part bool) (Result, error) {
	if len(record) != checkRecordSize {
		return Result{}, fmt.Errorf("unexpected reply from Redis script: %q", record)
	}
	allowed := int64(record[0])
	remaining, retry, reset := be64(record[1:9]), be64(record[9:17]), be64(record[17:25])
	const maxMicros = math.MaxInt64 / int64(time.Microsecond)
	switch {
	case allowed != 0 && allowed != 1,
		remaining < 0 || remaining > int64(limit),
		retry < 0 || retry > maxMicros || allowed == 1 && retry != 0 || allowed == 0 && retry == 0 && !part,
		reset < 0 || reset > maxMicros:
		return Result{}, fmt.Errorf("reply from Redis script out of range: %q", record)
	}
	return Result{
		Allowed:    allowed == 1,
		Limit:      limit,
		Remaining:  int(remaining),
		RetryAfter: time.Duration(retry) * time.Microsecond,
		ResetAfter: time.Duration(reset) * time.Microsecond,
	}, nil
}

// be64 reads the big-endian 64-bit integer in the 8 bytes of b.
func be64(b string) int64 {
	_ = b[7]
	return int64(uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]))
}
