package httplimit_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/httplimit"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// redisKinds builds each Redis limiter as 5 per 10 s.
var redisKinds = []struct {
	name string
	new  func(redis.Scripter) (ratelimit.Limiter, error)
}{
	{"RedisTokenBucket", func(c redis.Scripter) (ratelimit.Limiter, error) {
		return ratelimit.NewRedisTokenBucket(c, ratelimit.Every(2*time.Second), 5)
	}},
	{"RedisGCRA", func(c redis.Scripter) (ratelimit.Limiter, error) { return ratelimit.NewRedisGCRA(c, 5, 10*time.Second) }},
	{"RedisFixedWindow", func(c redis.Scripter) (ratelimit.Limiter, error) {
		return ratelimit.NewRedisFixedWindow(c, 5, 10*time.Second)
	}},
}

// productionStack wraps l as docs/production.md recommends:
// a DenyCache inside a Guard, with a breaker.
func productionStack(t *testing.T, l ratelimit.Limiter, clock ratelimit.Clock, policy ratelimit.FailurePolicy) ratelimit.Limiter {
	t.Helper()
	cache, err := ratelimit.NewDenyCache(l, ratelimit.DenyCacheConfig{Clock: clock})
	require.NoError(t, err)
	guard, err := ratelimit.NewGuard(cache, ratelimit.GuardConfig{
		Timeout: time.Second, OnFailure: policy, BreakerFailures: 3, BreakerCoolDown: time.Second, Clock: clock,
	})
	require.NoError(t, err)
	return guard
}

func TestHeadersThroughTheProductionStackEqualTheBareLimiters(t *testing.T) {
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			_, bareClient, advanceBare := redistest.Miniredis(t, epoch)
			_, stackClient, advanceStack := redistest.Miniredis(t, epoch)
			bare, err := kind.new(bareClient)
			require.NoError(t, err)
			backend, err := kind.new(stackClient)
			require.NoError(t, err)
			clock := ratelimittest.NewClock(epoch)
			stack := productionStack(t, backend, clock, ratelimit.FailOpen)
			bareHandler, _ := limited(t, bare)
			stackHandler, _ := limited(t, stack)

			for i, gap := range []time.Duration{0, 0, 0, 0, 0, 0, 300 * ms, 300 * ms, 700 * ms, 2 * time.Second, 0, 0, 1500 * ms, 6 * time.Second, 0} {
				advanceBare(gap)
				advanceStack(gap)
				clock.Advance(gap)
				want := do(bareHandler, "alice", "")
				got := do(stackHandler, "alice", "")
				require.Equal(t, want.Code, got.Code, "request %d", i)
				assert.Equal(t, fields(want.Header()), fields(got.Header()), "request %d", i)
				assert.Equal(t, "5", got.Header().Get("RateLimit-Limit"), "request %d", i)
			}
		})
	}
}

func TestHeadersWhileRedisIsDownFromTheStart(t *testing.T) {
	m := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DialerRetries: 1})
	defer client.Close()
	m.Close() // down before the first request

	for _, kind := range redisKinds {
		l, err := kind.new(client)
		require.NoError(t, err)
		const policy = `"default";q=5;w=10`

		open, _ := limited(t, productionStack(t, l, ratelimittest.NewClock(epoch), ratelimit.FailOpen))
		resp := do(open, "alice", "")
		assert.Equal(t, http.StatusOK, resp.Code, kind.name)
		assert.Equal(t, "5", resp.Header().Get("RateLimit-Limit"), "%s: fail open never claims a limit of 0", kind.name)
		assert.Equal(t, policy, resp.Header().Get("RateLimit-Policy"), kind.name)

		closed, _ := limited(t, productionStack(t, l, ratelimittest.NewClock(epoch), ratelimit.FailClosed))
		resp = do(closed, "alice", "")
		assert.Equal(t, http.StatusTooManyRequests, resp.Code, kind.name)
		assert.Equal(t, "5", resp.Header().Get("RateLimit-Limit"), kind.name)
		assert.Equal(t, policy, resp.Header().Get("RateLimit-Policy"), kind.name)
		assert.Equal(t, "1", resp.Header().Get("Retry-After"), kind.name)
		assert.Equal(t, "1", resp.Header().Get("RateLimit-Reset"), "%s: the reset agrees with Retry-After", kind.name)
		assert.Equal(t, `"default";r=0;t=1`, resp.Header().Get("RateLimit"), kind.name)
	}
}

const ms = time.Millisecond

// Refunds and settled costs reach Redis through the production stack.
func TestAdjustmentsThroughTheProductionStack(t *testing.T) {
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			_, client, advance := redistest.Miniredis(t, epoch)
			// The middleware dates what it gives back by the real clock, so
			// the server's clock follows it, as a real server's would: a
			// refund must find its window open for as long as it really was.
			client.AddHook(&realTime{advance: advance, last: time.Now()})
			backend, err := kind.new(client)
			require.NoError(t, err)
			stack := productionStack(t, backend, ratelimittest.NewClock(epoch), ratelimit.FailOpen)
			var log errorLog
			h, next := adjusting(t, stack, httplimit.WithRefund(serverErrors), httplimit.WithSettle(), httplimit.WithOnError(log.hook))

			for i := range 8 {
				require.Equal(t, http.StatusInternalServerError, get(h, "alice", "/?status=500").Code, "request %d", i)
			}
			w := get(h, "alice", "/?cost=3") // 1 taken, settled at 3
			assert.Equal(t, "4", w.Header().Get("RateLimit-Remaining"))
			w = get(h, "alice", "/?cost=0") // 1 taken, given back
			assert.Equal(t, "1", w.Header().Get("RateLimit-Remaining"))
			w = get(h, "alice", "/")
			assert.Equal(t, "1", w.Header().Get("RateLimit-Remaining"))
			w = get(h, "alice", "/")
			assert.Equal(t, "0", w.Header().Get("RateLimit-Remaining"))
			assert.Equal(t, http.StatusTooManyRequests, get(h, "alice", "/").Code)
			assert.Equal(t, int64(12), next.calls.Load())
			assert.Empty(t, log.errs)
		})
	}
}

// realTime is a go-redis hook that moves a miniredis's clock by the real
// time passed before each command.
type realTime struct {
	mu      sync.Mutex
	advance func(time.Duration)
	last    time.Time
}

func (h *realTime) step() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	h.advance(now.Sub(h.last))
	h.last = now
}

func (h *realTime) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *realTime) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.step()
		return next(ctx, cmd)
	}
}

func (h *realTime) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.step()
		return next(ctx, cmds)
	}
}

// A refund of the request that opened a window lands in that window.
func TestRefundOfTheRequestThatOpenedAWindow(t *testing.T) {
	_, client, advance := redistest.Miniredis(t, epoch)
	client.AddHook(&realTime{advance: advance, last: time.Now()})
	onRedis, err := ratelimit.NewRedisFixedWindow(client, 2, time.Minute)
	require.NoError(t, err)
	inProcess, err := ratelimit.NewFixedWindow(2, time.Minute) // on the system clock
	require.NoError(t, err)
	for _, l := range []ratelimit.Limiter{inProcess, onRedis} {
		h, _ := adjusting(t, l, httplimit.WithRefund(serverErrors))
		for i := range 3 {
			w := get(h, "k", "/?status=500")
			assert.Equal(t, "1", w.Header().Get("RateLimit-Remaining"), "%T: request %d", l, i)
		}
	}
}
