// Package adapt asks any ratelimit.Limiter for a whole Decision or a Lease,
// for the middleware (httplimit, grpclimit) that take a Limiter of any
// package: a Decider or Acquirer of package ratelimit answers itself, and a
// Limiter of another package is adapted from its Allow.
package adapt

import (
	"context"
	"fmt"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/nilcheck"
)

// Decide decides n for key through l and returns the whole Decision: l's
// own when l is a ratelimit.Decider, and otherwise one built from Allow's
// Result, with Source FromBackend and, when the Result's Limit is > 0, one
// policy named "default" of that Limit (its Window unknown, 0). A nil l is
// an error wrapping ratelimit.ErrInvalidConfig.
func Decide(ctx context.Context, l ratelimit.Limiter, key string, n int) (ratelimit.Decision, error) {
	if d, ok := l.(ratelimit.Decider); ok && !nilcheck.IsNil(d) {
		return d.Decide(ctx, key, n)
	}
	if nilcheck.IsNil(l) {
		return ratelimit.Decision{}, fmt.Errorf("%w: Decide: nil limiter", ratelimit.ErrInvalidConfig)
	}
	res, err := l.Allow(ctx, key, n)
	return foreign(res), err
}

// Acquire takes n units for key through l: l.Acquire when l is a
// ratelimit.Acquirer, and otherwise Decide(ctx, l, key, n) with a Lease that
// holds nothing. A nil l is an error wrapping ratelimit.ErrInvalidConfig.
func Acquire(ctx context.Context, l ratelimit.Limiter, key string, n int) (ratelimit.Lease, ratelimit.Decision, error) {
	if a, ok := l.(ratelimit.Acquirer); ok && !nilcheck.IsNil(a) {
		return a.Acquire(ctx, key, n)
	}
	d, err := Decide(ctx, l, key, n)
	return ratelimit.Lease{}, d, err
}

// foreign returns the Decision of a Limiter that is not a Decider, from
// the Result of its Allow: the Decision a decorator of package ratelimit
// makes of such a backend's answer.
func foreign(res ratelimit.Result) ratelimit.Decision {
	d := ratelimit.Decision{Result: res, Enforced: res}
	if res.Limit > 0 {
		d.Policy = ratelimit.NamedPolicy{Name: "default", Policy: ratelimit.Policy{Limit: res.Limit}}
		d.Policies = []ratelimit.NamedPolicy{d.Policy}
	}
	return d
}
