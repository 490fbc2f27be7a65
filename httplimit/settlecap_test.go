package httplimit_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// all returns what the hook was given so far.
func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// monthlyQuota returns a Composite of 5 a second and 120 a calendar month
// in Berlin, in process on clock, or on Redis through client (windows'
// bounds on clock).
func monthlyQuota(t *testing.T, client redis.Scripter, clock ratelimit.Clock) ratelimit.Decider {
	t.Helper()
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	month := ratelimit.Calendar{Period: ratelimit.CalendarMonth, Location: berlin}
	var rps, quota ratelimit.Limiter
	if client == nil {
		rps, err = ratelimit.NewTokenBucket(ratelimit.PerSecond(5), 5, ratelimit.WithClock(clock))
		require.NoError(t, err)
		quota, err = ratelimit.NewCalendarWindow(120, month, ratelimit.WithClock(clock))
	} else {
		rps, err = ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(5), 5)
		require.NoError(t, err)
		quota, err = ratelimit.NewRedisCalendarWindow(client, 120, month, ratelimit.WithClock(clock))
	}
	require.NoError(t, err)
	c, err := ratelimit.NewComposite(ratelimit.Part{Name: "rps", Limiter: rps}, ratelimit.Part{Name: "month", Limiter: quota})
	require.NoError(t, err)
	return c
}

// TestABogusCostIsSettledAtTheBound: a handler that reports a cost of
// 100,000,000 (a unit mix-up) on a Composite of 5 a second and 120 a month
// is settled at ten limits of the smaller part, 50: the request pays that
// much (its handler ran: a report it cannot refuse lets no request escape
// its limit), the month keeps 69, the next request waits out the
// per-second part's bounded debt (at most 2 s), and the WithOnError hook
// hears of it. Before, the month was spent until its end (Retry-After of
// 661 h). In process and on miniredis.
func TestABogusCostIsSettledAtTheBound(t *testing.T) {
	start := time.Date(2026, 11, 3, 10, 0, 0, 0, time.UTC)
	for _, where := range []string{"in process", "miniredis"} {
		t.Run(where, func(t *testing.T) {
			clock := ratelimittest.NewClock(start)
			var l ratelimit.Decider
			if where == "in process" {
				l = monthlyQuota(t, nil, clock)
			} else {
				_, client, _ := redistest.Miniredis(t, start)
				l = monthlyQuota(t, client, clock)
			}
			errs := &errorLog{}
			h, next := adjusting(t, l, httplimit.WithSettle(), httplimit.WithOnError(errs.hook), httplimit.WithClock(clock))
			w := get(h, "k", "/?cost=100000000")
			require.Equal(t, http.StatusOK, w.Code)
			require.True(t, next.recorded.Load())
			if assert.Len(t, errs.all(), 1) {
				err := errs.all()[0]
				assert.ErrorIs(t, err, httplimit.ErrAdjustment)
				assert.Contains(t, err.Error(), "WithMaxSettle")
				assert.Contains(t, err.Error(), "settled at 50")
			}
			d, err := l.Decide(context.Background(), "k", 0)
			require.NoError(t, err)
			assert.Equal(t, 70, d.Parts[1].Remaining, "the month: 120 less the 50 settled")

			w = get(h, "k", "/")
			assert.Equal(t, http.StatusTooManyRequests, w.Code)
			assert.Equal(t, "2", w.Header().Get("Retry-After"), "the per-second part's debt, not the month's end")
		})
	}
}

// TestWithMaxSettleSetsTheBound: WithMaxSettle(1) settles at most one
// limit; ratelimit.UnboundedSettle passes the cost on, which the limiter
// then refuses above its own bound (the request keeps what it took, and
// the hook hears the limiter's error); a bound below 1 is an error.
func TestWithMaxSettleSetsTheBound(t *testing.T) {
	ctx := context.Background()
	t.Run("one limit", func(t *testing.T) {
		l, _ := tokenBucket(t, ratelimit.PerSecond(1), 10)
		errs := &errorLog{}
		h, _ := adjusting(t, l, httplimit.WithSettle(), httplimit.WithMaxSettle(1), httplimit.WithOnError(errs.hook))
		get(h, "k", "/?cost=25")
		require.Len(t, errs.all(), 1)
		assert.ErrorIs(t, errs.all()[0], httplimit.ErrAdjustment)
		res, err := l.Allow(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, 10*time.Second, res.ResetAfter, "10 settled: empty, no debt")
		get(h, "j", "/?cost=10")
		assert.Len(t, errs.all(), 1, "a cost at the bound is settled as reported")
	})
	t.Run("unbounded", func(t *testing.T) {
		l, _ := tokenBucket(t, ratelimit.PerSecond(1), 10)
		errs := &errorLog{}
		h, _ := adjusting(t, l, httplimit.WithSettle(), httplimit.WithMaxSettle(ratelimit.UnboundedSettle), httplimit.WithOnError(errs.hook))
		get(h, "k", "/?cost=100000000")
		require.Len(t, errs.all(), 1)
		assert.ErrorIs(t, errs.all()[0], httplimit.ErrAdjustment)
		assert.ErrorIs(t, errs.all()[0], ratelimit.ErrInvalidCost, "the limiter's own bound refuses it")
		res, err := l.Allow(ctx, "k", 0)
		require.NoError(t, err)
		assert.Equal(t, 9, res.Remaining, "the request keeps what it took")
	})
	t.Run("bad bounds", func(t *testing.T) {
		l, _ := tokenBucket(t, ratelimit.PerSecond(1), 10)
		for _, limits := range []int{0, -2} {
			_, err := httplimit.NewMiddleware(l, httplimit.KeyByHeader(keyHeader), httplimit.WithSettle(), httplimit.WithMaxSettle(limits))
			require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "WithMaxSettle(%d)", limits)
		}
	})
}

// TestEveryStackSettlesABogusCostAtTheBound runs the production-stack
// table's limiters in each of its wrappings, on miniredis, behind a
// Middleware WithSettle whose handler reports a cost of 100,000,000: each
// is settled at ten limits of the smallest policy that counts units (50;
// 40 for the key's plan of 4), which every stack accepts (a Prefetch sends
// it to its backend), and the WithOnError hook hears only that the cost
// was bounded; the key is then in debt (a Shadow that does not enforce
// lets the next request through all the same).
func TestEveryStackSettlesABogusCostAtTheBound(t *testing.T) {
	for _, row := range stackRows() {
		for _, wrap := range stackWraps() {
			t.Run(row.name+"/"+wrap.name, func(t *testing.T) {
				_, client, _ := redistest.Miniredis(t, stackEpoch)
				l := wrap.wrap(t, row.build(t, client))
				errs := &errorLog{}
				h, next := adjusting(t, l, httplimit.WithSettle(), httplimit.WithOnError(errs.hook))
				w := get(h, "alice", "/?cost=100000000")
				require.Equal(t, http.StatusOK, w.Code)
				require.True(t, next.recorded.Load())
				got := errs.all()
				if assert.Len(t, got, 1, "%v", got) {
					assert.ErrorIs(t, got[0], httplimit.ErrAdjustment)
					assert.Contains(t, got[0].Error(), "WithMaxSettle")
					bound := "settled at 50"
					if row.name == "PolicyFunc" {
						bound = "settled at 40"
					}
					assert.Contains(t, got[0].Error(), bound)
				}
				w = get(h, "alice", "/")
				if wrap.name == "Shadow" {
					assert.Equal(t, http.StatusOK, w.Code, "not enforced")
				} else {
					assert.Equal(t, http.StatusTooManyRequests, w.Code, "in debt")
				}
				assert.Len(t, errs.all(), 1, "the settle at the bound was applied without an error")
			})
		}
	}
}
