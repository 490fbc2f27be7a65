// Package nilcheck tells whether an interface value is nil or holds a nil
// pointer, for the constructors of ratelimit, httplimit and grpclimit, which
// reject both.
package nilcheck

import "reflect"

// IsNil reports whether v is nil or an interface holding a nil pointer, map,
// slice, channel or func, such as (*redis.Client)(nil).
func IsNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}
