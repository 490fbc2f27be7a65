package outbound

import (
	"context"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// learnedKey is the context key of the policy an Upstream learned for a
// call's partition.
type learnedKey struct{}

// learnedValue is what an Upstream puts in a call's context: the policy
// the limiter should apply, or a probe that LearnedPolicy marks as read.
type learnedValue struct {
	policy ratelimit.Policy
	probe  *atomic.Bool
}

// LearnedPolicy is the ratelimit.PolicyFunc that makes a limiter apply
// the limits an Upstream learned from its upstream: build the limiter an
// Upstream takes WithPolicyFunc(LearnedPolicy).
//
//	limiter, err := ratelimit.NewRedisGCRA(rdb, 10, time.Second, // the upstream's documented limit
//		ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
//
// For a call an Upstream admits while its partition has a learned limit,
// it returns that limit, already lowered to no more than the limiter's own
// (its constructor's): never a larger one. Otherwise it returns the zero
// Policy, which gives the limiter its own. It never fails, and is safe for
// concurrent use.
func LearnedPolicy(ctx context.Context, _ string) (ratelimit.Policy, error) {
	v, _ := ctx.Value(learnedKey{}).(*learnedValue)
	if v == nil {
		return ratelimit.Policy{}, nil
	}
	if v.probe != nil {
		v.probe.Store(true)
	}
	return v.policy, nil
}

// withLearned returns ctx carrying p for LearnedPolicy, or ctx itself for
// the zero p, so that a call with nothing learned allocates nothing.
func withLearned(ctx context.Context, p ratelimit.Policy) context.Context {
	if p == (ratelimit.Policy{}) {
		return ctx
	}
	return context.WithValue(ctx, learnedKey{}, &learnedValue{policy: p})
}

// tighter returns the policy that allows no more than either a or b, of
// the smaller limit and the slower rate: its Limit is the smaller Limit,
// and its Window that Limit's time at the slower of the two rates, rounded
// up. A zero or invalid policy (Limit or Window <= 0) allows anything: the
// other is returned.
func tighter(a, b ratelimit.Policy) ratelimit.Policy {
	switch {
	case a.Limit <= 0 || a.Window <= 0:
		return b
	case b.Limit <= 0 || b.Window <= 0:
		return a
	}
	slow := a
	if slower(b, a) {
		slow = b
	}
	limit := min(a.Limit, b.Limit)
	// limit × slow.Window / slow.Limit, rounded up; limit <= slow.Limit,
	// so it fits a Duration.
	hi, lo := bits.Mul64(uint64(limit), uint64(slow.Window))
	q, r := bits.Div64(hi, lo, uint64(slow.Limit))
	if r != 0 {
		q++
	}
	return ratelimit.Policy{Limit: limit, Window: time.Duration(q)}
}

// slower reports whether a's rate, Limit per Window, is below b's. Both
// are valid.
func slower(a, b ratelimit.Policy) bool {
	// a.Limit/a.Window < b.Limit/b.Window, compared exactly in 128 bits.
	ah, al := bits.Mul64(uint64(a.Limit), uint64(b.Window))
	bh, bl := bits.Mul64(uint64(b.Limit), uint64(a.Window))
	return ah < bh || ah == bh && al < bl
}
