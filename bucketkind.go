package ratelimit

import (
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
)

// bucketKind declares the token bucket: TokenBucket in process,
// RedisTokenBucket on Redis.
type bucketKind struct{}

func (bucketKind) name() string { return "TokenBucket" }

func (bucketKind) letter(keyed bool) redisbatch.Kind {
	if keyed {
		return redisbatch.TokenBucketWithInterval
	}
	return redisbatch.TokenBucket
}

func (bucketKind) state(keyed bool) string {
	if keyed {
		return "tb-i"
	}
	return "tb"
}

func (bucketKind) redisWindow(limit int, param int64) time.Duration { return unitsWindow(limit, param) }

func (bucketKind) redisRule(param int64) rule { return rule{unit: param * int64(time.Microsecond)} }

func (bucketKind) inFlight() bool { return false }

func (bucketKind) blocks() blocks { return blocksByUnit }

func (bucketKind) share(p Policy, live int) Policy { return sharePolicy(p, live) }

func (bucketKind) twin(def Policy, _ Limiter, opts []Option) (Limiter, error) {
	// The rate as the in-process bucket reads it back: Limit per Window,
	// the Window being whole µs per token × Limit.
	return NewTokenBucket(Per(def.Limit, def.Window), def.Limit, opts...)
}

func (b *TokenBucket) kindOf() kind     { return bucketKind{} }
func (b *TokenBucket) limiter() Limiter { return b }

func (b *TokenBucket) engineObserver() *observer {
	if (*schedule)(b).built() {
		return &(*schedule)(b).obs
	}
	return nil
}

func (b *TokenBucket) clockBase() *clockBase {
	if (*schedule)(b).built() {
		return &(*schedule)(b).base
	}
	return nil
}

func (b *RedisTokenBucket) kindOf() kind              { return bucketKind{} }
func (b *RedisTokenBucket) limiter() Limiter          { return b }
func (b *RedisTokenBucket) engineObserver() *observer { return b.remote().engineObserver() }
func (b *RedisTokenBucket) remote() *redisLimiter     { return b.rate().remote() }
func (b *RedisTokenBucket) redisPart() redisPart      { return plainPart{b.remote()} }

// part returns b's engine as a Composite's part; nil unless b is built.
func (b *TokenBucket) part() partEngine { return schedulePartOf((*schedule)(b)) }
