package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// callStep is one call in an adjustment scenario: move the clock by
// advance, then make call ("allow", "refund", "settle" or "reset") on key,
// and expect want (the zero Result for a reset) and an error matching err.
// n is Allow's and Refund's n, and Settle's taken.
type callStep struct {
	advance time.Duration
	call    string
	key     string
	n, cost int
	want    Result
	err     error
}

// callScenario is a run of adjustSteps against a fresh limiter, as a
// scenario is, built with opts.
type callScenario struct {
	name   string
	limit  int
	period time.Duration
	opts   []Option
	steps  []callStep
}

// runAdjustScenarios runs every scenario against every subject, and against
// every subject wrapped in a Composite of one part.
func runAdjustScenarios(t *testing.T, subjects []subject, scenarios []callScenario) {
	t.Helper()
	ctx := context.Background()
	for _, sub := range append(subjects, compositeOfOne(subjects)...) {
		for _, sc := range scenarios {
			t.Run(sub.name+"/"+sc.name, func(t *testing.T) {
				l, advance := sub.newLimiter(t, sc.limit, sc.period, sc.opts...)
				a, ok := l.(Adjuster)
				require.True(t, ok, "%T is not an Adjuster", l)
				for i, st := range sc.steps {
					if st.advance != 0 {
						advance(st.advance)
					}
					var got Result
					var err error
					switch st.call {
					case "allow":
						got, err = a.Allow(ctx, st.key, st.n)
					case "refund":
						got, err = a.Refund(ctx, st.key, st.n)
					case "settle":
						got, err = a.Settle(ctx, st.key, st.n, st.cost)
					case "reset":
						err = a.Reset(ctx, st.key)
					default:
						t.Fatalf("step %d: unknown call %q", i, st.call)
					}
					msg := fmt.Sprintf("step %d: advance %v, %s(%q, %d, %d)", i, st.advance, st.call, st.key, st.n, st.cost)
					if st.err != nil {
						require.ErrorIs(t, err, st.err, msg)
					} else {
						require.NoError(t, err, msg)
					}
					assert.Equal(t, st.want, got, msg)
				}
			})
		}
	}
}

// compositeOfOne wraps each subject's limiter in a Composite of one part,
// which must decide and adjust exactly as the limiter alone.
func compositeOfOne(subjects []subject) []subject {
	var wrapped []subject
	for _, sub := range subjects {
		if strings.Contains(sub.name, "PolicyFunc") {
			continue // a Composite refuses parts that choose their policy per key
		}
		wrapped = append(wrapped, subject{"Composite(" + sub.name + ")", func(t *testing.T, limit int, period time.Duration, opts ...Option) (Limiter, func(time.Duration)) {
			l, advance := sub.newLimiter(t, limit, period, opts...)
			c, err := NewComposite(Part{Name: "only", Limiter: l})
			require.NoError(t, err)
			return c, advance
		}})
	}
	return wrapped
}

// bucketAdjustScenarios hold for the token buckets and GCRAs, in process and
// on Redis: a limit of 10 refilling one a second.
var bucketAdjustScenarios = []callScenario{
	{
		name: "unbounded, a settle above the estimate goes into debt as deep as it costs, and calls wait it out", limit: 10, period: 10 * time.Second,
		opts: []Option{WithMaxDebt(UnboundedDebt)},
		steps: []callStep{
			{0, "allow", "k", 5, 0, ok(10, 5, 5*time.Second), nil},
			{0, "settle", "k", 5, 25, ok(10, 0, 25*time.Second), nil},
			{0, "allow", "k", 1, 0, no(10, 0, 16*time.Second, 25*time.Second), nil},
			{0, "allow", "k", 0, 0, ok(10, 0, 25*time.Second), nil},
			{15 * time.Second, "allow", "k", 1, 0, no(10, 0, time.Second, 10*time.Second), nil},
			{time.Second, "allow", "k", 1, 0, ok(10, 0, 10*time.Second), nil},
		},
	},
	{
		name: "a settle below the estimate gives back the difference", limit: 10, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 8, 0, ok(10, 2, 8*time.Second), nil},
			{0, "settle", "k", 8, 3, ok(10, 7, 3*time.Second), nil},
			{0, "settle", "k", 2, 2, ok(10, 7, 3*time.Second), nil},
		},
	},
	{
		name: "a refund never fills above full", limit: 10, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 3, 0, ok(10, 7, 3*time.Second), nil},
			{2 * time.Second, "refund", "k", 3, 0, ok(10, 10, 0), nil},
			{0, "allow", "k", 0, 0, ok(10, 10, 0), nil},
			{0, "refund", "other", 4, 0, ok(10, 10, 0), nil},
		},
	},
	{
		name: "a reset fills the key", limit: 10, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 10, 0, ok(10, 0, 10*time.Second), nil},
			{0, "settle", "k", 0, 30, ok(10, 0, 20*time.Second), nil}, // one limit of debt at most
			{0, "reset", "k", 0, 0, Result{}, nil},
			{0, "allow", "k", 1, 0, ok(10, 9, time.Second), nil},
		},
	},
	{
		name: "by default a debt stops at one limit, and a settle at the bound adds none", limit: 10, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 5, 0, ok(10, 5, 5*time.Second), nil},
			// 20 more on 5 left: 15 in debt, of which 10 are kept.
			{0, "settle", "k", 5, 25, ok(10, 0, 20*time.Second), nil},
			{0, "allow", "k", 1, 0, no(10, 0, 11*time.Second, 20*time.Second), nil},
			{0, "settle", "k", 0, 5, ok(10, 0, 20*time.Second), nil},
			// A refund pays the bounded debt down.
			{0, "refund", "k", 3, 0, ok(10, 0, 17*time.Second), nil},
			{7 * time.Second, "allow", "k", 0, 0, ok(10, 0, 10*time.Second), nil},
			{time.Second, "allow", "k", 1, 0, ok(10, 0, 10*time.Second), nil},
		},
	},
	{
		// A usage of 10^9 on 100 a minute once locked a key out for 13.9
		// days. Above ten limits it is refused and changes nothing.
		name: "a bogus usage of 10^9 is refused and changes nothing", limit: 100, period: time.Minute,
		steps: []callStep{
			{0, "allow", "k", 1, 0, ok(100, 99, 600*ms), nil},
			{0, "settle", "k", 1, 1_000_000_000, Result{Limit: 100}, ErrInvalidCost},
			{0, "allow", "k", 1, 0, ok(100, 98, 1200*ms), nil},
			// At ten limits it is charged, as far as the debt bound allows.
			{0, "settle", "k", 1, 1000, ok(100, 0, 2*time.Minute), nil},
		},
	},
	{
		// Without the bound on one Settle, the bound on debt alone keeps
		// it to one more minute.
		name: "WithMaxSettle(UnboundedSettle): a bogus usage of 10^9 costs a key of 100 a minute one more minute, not days", limit: 100, period: time.Minute,
		opts: []Option{WithMaxSettle(UnboundedSettle)},
		steps: []callStep{
			{0, "allow", "k", 1, 0, ok(100, 99, 600*ms), nil},
			{0, "settle", "k", 1, 1_000_000_000, ok(100, 0, 2*time.Minute), nil},
			{0, "allow", "k", 1, 0, no(100, 0, time.Minute+600*ms, 2*time.Minute), nil},
			{time.Minute + 600*ms, "allow", "k", 1, 0, ok(100, 0, time.Minute), nil},
		},
	},
	{
		name: "WithMaxDebt(0): a settle never takes a key below empty", limit: 10, period: 10 * time.Second,
		opts: []Option{WithMaxDebt(0)},
		steps: []callStep{
			{0, "allow", "k", 5, 0, ok(10, 5, 5*time.Second), nil},
			{0, "settle", "k", 5, 25, ok(10, 0, 10*time.Second), nil},
			{0, "allow", "k", 1, 0, no(10, 0, time.Second, 10*time.Second), nil},
			{time.Second, "allow", "k", 1, 0, ok(10, 0, 10*time.Second), nil},
			// Within what is left, a settle is charged in full.
			{5 * time.Second, "settle", "k", 0, 3, ok(10, 2, 8*time.Second), nil},
		},
	},
	{
		name: "WithMaxDebt(2): a debt stops at two limits", limit: 10, period: 10 * time.Second,
		opts: []Option{WithMaxDebt(2)},
		steps: []callStep{
			{0, "allow", "k", 10, 0, ok(10, 0, 10*time.Second), nil},
			{0, "settle", "k", 10, 100, ok(10, 0, 30*time.Second), nil},
			{0, "allow", "k", 1, 0, no(10, 0, 21*time.Second, 30*time.Second), nil},
			{0, "refund", "k", 10, 0, ok(10, 0, 20*time.Second), nil},
		},
	},
	{
		name: "invalid adjustments change nothing", limit: 10, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 4, 0, ok(10, 6, 4*time.Second), nil},
			{0, "settle", "k", -1, 0, Result{Limit: 10}, ErrInvalidCost},
			{0, "settle", "k", 1, -1, Result{Limit: 10}, ErrInvalidCost},
			// More than any call takes (a limiter with a PolicyFunc accepts
			// a taken above its limit, taken under a larger policy).
			{0, "settle", "k", 1<<52 + 1, 0, Result{Limit: 10}, ErrCostExceedsLimit},
			{0, "refund", "k", -1, 0, Result{Limit: 10}, ErrInvalidCost},
			{0, "allow", "k", 0, 0, ok(10, 6, 4*time.Second), nil},
		},
	},
}

// windowAdjustScenarios hold for the fixed windows: 3 per 10 s window.
var windowAdjustScenarios = []callScenario{
	{
		name: "a refund goes back into the open window", limit: 3, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 2, 0, ok(3, 1, 10*time.Second), nil},
			{time.Second, "refund", "k", 1, 0, ok(3, 2, 9*time.Second), nil},
			{0, "allow", "k", 2, 0, ok(3, 0, 9*time.Second), nil},
		},
	},
	{
		name: "a window refunded to 0 ends", limit: 3, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 1, 0, ok(3, 2, 10*time.Second), nil},
			{0, "refund", "k", 2, 0, ok(3, 3, 0), nil},
			{5 * time.Second, "allow", "k", 1, 0, ok(3, 2, 10*time.Second), nil},
		},
	},
	{
		name: "a debt counts past the limit until the window ends", limit: 3, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 1, 0, ok(3, 2, 10*time.Second), nil},
			{0, "settle", "k", 1, 5, ok(3, 0, 10*time.Second), nil},
			{0, "allow", "k", 1, 0, no(3, 0, 10*time.Second, 10*time.Second), nil},
			{0, "allow", "k", 0, 0, ok(3, 0, 10*time.Second), nil},
			{0, "refund", "k", 1, 0, ok(3, 0, 10*time.Second), nil},
			{10 * time.Second, "allow", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
		},
	},
	{
		name: "a settle above the estimate with no window open opens one", limit: 3, period: 10 * time.Second,
		steps: []callStep{
			{0, "settle", "k", 0, 2, ok(3, 1, 10*time.Second), nil},
			{0, "allow", "k", 2, 0, no(3, 1, 10*time.Second, 10*time.Second), nil},
			{0, "reset", "k", 0, 0, Result{}, nil},
			{0, "allow", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
		},
	},
	{
		name: "by default a window counts at most one limit past its limit", limit: 3, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
			{0, "settle", "k", 3, 30, ok(3, 0, 10*time.Second), nil}, // 6 counted
			{0, "settle", "k", 0, 5, ok(3, 0, 10*time.Second), nil},  // still 6
			{0, "refund", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
			{time.Second, "refund", "k", 1, 0, ok(3, 1, 9*time.Second), nil},
			{9 * time.Second, "allow", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
		},
	},
	{
		name: "a usage above ten limits is refused and opens no window", limit: 3, period: 10 * time.Second,
		steps: []callStep{
			{0, "settle", "k", 0, 31, Result{Limit: 3}, ErrInvalidCost},
			{0, "allow", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
		},
	},
	{
		name: "WithMaxSettle(UnboundedSettle): a bogus usage with no window open opens one at the bound", limit: 3, period: 10 * time.Second,
		opts: []Option{WithMaxSettle(UnboundedSettle)},
		steps: []callStep{
			{0, "settle", "k", 0, 1_000_000_000, ok(3, 0, 10*time.Second), nil},
			{0, "refund", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
			{0, "refund", "k", 1, 0, ok(3, 1, 10*time.Second), nil},
		},
	},
	{
		name: "WithMaxDebt(0): a window counts at most its limit", limit: 3, period: 10 * time.Second,
		opts: []Option{WithMaxDebt(0)},
		steps: []callStep{
			{0, "allow", "k", 1, 0, ok(3, 2, 10*time.Second), nil},
			{0, "settle", "k", 1, 5, ok(3, 0, 10*time.Second), nil},
			{0, "refund", "k", 1, 0, ok(3, 1, 10*time.Second), nil},
		},
	},
	{
		name: "unbounded, a window counts all a settle costs", limit: 3, period: 10 * time.Second,
		opts: []Option{WithMaxDebt(UnboundedDebt), WithMaxSettle(UnboundedSettle)},
		steps: []callStep{
			{0, "allow", "k", 1, 0, ok(3, 2, 10*time.Second), nil},
			{0, "settle", "k", 1, 100, ok(3, 0, 10*time.Second), nil},
			{0, "refund", "k", 3, 0, ok(3, 0, 10*time.Second), nil}, // 97 counted
			{10 * time.Second, "allow", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
		},
	},
	{
		name: "a refund after the window ended changes nothing", limit: 3, period: 10 * time.Second,
		steps: []callStep{
			{0, "allow", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
			{10 * time.Second, "refund", "k", 3, 0, ok(3, 3, 0), nil},
			{0, "allow", "k", 3, 0, ok(3, 0, 10*time.Second), nil},
		},
	},
}
