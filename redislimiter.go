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

// stateErrorCode starts the error reply with which a script refuses a key that
// does not hold its state (see the scripts' headers).
const stateErrorCode = "RATELIMIT_STATE "

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

// redisSpec is everything a Redis limiter is built from, its numbers already
// checked by its constructor.
type redisSpec struct {
	kind          string // the constructor's name, in configuration errors
	name          string // the limiter's name, in Allow's errors
	script        *redis.Script
	defaultPrefix string // the algorithm's Default*Prefix
	limit         int    // the script's first argument
	param         int64  // the script's second argument, the algorithm's own number
}

// newRedisLimiter checks what every Redis limiter's constructor checks (the
// options and the client) and returns the limiter spec describes, whole. Its
// key prefix is the one WithKeyPrefix gives, exactly; by default, the
// algorithm's default prefix followed by "<limit>:<param>:", so that limiters
// of one algorithm whose scripts would decide differently never share a key
// unless told to.
func newRedisLimiter(client redis.Scripter, spec redisSpec, opts []Option) (redisLimiter, error) {
	cfg, err := applyOptions(spec.kind, onRedis, opts)
	if err != nil {
		return redisLimiter{}, err
	}
	if isNil(client) {
		return redisLimiter{}, fmt.Errorf("%w: %s: nil Redis client", ErrInvalidConfig, spec.kind)
	}
	limit, param := strconv.Itoa(spec.limit), strconv.FormatInt(spec.param, 10)
	prefix := spec.defaultPrefix + limit + ":" + param + ":"
	if cfg.prefixSet {
		prefix = cfg.prefix
	}
	return redisLimiter{
		name:   spec.name,
		client: client,
		script: spec.script,
		prefix: prefix,
		limit:  spec.limit,
		args:   [2]any{limit, param},
	}, nil
}

// notBuilt is the error of a call on a nil or zero-value Redis limiter of the
// named type, which its constructor never returns.
func notBuilt(typ string) error {
	return fmt.Errorf("%w: a nil or zero-value *%s; create one with New%s", ErrInvalidConfig, typ, typ)
}

// allow decides n for key with one script call. See Limiter for the
// contract.
func (r *redisLimiter) allow(ctx context.Context, key string, n int) (Result, error) {
	if ctx == nil {
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
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
	} else if redis.HasErrorPrefix(err, stateErrorCode) {
		// The script refused a key that does not hold its state: that
		// concerns this key's data, not the backend.
		why := strings.TrimPrefix(strings.TrimPrefix(err.Error(), "ERR "), stateErrorCode)
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s %q: %w: %s", r.name, call.keys[0], ErrCorruptState, why)
	}
	return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s %q: %w", r.name, call.keys[0], err)
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
