package ratelimit

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxRedisSpan bounds, in microseconds, a Redis limiter's time from empty to
// full (or its window), so that the scripts' sums of it and the server's
// clock stay below 2^53, where Lua's doubles stop holding every integer, and
// convert to time.Duration without overflow.
const maxRedisSpan = 1 << 52

// redisLimiter is what the Redis limiters share: one script call per
// decision on one key, prefix + key, with the limit and one more number of the
// algorithm's as arguments, and a reply that is checked before it is
// believed.
//
// Every script takes KEYS[1] and ARGV {limit, param, n} and returns the
// string "allowed remaining retry_after reset_after": allowed is 0 or 1, the
// waits are in µs.
type redisLimiter struct {
	name   string // the limiter's name in errors
	client redis.Scripter
	script *redis.Script
	prefix string
	limit  int
	args   [2]any // limit and param, formatted once
}

// newRedisLimiter checks what every Redis limiter's constructor checks (the
// options, the client, the limit) and returns the shared part. kind is the
// constructor's name, limitName what its limit is called.
func newRedisLimiter(kind, name string, client redis.Scripter, script *redis.Script, defaultPrefix, limitName string, limit int, opts []Option) (redisLimiter, error) {
	cfg, err := applyOptions(kind, onRedis, opts)
	if err != nil {
		return redisLimiter{}, err
	}
	if isNil(client) {
		return redisLimiter{}, fmt.Errorf("%w: %s: nil Redis client", ErrInvalidConfig, kind)
	}
	if limit <= 0 {
		return redisLimiter{}, fmt.Errorf("%w: %s: %s %d must be > 0", ErrInvalidConfig, kind, limitName, limit)
	}
	prefix := defaultPrefix
	if cfg.prefixSet {
		prefix = cfg.prefix
	}
	return redisLimiter{name: name, client: client, script: script, prefix: prefix, limit: limit, args: [2]any{strconv.Itoa(limit)}}, nil
}

// setParam sets the script's second argument, the algorithm's own number.
func (r *redisLimiter) setParam(param int64) { r.args[1] = strconv.FormatInt(param, 10) }

// checkRedisSpan rejects a span of count × micros µs beyond maxRedisSpan;
// count and micros are >= 1.
func checkRedisSpan(kind string, count, micros int64) error {
	if count > maxRedisSpan/micros {
		return fmt.Errorf("%w: %s: %d × %d µs is beyond the 2^52 µs a Redis script can count exactly", ErrInvalidConfig, kind, count, micros)
	}
	return nil
}

// allow decides n for key with one script call. See Limiter for the
// contract.
func (r *redisLimiter) allow(ctx context.Context, key string, n int) (Result, error) {
	if err := checkCost(n, r.limit); err != nil {
		return Result{Limit: r.limit}, err
	}
	// The keys and arguments go in one allocation; go-redis copies both.
	call := &scriptCall{keys: [1]string{r.prefix + key}, args: [3]any{r.args[0], r.args[1], n}}
	reply, err := r.script.Run(ctx, r.client, call.keys[:], call.args[:]...).Result()
	if err == nil {
		var res Result
		if res, err = decisionFromReply(reply, r.limit); err == nil {
			return res, nil
		}
	}
	return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s %q: %w", r.name, r.prefix+key, err)
}

// scriptCall holds one call's KEYS and ARGV.
type scriptCall struct {
	keys [1]string
	args [3]any
}

// decisionFromReply checks a Redis limiter script's reply, the string
// "allowed remaining retry_after reset_after" (allowed 0 or 1, the waits in
// µs), and turns it into a Result. Any reply of another shape is an error: a
// script reply is never trusted to allow.
func decisionFromReply(reply any, limit int) (Result, error) {
	text, ok := reply.(string)
	if !ok {
		return Result{}, fmt.Errorf("unexpected reply from Redis script: %#v", reply)
	}
	var v [4]int64
	rest := text
	for i := range v {
		field, tail, found := strings.Cut(rest, " ")
		if found == (i == len(v)-1) {
			return Result{}, fmt.Errorf("unexpected reply from Redis script: %q", text)
		}
		n, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return Result{}, fmt.Errorf("unexpected reply from Redis script: %q", text)
		}
		v[i], rest = n, tail
	}
	allowed, remaining, retry, reset := v[0], v[1], v[2], v[3]
	const maxMicros = math.MaxInt64 / int64(time.Microsecond)
	switch {
	case allowed != 0 && allowed != 1,
		remaining < 0 || remaining > int64(limit),
		retry < 0 || retry > maxMicros || (allowed == 1) != (retry == 0),
		reset < 0 || reset > maxMicros:
		return Result{}, fmt.Errorf("reply from Redis script out of range: %q", text)
	}
	return Result{
		Allowed:    allowed == 1,
		Limit:      limit,
		Remaining:  int(remaining),
		RetryAfter: time.Duration(retry) * time.Microsecond,
		ResetAfter: time.Duration(reset) * time.Microsecond,
	}, nil
}
