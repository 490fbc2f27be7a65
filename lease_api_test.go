package ratelimit

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOnlyALeaseReleasesAndExtendsItself: Lease.Release and Lease.Extend
// are the one way to give a lease back or renew it; no limiter, decorator
// or the Acquirer interface has a Release or Extend of its own that a lease
// could be handed to.
func TestOnlyALeaseReleasesAndExtendsItself(t *testing.T) {
	for _, v := range []any{
		(*Acquirer)(nil), (*Concurrency)(nil), (*RedisConcurrency)(nil), (*Composite)(nil),
		(*Guard)(nil), (*DenyCache)(nil), (*Shadow)(nil), (*Prefetch)(nil),
	} {
		typ := reflect.TypeOf(v)
		if typ.Elem().Kind() == reflect.Interface {
			typ = typ.Elem()
		}
		for _, m := range []string{"Release", "Extend"} {
			_, ok := typ.MethodByName(m)
			assert.False(t, ok, "%v has %s", typ, m)
		}
	}
	for _, m := range []string{"Release", "Extend"} {
		_, ok := reflect.TypeOf(Lease{}).MethodByName(m)
		assert.True(t, ok, "Lease.%s", m)
	}
}
