package ratelimit

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// kindShells are the limiter types of every kind, in process and on Redis,
// as nil pointers: enough to ask them their kind.
var kindShells = []Limiter{
	(*TokenBucket)(nil), (*RedisTokenBucket)(nil),
	(*GCRA)(nil), (*RedisGCRA)(nil),
	(*FixedWindow)(nil), (*RedisFixedWindow)(nil),
	(*SlidingLog)(nil), (*RedisSlidingLog)(nil),
	(*SlidingCounter)(nil), (*RedisSlidingCounter)(nil),
	(*CalendarWindow)(nil), (*RedisCalendarWindow)(nil),
	(*Concurrency)(nil), (*RedisConcurrency)(nil),
}

func TestEveryLimiterTypeNamesItsKindFromTheRegistry(t *testing.T) {
	found := map[string]int{}
	for _, l := range kindShells {
		typ := reflect.TypeOf(l).Elem().Name()
		e, ok := engineOf(l)
		require.True(t, ok, "%s is an engine", typ)
		k := e.kindOf()
		assert.Equal(t, strings.TrimPrefix(typ, "Redis"), k.name(), typ)
		assert.Contains(t, kinds[:], k, typ)
		assert.Nil(t, e.engineObserver(), "a nil %s has no observer", typ)
		_, local := l.(localEngine)
		_, remote := l.(remoteEngine)
		assert.Equal(t, strings.HasPrefix(typ, "Redis"), remote, typ)
		assert.NotEqual(t, local, remote, typ)
		found[k.name()]++
	}
	for _, k := range kinds {
		assert.Equal(t, 2, found[k.name()], "%s has a limiter in process and one on Redis", k.name())
	}
}

func TestNoTwoKindsShareAStateNameNorAScriptLetter(t *testing.T) {
	stateOf := map[string]string{}
	letterOf := map[string]string{}
	for _, k := range kinds {
		for _, keyed := range []bool{false, true} {
			state, letter := k.state(keyed), string(k.letter(keyed))
			if other, ok := stateOf[state]; ok {
				assert.Equal(t, k.name(), other, "state %q", state)
			}
			if other, ok := letterOf[letter]; ok {
				assert.Equal(t, k.name(), other, "letter %q", letter)
			}
			stateOf[state], letterOf[letter] = k.name(), k.name()
		}
		// A kind keeps another state keyed exactly when the script keeps
		// another algorithm for it.
		assert.Equal(t, k.letter(false) == k.letter(true), k.state(false) == k.state(true), k.name())
	}
}

// embeddingLimiter is a type of another package's kind: it embeds a limiter
// of this package and may answer otherwise.
type embeddingLimiter struct{ *TokenBucket }

func TestATypeThatEmbedsALimiterIsNotTakenForIt(t *testing.T) {
	b, err := NewTokenBucket(PerSecond(1), 10)
	require.NoError(t, err)
	_, ok := engineOf(b)
	assert.True(t, ok)
	w := embeddingLimiter{b}
	_, ok = engineOf(w)
	assert.False(t, ok)
	assert.Nil(t, observerOf(w))
	assert.Equal(t, Policy{}, policyOf(w))
	_, err = NewPrefetch(w, PrefetchConfig{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	res, err := w.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
}

// prefixed is a Redis limiter, which tells its key prefix.
type prefixed interface {
	Decider
	KeyPrefix() string
}

// TestEveryKindsKeyPrefixesStayAsStored pins, for every Redis kind, the key
// prefix by default, WithKeyPrefix, and both WithPolicyFunc: keys already
// stored keep their meaning only while these stay byte for byte.
func TestEveryKindsKeyPrefixesStayAsStored(t *testing.T) {
	_, client, _ := miniredisClock(t)
	pf := WithPolicyFunc(func(context.Context, string) (Policy, error) { return Policy{}, nil })
	cal := Calendar{Period: CalendarDay, Location: time.UTC}
	build := map[string]func(opts ...RedisOption) (prefixed, error){
		"tb": func(opts ...RedisOption) (prefixed, error) {
			return NewRedisTokenBucket(client, PerSecond(5), 10, opts...)
		},
		"gcra": func(opts ...RedisOption) (prefixed, error) {
			return NewRedisGCRA(client, 10, 2*time.Second, opts...)
		},
		"fw": func(opts ...RedisOption) (prefixed, error) {
			return NewRedisFixedWindow(client, 10, 2*time.Second, opts...)
		},
		"sl": func(opts ...RedisOption) (prefixed, error) {
			return NewRedisSlidingLog(client, 10, 2*time.Second, opts...)
		},
		"sc": func(opts ...RedisOption) (prefixed, error) {
			return NewRedisSlidingCounter(client, 10, 2*time.Second, opts...)
		},
		"cal": func(opts ...RedisOption) (prefixed, error) {
			return NewRedisCalendarWindow(client, 10, cal, opts...)
		},
		"inflight": func(opts ...RedisOption) (prefixed, error) {
			return NewRedisConcurrency(client, 10, 2*time.Second, opts...)
		},
	}
	want := map[string][4]string{
		"tb":       {"ratelimit:tb:10:200000:", "ratelimit:tb:keyed:10:200000:", "p:tb:", "p:tb-i:"},
		"gcra":     {"ratelimit:gcra:10:200000:", "ratelimit:gcra:keyed:10:200000:", "p:gcra:", "p:gcra-i:"},
		"fw":       {"ratelimit:fw:10:2000:", "ratelimit:fw:keyed:10:2000:", "p:fw:", "p:fw:"},
		"sl":       {"ratelimit:sl:10:2000:", "ratelimit:sl:keyed:10:2000:", "p:sl:", "p:sl:"},
		"sc":       {"ratelimit:sc:10:2000:", "ratelimit:sc:keyed:10:2000:", "p:sc:2000:", "p:sc:"},
		"cal":      {"ratelimit:cal:10:day:UTC:", "ratelimit:cal:keyed:10:day:", "p:cal:day:UTC:", "p:cal:"},
		"inflight": {"ratelimit:inflight:10:2000000:", "ratelimit:inflight:keyed:10:2000000:", "p:inflight:", "p:inflight:"},
	}
	for name, b := range build {
		var got [4]string
		for i, opts := range [][]RedisOption{nil, {pf}, {WithKeyPrefix("p:")}, {WithKeyPrefix("p:"), pf}} {
			l, err := b(opts...)
			require.NoError(t, err, name)
			got[i] = l.KeyPrefix()
			p, err := l.Policies(context.Background(), "k")
			require.NoError(t, err, name)
			window := 2 * time.Second
			if name == "cal" {
				window = 24 * time.Hour
			}
			assert.Equal(t, Policy{Limit: 10, Window: window}, p[0].Policy, name)
		}
		assert.Equal(t, want[name], got, name)
	}
	assert.Len(t, want, len(kinds))
}

// embeddingDecorator is a type of another package's kind that embeds a
// decorator of this package.
type embeddingDecorator struct{ *Shadow }

func TestDecoratorsAreWalkedThroughAndATypeThatEmbedsOneIsNot(t *testing.T) {
	a, err := NewTokenBucket(PerSecond(1), 10)
	require.NoError(t, err)
	b, err := NewGCRA(10, time.Second)
	require.NoError(t, err)
	c, err := NewComposite(Part{Name: "a", Limiter: a}, Part{Name: "b", Limiter: b, Key: func(k string) string { return "b:" + k }})
	require.NoError(t, err)
	s, err := NewShadow(c, ShadowConfig{})
	require.NoError(t, err)
	g, err := NewGuard(s, GuardConfig{})
	require.NoError(t, err)
	assert.Same(t, c, compositeIn(g))
	assert.Equal(t, []string{"k", "b:k"}, keysOf(g)("k"))
	_, ok := decoratorOf(g)
	assert.True(t, ok)
	assert.Nil(t, compositeIn(embeddingDecorator{s}))
	assert.Nil(t, keysOf(embeddingDecorator{s}))
	_, ok = decoratorOf(embeddingDecorator{s})
	assert.False(t, ok)
	d, ok := decoratorOf((*Guard)(nil))
	assert.True(t, ok)
	assert.Nil(t, d)
}
