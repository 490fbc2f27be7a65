// Package ratelimittest holds test doubles for code that uses ratelimit, as
// net/http/httptest does for net/http: a Clock that only moves when told to.
//
// It does not import ratelimit, so that ratelimit's own tests can use it.
package ratelimittest
