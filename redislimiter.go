package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisLimiter is what the Redis limiters share: decisions on prefix + key
// by the batch script, one check per request with the algorithm's name, the
// limit and one more number of the algorithm's as arguments, sent alone or
// coalesced with others (co, nil without coalescing), and replies that are
// checked before they are believed.
type redisLimiter struct {
	name   string // the limiter's name in errors
	client redis.Scripter
	prefix string
	limit  int
	args   [2]any // limit and param, formatted once
	algo   any    // the batch script's name of the algorithm: "t", "g" or "w"
	co     *coalescer
}

// redisSpec is everything a Redis limiter is built from, its numbers already
// checked by its constructor.
type redisSpec struct {
	kind          string // the constructor's name, in configuration errors
	name          string // the limiter's name, in Allow's errors
	algo          string // the batch script's name of the algorithm: "t", "g" or "w"
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
	r := redisLimiter{
		name:   spec.name,
		client: client,
		prefix: prefix,
		limit:  spec.limit,
		args:   [2]any{limit, param},
		algo:   spec.algo,
	}
	if !cfg.noCoalesce && routeOf(client) != routeAlone {
		r.co = &coalescer{maxInFlight: defaultMaxInFlight, maxBatch: defaultMaxBatch, send: r.sendBatch}
	}
	return r, nil
}

// allow decides n for key. See Limiter for the contract. With coalescing,
// the call may travel in one script call with others (see coalescer);
// without, it is one call of its own.
func (r *redisLimiter) allow(ctx context.Context, key string, n int) (Result, error) {
	if ctx == nil {
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s: %w", r.name, errNilContext)
	}
	if err := checkCost(n, r.limit); err != nil {
		return Result{Limit: r.limit}, err
	}
	p := &pending{ctx: ctx, key: r.prefix + key, n: n}
	if r.co == nil {
		r.sendBatch(ctx, []*pending{p})
	} else if !r.co.do(p) {
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s %q: %w", r.name, p.key, ctx.Err())
	}
	return p.res, p.err
}

// decision turns one request's line of the batch script's reply into its
// answer.
func (r *redisLimiter) decision(key string, line string) (Result, error) {
	if reason, refused := strings.CutPrefix(line, "!1 "); refused {
		// The script refused a key that does not hold its state: that
		// concerns this key's data, not the backend.
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s %q: %w: %s", r.name, key, ErrCorruptState, reason)
	}
	res, err := decisionFromLine(line, r.limit)
	if err != nil {
		return Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s %q: %w", r.name, key, err)
	}
	return res, nil
}

// decisionFromLine checks the batch script's line for a request of one
// check, "allowed remaining retry_after reset_after" (allowed 0 or 1, the
// waits in µs), and turns it into a Result. A line of any other shape is an
// error: a script reply is never trusted to allow.
func decisionFromLine(text string, limit int) (Result, error) {
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
