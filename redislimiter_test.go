package ratelimit

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// prefixedLimiter is a Redis limiter: a Limiter that says its key prefix.
type prefixedLimiter interface {
	Limiter
	KeyPrefix() string
}

// redisKind is one Redis limiter, built as limit per period.
type redisKind struct {
	name   string
	window bool // a fixed window, rather than a bucket
	new    func(client redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (prefixedLimiter, error)
}

var redisKinds = []redisKind{
	{"RedisTokenBucket", false, func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (prefixedLimiter, error) {
		return NewRedisTokenBucket(c, Per(limit, period), limit, opts...)
	}},
	{"RedisGCRA", false, func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (prefixedLimiter, error) {
		return NewRedisGCRA(c, limit, period, opts...)
	}},
	{"RedisFixedWindow", true, func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (prefixedLimiter, error) {
		return NewRedisFixedWindow(c, limit, period, opts...)
	}},
	{"RedisSlidingCounter", true, func(c redis.Scripter, limit int, period time.Duration, opts ...RedisOption) (prefixedLimiter, error) {
		return NewRedisSlidingCounter(c, limit, period, opts...)
	}},
}

// checkDefaultPrefixesTellConfigurationsApart checks, for each Redis limiter
// on client, that two of different limits under default options keep apart:
// using up the small one leaves the large one full. Given one explicit
// prefix, they share the key on purpose.
func checkDefaultPrefixesTellConfigurationsApart(t *testing.T, client redis.Scripter) {
	ctx := context.Background()
	wantPrefixes := map[string][2]string{
		// 100 and 10 per minute: 600000 and 6000000 µs per token, or a
		// window of 60000 ms.
		"RedisTokenBucket":    {"ratelimit:tb:100:600000:", "ratelimit:tb:10:6000000:"},
		"RedisGCRA":           {"ratelimit:gcra:100:600000:", "ratelimit:gcra:10:6000000:"},
		"RedisFixedWindow":    {"ratelimit:fw:100:60000:", "ratelimit:fw:10:60000:"},
		"RedisSlidingCounter": {"ratelimit:sc:100:60000:", "ratelimit:sc:10:60000:"},
	}
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			large, err := kind.new(client, 100, time.Minute)
			require.NoError(t, err)
			small, err := kind.new(client, 10, time.Minute)
			require.NoError(t, err)
			assert.Equal(t, wantPrefixes[kind.name], [2]string{large.KeyPrefix(), small.KeyPrefix()})
			for i := 0; i < 10; i++ {
				res, err := small.Allow(ctx, "shared", 1)
				require.NoError(t, err)
				require.True(t, res.Allowed, "call %d", i)
			}
			res, err := small.Allow(ctx, "shared", 1)
			require.NoError(t, err)
			assert.False(t, res.Allowed, "the small limiter is used up")
			res, err = large.Allow(ctx, "shared", 0)
			require.NoError(t, err)
			assert.Equal(t, 100, res.Remaining, "the large limiter is untouched")

			// The same explicit prefix: a redeploy with a new limit keeps
			// what the key has used.
			large, err = kind.new(client, 100, time.Minute, WithKeyPrefix("app:"+kind.name+":"))
			require.NoError(t, err)
			small, err = kind.new(client, 10, time.Minute, WithKeyPrefix("app:"+kind.name+":"))
			require.NoError(t, err)
			assert.Equal(t, "app:"+kind.name+":"+appStates[kind.name], large.KeyPrefix())
			for i := 0; i < 10; i++ {
				_, err := small.Allow(ctx, "shared", 1)
				require.NoError(t, err)
			}
			res, err = large.Allow(ctx, "shared", 0)
			require.NoError(t, err)
			assert.Less(t, res.Remaining, 100, "the key's use is shared")
		})
	}
}

// appStates is what follows a prefix given by WithKeyPrefix in the keys of
// checkDefaultPrefixesTellConfigurationsApart's limiters: the name of their
// state, and a sliding counter's window.
var appStates = map[string]string{
	"RedisTokenBucket":    "tb:",
	"RedisGCRA":           "gcra:",
	"RedisFixedWindow":    "fw:",
	"RedisSlidingCounter": "sc:60000:",
}

func TestRedisDefaultPrefixesTellConfigurationsApart(t *testing.T) {
	_, client, _ := miniredisClock(t)
	checkDefaultPrefixesTellConfigurationsApart(t, client)
}

func TestRedisConfigurationsWithTheSameScriptArgumentsShareAPrefix(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	// 3 a second and 3 a second and a nanosecond are both 333333 µs per
	// token: they decide alike.
	a, err := NewRedisTokenBucket(client, PerSecond(3), 5)
	require.NoError(t, err)
	b, err := NewRedisTokenBucket(client, Per(3, time.Second+time.Nanosecond), 5)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:tb:5:333333:", a.KeyPrefix())
	assert.Equal(t, a.KeyPrefix(), b.KeyPrefix())
	// A minute and a nanosecond more, over 7: both 8571429 µs.
	g1, err := NewRedisGCRA(client, 7, time.Minute)
	require.NoError(t, err)
	g2, err := NewRedisGCRA(client, 7, time.Minute+time.Nanosecond)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:gcra:7:8571429:", g1.KeyPrefix())
	assert.Equal(t, g1.KeyPrefix(), g2.KeyPrefix())
	w, err := NewRedisFixedWindow(client, 5, 1500*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, "ratelimit:fw:5:1500:", w.KeyPrefix())
	// An explicit prefix is used as given, the empty one too, with the
	// name of the state.
	e, err := NewRedisFixedWindow(client, 5, time.Second, WithKeyPrefix(""))
	require.NoError(t, err)
	assert.Equal(t, "fw:", e.KeyPrefix())
}

// keySnapshot is everything about a Redis key a limiter could change.
type keySnapshot struct {
	typ   string
	value any
	pttl  time.Duration // as go-redis reads PTTL: -1 without a TTL
}

// snapshotKey reads key's type, value and PTTL through client.
func snapshotKey(t *testing.T, client redis.Cmdable, key string) keySnapshot {
	t.Helper()
	ctx := context.Background()
	var s keySnapshot
	var err error
	s.typ, err = client.Type(ctx, key).Result()
	require.NoError(t, err)
	switch s.typ {
	case "string":
		s.value, err = client.Get(ctx, key).Result()
	case "hash":
		s.value, err = client.HGetAll(ctx, key).Result()
	case "list":
		s.value, err = client.LRange(ctx, key, 0, -1).Result()
	case "set":
		var members []string
		members, err = client.SMembers(ctx, key).Result()
		sort.Strings(members)
		s.value = members
	default:
		t.Fatalf("snapshot of a %s", s.typ)
	}
	require.NoError(t, err)
	s.pttl, err = client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	return s
}

// requireUnchanged checks that key is as before: type, value, and TTL (or
// the lack of one). A TTL may only have run down by the time since before.
func requireUnchanged(t *testing.T, client redis.Cmdable, key string, before keySnapshot) {
	t.Helper()
	after := snapshotKey(t, client, key)
	require.Equal(t, before.typ, after.typ, key)
	require.Equal(t, before.value, after.value, key)
	if before.pttl < 0 {
		require.Equal(t, before.pttl, after.pttl, "%s: still no TTL", key)
		return
	}
	require.LessOrEqual(t, after.pttl, before.pttl, key)
	require.Greater(t, after.pttl, before.pttl-5*time.Second, "%s: the TTL was not reset", key)
}

// foreignValue puts something under a key that is not a limiter's state.
type foreignValue struct {
	name string
	set  func(ctx context.Context, c redis.Cmdable, key string) error
}

// foreignString is a STRING v with a TTL of an hour, or none if ttl is 0.
func foreignString(name, v string, ttl time.Duration) foreignValue {
	return foreignValue{name, func(ctx context.Context, c redis.Cmdable, key string) error {
		return c.Set(ctx, key, v, ttl).Err()
	}}
}

// foreignHash is a HASH of fields with a TTL of ttl, or none if ttl is 0.
func foreignHash(name string, ttl time.Duration, fields ...string) foreignValue {
	return foreignValue{name, func(ctx context.Context, c redis.Cmdable, key string) error {
		if err := c.HSet(ctx, key, fields).Err(); err != nil {
			return err
		}
		if ttl > 0 {
			return c.PExpire(ctx, key, ttl).Err()
		}
		return nil
	}}
}

// foreignTypes are values of other Redis types than a STRING or a HASH.
var foreignTypes = []foreignValue{
	{"a LIST", func(ctx context.Context, c redis.Cmdable, key string) error {
		return c.RPush(ctx, key, "a", "b").Err()
	}},
	{"a SET", func(ctx context.Context, c redis.Cmdable, key string) error {
		if err := c.SAdd(ctx, key, "x", "y").Err(); err != nil {
			return err
		}
		return c.Expire(ctx, key, time.Hour).Err()
	}},
}

// foreignNumbers are STRINGs that are not a whole number as the scripts
// write one: decimal digits without a leading zero, below 2^53.
func foreignNumbers() []foreignValue {
	var vs []foreignValue
	for _, v := range []string{"2.5", "0x10", " 5", "5 ", "1e3", "-1", "+1", "", "05", "nan", "inf", "soon", "9007199254740992", "99999999999999999"} {
		vs = append(vs, foreignString(strconv.Quote(v), v, time.Hour))
	}
	return vs
}

// foreignValues returns, for a Redis limiter kind, values under a key that
// are not its state.
func foreignValues(kind string) []foreignValue {
	vs := append([]foreignValue(nil), foreignTypes...)
	const valid = "1732934400123456" // a time in µs, a count, a credit
	switch kind {
	case "RedisTokenBucket":
		vs = append(vs,
			foreignString("a STRING", "5", time.Hour),
			foreignHash("an application HASH", 0, "user", "alice", "role", "admin"),
			foreignHash("an application HASH with a TTL", time.Hour, "user", "alice", "role", "admin"),
			foreignHash("credit and last_refill, the bucket's shape before tat", time.Hour, "credit", "5", "last_refill", valid),
			foreignHash("credit only", time.Hour, "credit", "5"),
			foreignHash("last_refill only", time.Hour, "last_refill", valid),
			foreignHash("a third field", time.Hour, "credit", "5", "last_refill", valid, "user", "alice"),
			foreignHash("a bucket without a TTL", 0, "credit", "5", "last_refill", valid),
			foreignHash("credit \"-0\"", time.Hour, "credit", "-0", "last_refill", valid),
			foreignHash("credit \"--1\"", time.Hour, "credit", "--1", "last_refill", valid),
			foreignHash("a tat without a TTL", 0, "tat", valid),
			foreignHash("tat and another field", time.Hour, "tat", valid, "user", "alice"),
			foreignHash("a keyed bucket's tat and interval", time.Hour, "tat", valid, "interval", "1000000"),
		)
		for _, v := range foreignNumbers() {
			if v.name == `"-1"` {
				// A bucket in debt has a credit below 0.
				v = foreignString(`"-05"`, "-05", time.Hour)
			}
			vs = append(vs,
				foreignHash("credit "+v.name, time.Hour, "credit", v.name[1:len(v.name)-1], "last_refill", valid),
				foreignHash("last_refill "+v.name, time.Hour, "credit", "5", "last_refill", v.name[1:len(v.name)-1]),
				foreignHash("tat "+v.name, time.Hour, "tat", v.name[1:len(v.name)-1]))
		}
	case "RedisGCRA":
		vs = append(vs, foreignNumbers()...)
		vs = append(vs,
			foreignHash("a HASH", time.Hour, "user", "alice", "role", "admin"),
			foreignString("a time without a TTL", valid, 0))
	case "RedisFixedWindow":
		vs = append(vs, foreignNumbers()...)
		vs = append(vs,
			foreignHash("a HASH", time.Hour, "user", "alice", "role", "admin"),
			foreignString("a zero count", "0", time.Hour),
			foreignString("a count without a TTL", "1", 0))
	}
	return vs
}

// checkForeignStateIsLeftAlone checks, for each Redis limiter on client,
// that a key holding anything but the limiter's own state is refused with
// an error wrapping ErrCorruptState that names the key, for a request and
// for a peek, and is left exactly as it was.
func checkForeignStateIsLeftAlone(t *testing.T, client redis.UniversalClient) {
	ctx := context.Background()
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			l, err := kind.new(client, 3, time.Second)
			require.NoError(t, err)
			for i, v := range foreignValues(kind.name) {
				key := "foreign:" + strconv.Itoa(i)
				redisKey := storedKey(l.KeyPrefix(), key)
				require.NoError(t, v.set(ctx, client, redisKey), v.name)
				before := snapshotKey(t, client, redisKey)
				for _, n := range []int{1, 0} {
					res, err := l.Allow(ctx, key, n)
					require.ErrorIs(t, err, ErrCorruptState, "%s, n = %d", v.name, n)
					assert.Contains(t, err.Error(), strconv.Quote(l.KeyPrefix())+"+"+KeyDigest(key), "%s: the error names the key by its digest", v.name)
					assert.Equal(t, Result{Limit: 3}, res, v.name)
				}
				requireUnchanged(t, client, redisKey, before)
			}
			// A key of the limiter's own is still decided.
			res, err := l.Allow(ctx, "own", 1)
			require.NoError(t, err)
			assert.True(t, res.Allowed)
			res, err = l.Allow(ctx, "own", 1)
			require.NoError(t, err)
			assert.True(t, res.Allowed)
		})
	}
}

func TestRedisLimitersLeaveForeignStateAlone(t *testing.T) {
	t.Parallel()
	_, client, _ := miniredisClock(t)
	checkForeignStateIsLeftAlone(t, client)
}

// redisReplyError is an error reply as go-redis returns one.
type redisReplyError string

func (e redisReplyError) Error() string { return string(e) }
func (redisReplyError) RedisError()     {}

func TestRedisLimitersTellCorruptStateFromBackendErrors(t *testing.T) {
	cases := []struct {
		name    string
		reply   any
		err     error
		corrupt bool
	}{
		{"a refusal", refusalRecord(1, "not a STRING"), nil, true},
		{"a refusal-like error reply", nil, redisReplyError("ERR RATELIMIT_STATE not a STRING"), false},
		{"WRONGTYPE from elsewhere", nil, redisReplyError("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{"another error reply", nil, redisReplyError("ERR something else"), false},
		{"OOM", nil, redisReplyError("OOM command not allowed when used memory > 'maxmemory'"), false},
		{"not a reply", nil, errors.New("!from the network?"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, kind := range redisKinds {
				l, err := kind.new(cannedScripter{reply: tc.reply, err: tc.err}, 3, time.Second)
				require.NoError(t, err)
				res, err := l.Allow(context.Background(), "k", 1)
				require.Error(t, err)
				assert.Equal(t, Result{Limit: 3}, res)
				assert.Equal(t, tc.corrupt, errors.Is(err, ErrCorruptState), "%s: %v", kind.name, err)
				assert.Contains(t, err.Error(), strconv.Quote(l.KeyPrefix())+"+"+KeyDigest("k"), kind.name)
				if !tc.corrupt {
					assert.ErrorIs(t, err, tc.err, kind.name)
				}
			}
		})
	}
}

func TestRedisLimitersRefuseANilContextWithoutARoundTrip(t *testing.T) {
	var nilCtx context.Context
	for _, kind := range redisKinds {
		l, err := kind.new(refusingScripter{t: t}, 3, time.Second)
		require.NoError(t, err)
		for _, n := range []int{1, 0, -1, 4} {
			res, err := l.Allow(nilCtx, "k", n)
			require.ErrorIs(t, err, errNilContext, "%s, n = %d", kind.name, n)
			assert.Equal(t, Result{Limit: 3}, res, kind.name)
		}
	}
}

func TestRedisLimitersRefuseNilAndZeroValues(t *testing.T) {
	ctx := context.Background()
	for name, l := range map[string]Limiter{
		"nil RedisTokenBucket":  (*RedisTokenBucket)(nil),
		"zero RedisTokenBucket": &RedisTokenBucket{},
		"nil RedisGCRA":         (*RedisGCRA)(nil),
		"zero RedisGCRA":        &RedisGCRA{},
		"nil RedisFixedWindow":  (*RedisFixedWindow)(nil),
		"zero RedisFixedWindow": &RedisFixedWindow{},
	} {
		res, err := l.Allow(ctx, "k", 1)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), "create one with New", name)
		assert.Equal(t, Result{}, res, name)
		d, err := decideAny(ctx, l, "k", 1)
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.Zero(t, d, name)
		policies, err := l.(Decider).Policies(ctx, "k")
		require.ErrorIs(t, err, ErrInvalidConfig, name)
		assert.Nil(t, policies, name)
		assert.Equal(t, Policy{}, l.(interface{ Policy() Policy }).Policy(), name)
	}
}
