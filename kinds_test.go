package ratelimit

import (
	"context"
	"reflect"
	"strings"
	"testing"

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
	b, err := NewTokenBucket(10, 1)
	require.NoError(t, err)
	_, ok := engineOf(b)
	assert.True(t, ok)
	w := embeddingLimiter{b}
	_, ok = engineOf(w)
	assert.False(t, ok)
	assert.Nil(t, observerOf(w))
	assert.Equal(t, Policy{}, policyOf(w))
	_, err = NewLeasing(w, LeasingConfig{})
	require.ErrorIs(t, err, ErrInvalidConfig)
	res, err := w.Allow(context.Background(), "k", 1)
	require.NoError(t, err)
	assert.True(t, res.Allowed)
}
