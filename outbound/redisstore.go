package outbound

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/nilcheck"
	"github.com/redis/go-redis/v9"
)

// DefaultStorePrefix is the prefix of a RedisStore's keys when
// NewRedisStore is given "".
const DefaultStorePrefix = "ratelimit:outbound:"

// MaxPartitionLength is the longest partition, in bytes, a RedisStore
// accepts: a longer one is an error wrapping ratelimit.ErrInvalidKey.
const MaxPartitionLength = ratelimit.DefaultMaxKeyLength

// maxStoreDuration bounds the durations a RedisStore writes, so that the
// script's arithmetic on microseconds stays exact: ten years.
const maxStoreDuration = 10 * 365 * 24 * time.Hour

//go:embed redisstore.lua
var redisStoreSource string

// redisStoreScript runs redisstore.lua: EVALSHA, and EVAL when the server
// does not have it yet.
var redisStoreScript = redis.NewScript(redisStoreSource)

// RedisStore is a Store in Redis, shared by every Upstream built with a
// RedisStore on the same server and prefix: what one replica learns of an
// upstream pauses or slows every replica. Each partition is one HASH under
// prefix + partition, with a TTL that ends when its pause has ended and
// its policy is forgotten; times are the Redis server's (its TIME), so the
// replicas' clocks do not matter. On a Redis Cluster each partition is one
// key, served by its node. Each method is one script call.
//
// A key that holds anything else (another type, other fields) is an error
// wrapping ratelimit.ErrCorruptState, and is left as it was. Redis's
// failures are errors wrapping ratelimit.ErrBackend. It is safe for
// concurrent use.
type RedisStore struct {
	client redis.Scripter
	prefix string
}

// NewRedisStore returns a RedisStore on client whose keys are prefix +
// partition, or DefaultStorePrefix + partition for a prefix of "". A nil
// client (a typed nil too) is an error wrapping ratelimit.ErrInvalidConfig.
func NewRedisStore(client redis.Scripter, prefix string) (*RedisStore, error) {
	if nilcheck.IsNil(client) {
		return nil, fmt.Errorf("%w: outbound: NewRedisStore: nil client", ratelimit.ErrInvalidConfig)
	}
	if prefix == "" {
		prefix = DefaultStorePrefix
	}
	return &RedisStore{client: client, prefix: prefix}, nil
}

// Load returns partition's state now, in the server's time.
func (s *RedisStore) Load(ctx context.Context, partition string) (State, error) {
	reply, err := s.run(ctx, partition, "L")
	if err != nil {
		return State{}, err
	}
	v, ok := reply.([]any)
	if !ok || len(v) != 4 {
		return State{}, s.badReply(partition, reply)
	}
	var us [4]int64
	for i := range v {
		n, ok := v[i].(int64)
		if !ok || n < 0 {
			return State{}, s.badReply(partition, reply)
		}
		us[i] = n
	}
	st := State{Pause: time.Duration(us[0]) * time.Microsecond}
	if us[1] > 0 && us[2] > 0 && us[3] > 0 {
		st.Policy = ratelimit.Policy{Limit: int(us[1]), Window: time.Duration(us[2]) * time.Microsecond}
		st.PolicyLeft = time.Duration(us[3]) * time.Microsecond
	}
	return st, nil
}

// Pause makes partition paused for at least d from now (d > 0; at most ten
// years are stored).
func (s *RedisStore) Pause(ctx context.Context, partition string, d time.Duration) error {
	if d <= 0 {
		return errPauseNotPositive(d)
	}
	_, err := s.run(ctx, partition, "P", micros(d))
	return err
}

// Learn makes p partition's stated limit for keep from now (keep > 0), or
// forgets it for the zero p, and reports whether the limit changed. p's
// Limit must be > 0 and at most 2^52, and its Window at least 1µs, unless
// p is zero; the Window is kept in whole microseconds.
func (s *RedisStore) Learn(ctx context.Context, partition string, p ratelimit.Policy, keep time.Duration) (bool, error) {
	if keep <= 0 {
		return false, errKeepNotPositive(keep)
	}
	var reply any
	var err error
	if p == (ratelimit.Policy{}) {
		reply, err = s.run(ctx, partition, "K", 0)
	} else {
		if p.Limit <= 0 || p.Limit > maxLimit || p.Window < time.Microsecond {
			return false, fmt.Errorf("%w: outbound: a learned policy of %d per %v; the limit must be in [1, 2^52] and the window at least 1µs", ratelimit.ErrInvalidConfig, p.Limit, p.Window)
		}
		reply, err = s.run(ctx, partition, "K", p.Limit, micros(p.Window), micros(keep))
	}
	if err != nil {
		return false, err
	}
	changed, ok := reply.(int64)
	if !ok || changed != 0 && changed != 1 {
		return false, s.badReply(partition, reply)
	}
	return changed == 1, nil
}

// micros returns d in whole microseconds, at least 1 and at most
// maxStoreDuration's.
func micros(d time.Duration) int64 {
	return int64(max(min(d, maxStoreDuration)/time.Microsecond, 1))
}

// run calls the script on partition's key with args, and returns its reply
// or an error of one of the package's classes.
func (s *RedisStore) run(ctx context.Context, partition string, args ...any) (any, error) {
	if s == nil || s.client == nil {
		return nil, errNilStore
	}
	if len(partition) > MaxPartitionLength {
		return nil, fmt.Errorf("%w: outbound: a partition of %d bytes; at most %d", ratelimit.ErrInvalidKey, len(partition), MaxPartitionLength)
	}
	key := s.prefix + partition
	reply, err := redisStoreScript.Run(ctx, s.client, []string{key}, args...).Result()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && (strings.HasPrefix(rerr.Error(), "CORRUPT") || strings.HasPrefix(rerr.Error(), "WRONGTYPE")) {
			return nil, fmt.Errorf("%w: outbound: the key of partition %s: %v", ratelimit.ErrCorruptState, ratelimit.KeyDigest(partition), err)
		}
		return nil, fmt.Errorf("%w: outbound: the store's script on the key of partition %s: %w", ratelimit.ErrBackend, ratelimit.KeyDigest(partition), err)
	}
	return reply, nil
}

// badReply is the error of a reply the script never gives.
func (s *RedisStore) badReply(partition string, reply any) error {
	return fmt.Errorf("%w: outbound: the store's script on the key of partition %s answered %v", ratelimit.ErrBackend, ratelimit.KeyDigest(partition), reply)
}
