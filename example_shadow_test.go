package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// shadowLog prints the decisions a Shadow let through against a denial.
type shadowLog struct{ ratelimit.NopHooks }

func (shadowLog) Decided(ev ratelimit.Event) {
	if ev.WouldDeny {
		fmt.Printf("  hook: %s would be denied, retry in %v\n", ev.Key, ev.Enforced.RetryAfter)
	}
}

// A new limit, a burst of 3 refilling 2 a second, rolled out in shadow mode: every
// request is decided and spent as if it were enforced, but none is denied;
// the would-be denials go to the hooks and to Decide's callers. Once
// the numbers look right, SetEnforce(true) turns it on, from the next call.
func ExampleShadow() {
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	// User ids are no secret: the hooks may see them whole (without
	// WithKeysShown, they see each key's digest).
	bucket, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(2), 3, ratelimit.WithClock(clock), ratelimit.WithKeysShown())
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.NewShadow(bucket, ratelimit.ShadowConfig{Hooks: shadowLog{}, Clock: clock})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 4; i++ {
		d, err := limiter.Decide(ctx, "user:42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("[%d] allowed=%v wouldDeny=%v remaining=%d\n", i, d.Allowed, d.WouldDeny, d.Remaining)
	}

	limiter.SetEnforce(true)
	res, err := limiter.Allow(ctx, "user:42", 1)
	if err != nil {
		panic(err)
	}
	fmt.Printf("enforcing: allowed=%v retry=%v\n", res.Allowed, res.RetryAfter)
	// Output:
	// [1] allowed=true wouldDeny=false remaining=2
	// [2] allowed=true wouldDeny=false remaining=1
	// [3] allowed=true wouldDeny=false remaining=0
	//   hook: user:42 would be denied, retry in 500ms
	// [4] allowed=true wouldDeny=true remaining=0
	// enforcing: allowed=false retry=500ms
}
