package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// fakeBucket is a ratelimit.Decider and Adjuster that decides as a token bucket of
// capacity limit refilling one unit per interval, on a fake clock, kept as a
// GCRA's theoretical arrival time per key in whole nanoseconds: the same
// decisions and Results as the package's TokenBucket. It records its
// adjustments, and fails them with adjustErr when set.
type fakeBucket struct {
	limit    int
	interval time.Duration
	clock    *ratelimittest.Clock

	mu        sync.Mutex
	tat       map[string]time.Time
	adjusts   []adjustCall
	allowErr  error
	adjustErr error
	notify    chan<- adjustCall // when set, gets every adjustment once applied
}

// adjustCall is one Refund or Settle a fake received.
type adjustCall struct {
	method      string // "Refund" or "Settle"
	key         string
	taken, cost int
	opts        int  // how many AdjustOptions: TakenAt and WithToken
	deadline    bool // the context had a deadline
	ctxErr      error
	timeout     time.Duration // the deadline, less the time of the call
}

var (
	_ ratelimit.Decider  = (*fakeBucket)(nil)
	_ ratelimit.Adjuster = (*fakeBucket)(nil)
)

// newFakeBucket returns a fakeBucket of limit refilling one unit per
// interval on clock.
func newFakeBucket(limit int, interval time.Duration, clock *ratelimittest.Clock) *fakeBucket {
	return &fakeBucket{limit: limit, interval: interval, clock: clock, tat: map[string]time.Time{}}
}

// Policy reports the bucket's limit and the time it takes to fill.
func (b *fakeBucket) Policy() ratelimit.Policy {
	return ratelimit.Policy{Limit: b.limit, Window: time.Duration(b.limit) * b.interval}
}

// Policies returns the bucket's one policy, named "default".
func (b *fakeBucket) Policies(context.Context, string) ([]ratelimit.NamedPolicy, error) {
	return []ratelimit.NamedPolicy{{Name: "default", Policy: b.Policy()}}, nil
}

// Allow takes n units of key when there are that many.
func (b *fakeBucket) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	d, err := b.Decide(ctx, key, n)
	return d.Result, err
}

// Decide takes n units of key when there are that many, and tells the
// decision under the bucket's one policy.
func (b *fakeBucket) Decide(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	policies, _ := b.Policies(ctx, key)
	b.mu.Lock()
	defer b.mu.Unlock()
	var res ratelimit.Result
	var err error
	if b.allowErr != nil {
		res, err = ratelimit.Result{Limit: b.limit}, b.allowErr
	} else {
		var next time.Time
		res, next, err = b.decide(key, n)
		if err == nil && res.Allowed {
			b.tat[key] = next
		}
	}
	return ratelimit.Decision{Result: res, Policy: policies[0], Policies: policies, Enforced: res}, err
}

// decide returns what Allow(key, n) answers and the key's arrival time
// after it, without changing anything. b.mu is held.
func (b *fakeBucket) decide(key string, n int) (ratelimit.Result, time.Time, error) {
	if n < 0 {
		return ratelimit.Result{Limit: b.limit}, time.Time{}, ratelimit.ErrInvalidCost
	}
	if n > b.limit {
		return ratelimit.Result{Limit: b.limit}, time.Time{}, fmt.Errorf("fake: %w", ratelimit.ErrCostExceedsLimit)
	}
	now := b.clock.Now()
	tat := b.tat[key]
	if tat.Before(now) {
		tat = now
	}
	burst := time.Duration(b.limit) * b.interval
	next := tat.Add(time.Duration(n) * b.interval)
	if over := next.Sub(now) - burst; over > 0 {
		return ratelimit.Result{
			Limit:      b.limit,
			Remaining:  max(int((burst-tat.Sub(now))/b.interval), 0),
			RetryAfter: over,
			ResetAfter: tat.Sub(now),
		}, tat, nil
	}
	return ratelimit.Result{
		Allowed:    true,
		Limit:      b.limit,
		Remaining:  int((burst - next.Sub(now)) / b.interval),
		ResetAfter: next.Sub(now),
	}, next, nil
}

// Refund gives n units back to key.
func (b *fakeBucket) Refund(ctx context.Context, key string, n int, opts ...ratelimit.AdjustOption) (ratelimit.Result, error) {
	return b.adjust(ctx, "Refund", key, n, 0, opts)
}

// Settle replaces taken units of key by cost, into debt if need be.
func (b *fakeBucket) Settle(ctx context.Context, key string, taken, cost int, opts ...ratelimit.AdjustOption) (ratelimit.Result, error) {
	return b.adjust(ctx, "Settle", key, taken, cost, opts)
}

// adjust records a Refund or Settle and applies it.
func (b *fakeBucket) adjust(ctx context.Context, method, key string, taken, cost int, opts []ratelimit.AdjustOption) (ratelimit.Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	call := adjustCall{method: method, key: key, taken: taken, cost: cost, opts: len(opts), ctxErr: ctx.Err()}
	if d, ok := ctx.Deadline(); ok {
		call.deadline, call.timeout = true, time.Until(d)
	}
	b.adjusts = append(b.adjusts, call)
	if b.notify != nil {
		defer func() { b.notify <- call }()
	}
	if b.adjustErr != nil {
		return ratelimit.Result{Limit: b.limit}, b.adjustErr
	}
	b.settle(key, taken, cost)
	return ratelimit.Result{Allowed: true, Limit: b.limit}, nil
}

// settle moves key's arrival time by cost - taken units, never before now.
// b.mu is held.
func (b *fakeBucket) settle(key string, taken, cost int) {
	now := b.clock.Now()
	tat := b.tat[key]
	if tat.Before(now) {
		tat = now
	}
	tat = tat.Add(time.Duration(cost-taken) * b.interval)
	if tat.Before(now) {
		tat = now
	}
	b.tat[key] = tat
}

// Reset forgets key.
func (b *fakeBucket) Reset(_ context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.tat, key)
	return nil
}

// calls returns the adjustments received so far.
func (b *fakeBucket) calls() []adjustCall {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]adjustCall(nil), b.adjusts...)
}

// fakeComposite is a ratelimit.Decider and Adjuster of fakeBuckets
// that decides as a Composite does: all or nothing, with the Result of the
// part that bound the decision and the longest RetryAfter and ResetAfter.
type fakeComposite struct {
	names []string
	parts []*fakeBucket
	mu    sync.Mutex // held across the parts, for all or nothing
}

var (
	_ ratelimit.Decider  = (*fakeComposite)(nil)
	_ ratelimit.Adjuster = (*fakeComposite)(nil)
)

// Policies returns the parts' policies.
func (c *fakeComposite) Policies(context.Context, string) ([]ratelimit.NamedPolicy, error) {
	out := make([]ratelimit.NamedPolicy, len(c.parts))
	for i, p := range c.parts {
		out[i] = ratelimit.NamedPolicy{Name: c.names[i], Policy: p.Policy()}
	}
	return out, nil
}

// Allow decides as Decide.
func (c *fakeComposite) Allow(ctx context.Context, key string, n int) (ratelimit.Result, error) {
	d, err := c.Decide(ctx, key, n)
	return d.Result, err
}

// Decide takes n from every part if every part allows it.
func (c *fakeComposite) Decide(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	policies, _ := c.Policies(ctx, key)
	res, b, parts, err := c.decide(key, n)
	return ratelimit.Decision{
		Result: res, Policy: policies[b], Policies: policies, PolicyIndex: b, Parts: parts, Enforced: res,
	}, err
}

// decide takes n from every part if every part allows it, and returns the
// Result, the index of the part that bound it and each part's Result.
func (c *fakeComposite) decide(key string, n int) (ratelimit.Result, int, []ratelimit.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	results := make([]ratelimit.Result, len(c.parts))
	nexts := make([]time.Time, len(c.parts))
	allowed := true
	for i, p := range c.parts {
		p.mu.Lock()
		res, next, err := p.decide(key, n)
		p.mu.Unlock()
		if err != nil {
			return res, i, nil, err
		}
		results[i], nexts[i] = res, next
		allowed = allowed && res.Allowed
	}
	if !allowed {
		for i := range results {
			if results[i].Allowed { // a part that would have allowed it reports its state untouched
				results[i] = c.parts[i].peek(key)
			}
		}
	} else {
		for i, p := range c.parts {
			p.mu.Lock()
			p.tat[key] = nexts[i]
			p.mu.Unlock()
		}
	}
	b := 0
	for i, r := range results {
		if r.RetryAfter > results[b].RetryAfter || r.RetryAfter == results[b].RetryAfter && r.Remaining < results[b].Remaining {
			b = i
		}
	}
	res := results[b]
	for _, r := range results {
		res.RetryAfter = max(res.RetryAfter, r.RetryAfter)
		res.ResetAfter = max(res.ResetAfter, r.ResetAfter)
	}
	return res, b, results, nil
}

// peek returns key's state as a Result, taking nothing.
func (b *fakeBucket) peek(key string) ratelimit.Result {
	b.mu.Lock()
	defer b.mu.Unlock()
	res, _, _ := b.decide(key, 0)
	return res
}

// Refund gives n back to every part.
func (c *fakeComposite) Refund(ctx context.Context, key string, n int, opts ...ratelimit.AdjustOption) (ratelimit.Result, error) {
	return c.Settle(ctx, key, n, 0, opts...)
}

// Settle settles every part.
func (c *fakeComposite) Settle(ctx context.Context, key string, taken, cost int, opts ...ratelimit.AdjustOption) (ratelimit.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for _, p := range c.parts {
		method := "Settle"
		if cost == 0 {
			method = "Refund"
		}
		_, e := p.adjust(ctx, method, key, taken, cost, opts)
		err = errors.Join(err, e)
	}
	return ratelimit.Result{Allowed: true}, err
}

// Reset resets every part.
func (c *fakeComposite) Reset(ctx context.Context, key string) error {
	for _, p := range c.parts {
		_ = p.Reset(ctx, key)
	}
	return nil
}

// adjustable is an Adjuster under test, with the clock it runs on.
type adjustable struct {
	name    string
	new     func(t *testing.T, limit int, interval time.Duration) (ratelimit.Adjuster, *ratelimittest.Clock)
	foreign bool // a Decider of another package: no t on allowed requests
}

// adjustables are the limiters the adjustment tests run on: the fake, and
// the package's TokenBucket, which the tests skip until it is an Adjuster.
var adjustables = []adjustable{
	{"fake", func(_ *testing.T, limit int, interval time.Duration) (ratelimit.Adjuster, *ratelimittest.Clock) {
		clock := ratelimittest.NewClock(epoch)
		return newFakeBucket(limit, interval, clock), clock
	}, true},
	{"TokenBucket", func(t *testing.T, limit int, interval time.Duration) (ratelimit.Adjuster, *ratelimittest.Clock) {
		l, clock := tokenBucket(t, ratelimit.Every(interval), limit)
		a, ok := ratelimit.Limiter(l).(ratelimit.Adjuster)
		if !ok {
			t.Skip("ratelimit.TokenBucket is not a ratelimit.Adjuster yet")
		}
		return a, clock
	}, false},
}

// allowedRL returns v, the RateLimit value of an allowed request, as a
// limiter sends it: without its t parameters when foreign (see composite).
func allowedRL(foreign bool, v string) string {
	if foreign {
		return withoutT(v)
	}
	return v
}

// twoPolicies are the two policies the composite tests use: "per-second",
// 2 refilling one per 500 ms (w=1), and "per-minute", 3 refilling one per
// 20 s (w=60).
var twoPolicies = []struct {
	name     string
	limit    int
	interval time.Duration
}{
	{"per-second", 2, 500 * time.Millisecond},
	{"per-minute", 3, 20 * time.Second},
}

// composite is a limiter of twoPolicies under test. foreign says its
// Decisions are a Decider's of another package, which tell no effective
// window (ratelimit.Decision.NextUnit): its allowed answers have no t.
type composite struct {
	name    string
	new     func(t *testing.T) (ratelimit.Decider, *ratelimittest.Clock)
	foreign bool
}

// composites are the limiters of twoPolicies the composite tests run on:
// the fake, the package's Composite of two TokenBuckets, and that Composite
// behind a Guard and a DenyCache.
var composites = []composite{
	{"fake", func(*testing.T) (ratelimit.Decider, *ratelimittest.Clock) {
		clock := ratelimittest.NewClock(epoch)
		c := &fakeComposite{}
		for _, p := range twoPolicies {
			c.names = append(c.names, p.name)
			c.parts = append(c.parts, newFakeBucket(p.limit, p.interval, clock))
		}
		return c, clock
	}, true},
	{"Composite", realComposite, false},
	{"Guard(DenyCache(Composite))", func(t *testing.T) (ratelimit.Decider, *ratelimittest.Clock) {
		c, clock := realComposite(t)
		cache, err := ratelimit.NewDenyCache(c, ratelimit.DenyCacheConfig{Clock: clock})
		require.NoError(t, err)
		guard, err := ratelimit.NewGuard(cache, ratelimit.GuardConfig{Timeout: time.Second, Clock: clock})
		require.NoError(t, err)
		return guard, clock
	}, false},
}

// withoutT returns the RateLimit value v without its t parameters: what a
// limiter that tells no effective window sends on an allowed request.
func withoutT(v string) string {
	return tParam.ReplaceAllString(v, "")
}

// tParam matches a t parameter of a RateLimit item.
var tParam = regexp.MustCompile(`;t=[0-9]+`)

// realComposite returns a Composite of twoPolicies as TokenBuckets on a
// fake clock, or skips the test while NewComposite cannot build one.
func realComposite(t *testing.T) (ratelimit.Decider, *ratelimittest.Clock) {
	clock := ratelimittest.NewClock(epoch)
	var parts []ratelimit.Part
	for _, p := range twoPolicies {
		l, err := ratelimit.NewTokenBucket(ratelimit.Every(p.interval), p.limit, ratelimit.WithClock(clock))
		require.NoError(t, err)
		parts = append(parts, ratelimit.Part{Name: p.name, Limiter: l})
	}
	c, err := ratelimit.NewComposite(parts...)
	if err != nil {
		t.Skipf("NewComposite of TokenBuckets: %v", err)
	}
	return c, clock
}
