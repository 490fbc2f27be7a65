package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// maxRedisSpan bounds, in microseconds, a Redis limiter's time from empty to
// full (or its window), so that the scripts' sums of it and the server's
// clock stay below 2^53, where Lua's doubles stop holding every integer, and
// convert to time.Duration without overflow.
const maxRedisSpan = 1 << 52

// decisionFromReply checks a Redis limiter script's reply, {allowed (0 or 1),
// remaining, retry_after µs, reset_after µs}, and turns it into a Result. Any
// reply of another shape is an error: a script reply is never trusted to
// allow.
func decisionFromReply(reply any, limit int) (Result, error) {
	fields, ok := reply.([]any)
	if !ok || len(fields) != 4 {
		return Result{Limit: limit}, fmt.Errorf("ratelimit: unexpected reply from Redis script: %#v", reply)
	}
	var v [4]int64
	for i, f := range fields {
		n, ok := f.(int64)
		if !ok {
			return Result{Limit: limit}, fmt.Errorf("ratelimit: unexpected reply from Redis script: field %d is %#v", i, f)
		}
		v[i] = n
	}
	allowed, remaining, retry, reset := v[0], v[1], v[2], v[3]
	const maxMicros = math.MaxInt64 / int64(time.Microsecond)
	switch {
	case allowed != 0 && allowed != 1,
		remaining < 0 || remaining > int64(limit),
		retry < 0 || retry > maxMicros || (allowed == 1 && retry != 0) || (allowed == 0 && retry == 0),
		reset < 0 || reset > maxMicros:
		return Result{Limit: limit}, fmt.Errorf("ratelimit: Redis script reply out of range: %v", v)
	}
	return Result{
		Allowed:    allowed == 1,
		Limit:      limit,
		Remaining:  int(remaining),
		RetryAfter: time.Duration(retry) * time.Microsecond,
		ResetAfter: time.Duration(reset) * time.Microsecond,
	}, nil
}
