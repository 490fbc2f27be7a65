package ratelimit

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// Fault injection on a real redis-server: killed, stalled with SIGSTOP,
// flushed and restarted under a Guard. TestMain checks that no goroutine is
// left behind.

// productionClient is a client set up as docs/redis.md recommends for
// limiters: no retries, and ctx deadlines bound every call.
func productionClient(t *testing.T, server *redistest.Server) *redis.Client {
	return server.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.ContextTimeoutEnabled = true
		o.DialTimeout = time.Second
		o.ReadTimeout = time.Second
		o.WriteTimeout = time.Second
		o.DialerRetries = 1
	})
}

// guardTimeout is the Timeout of guardedBucket's Guard, and callSlack what
// a call may take beyond it on a loaded machine: far below the seconds of
// go-redis's own timeouts, which a call that hangs would take.
const (
	guardTimeout = 50 * time.Millisecond
	callSlack    = 400 * time.Millisecond
)

// guardedBucket is a Redis token bucket behind a fail-closed Guard with a
// 50 ms timeout and a breaker that opens after 3 failures for coolDown.
func guardedBucket(t *testing.T, client redis.Scripter, coolDown time.Duration) (*Guard, *recordingHooks) {
	bucket, err := NewRedisTokenBucket(client, PerSecond(1000), 1000)
	require.NoError(t, err)
	hooks := &recordingHooks{}
	g, err := NewGuard(bucket, GuardConfig{
		Timeout: guardTimeout, OnFailure: FailClosed,
		BreakerFailures: 3, BreakerCoolDown: coolDown, Hooks: hooks,
	})
	require.NoError(t, err)
	return g, hooks
}

// callsWithin makes calls guarded calls and checks that each returns
// within limit, without an error, from the given sources.
func callsWithin(t *testing.T, g *Guard, hooks *recordingHooks, calls int, limit time.Duration, sources ...Source) {
	t.Helper()
	for i := 0; i < calls; i++ {
		start := time.Now()
		_, err := g.Allow(context.Background(), "k", 1)
		elapsed := time.Since(start)
		require.NoError(t, err, "call %d", i)
		assert.LessOrEqual(t, elapsed, limit, "call %d took %v", i, elapsed)
		assert.Contains(t, sources, hooks.last().Source, "call %d", i)
	}
}

// recoversWithin calls until the backend answers again and checks that it
// did so within limit.
func recoversWithin(t *testing.T, g *Guard, hooks *recordingHooks, limit time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < 5*limit {
		_, err := g.Allow(context.Background(), "k", 1)
		require.NoError(t, err)
		if hooks.last().Source == FromBackend {
			assert.LessOrEqual(t, time.Since(start), limit, "decisions came from Redis again")
			assert.Equal(t, BreakerClosed, g.BreakerState())
			return
		}
		time.Sleep(5 * time.Millisecond) // polling a real server's recovery
	}
	t.Fatalf("no decision from Redis within %v", 5*limit)
}

func TestRealRedisKilledMidRun(t *testing.T) {
	server := redistest.Start(t)
	const coolDown = 300 * time.Millisecond
	g, hooks := guardedBucket(t, productionClient(t, server), coolDown)
	callsWithin(t, g, hooks, 20, time.Second, FromBackend)

	server.Kill()
	// Every call returns within the timeout, denied by policy (the slack
	// is for a loaded machine: a hung call would take the client's
	// seconds).
	callsWithin(t, g, hooks, 30, guardTimeout+callSlack, FromFailClosed)
	assert.Equal(t, BreakerOpen, g.BreakerState())

	server.Restart(t)
	recoversWithin(t, g, hooks, coolDown+700*time.Millisecond)
}

func TestRealRedisStalledWithSIGSTOP(t *testing.T) {
	server := redistest.Start(t)
	const coolDown = 300 * time.Millisecond
	g, hooks := guardedBucket(t, productionClient(t, server), coolDown)
	callsWithin(t, g, hooks, 5, time.Second, FromBackend)

	server.Pause()
	// The first calls time out after 50 ms; then the breaker opens and
	// answers at once. None hangs.
	callsWithin(t, g, hooks, 10, guardTimeout+callSlack, FromFailClosed)
	assert.Equal(t, BreakerOpen, g.BreakerState())
	for _, d := range hooks.events[5:8] {
		// go-redis turns the ctx deadline into the socket's: a net timeout.
		var netErr net.Error
		if assert.ErrorAs(t, d.BackendErr, &netErr) {
			assert.True(t, netErr.Timeout(), "%v is a timeout", d.BackendErr)
		}
	}

	server.Resume()
	recoversWithin(t, g, hooks, coolDown+700*time.Millisecond)
}

func TestRealRedisFlushAndRestartLoseState(t *testing.T) {
	server := redistest.Start(t)
	client := productionClient(t, server)
	bucket, err := NewRedisTokenBucket(client, Every(1000*time.Second), 5) // nothing refills during the test
	require.NoError(t, err)
	ctx := context.Background()
	for want := 4; want >= 2; want-- {
		res, err := bucket.Allow(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, want, res.Remaining)
	}

	// SCRIPT FLUSH: the script is sent again; the bucket is untouched.
	require.NoError(t, client.ScriptFlush(ctx).Err())
	res, err := bucket.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, 1, res.Remaining)

	// A restart without persistence loses every bucket: they start full.
	// The restart costs at most the one call that finds its pooled
	// connection dead; none after it fails.
	server.Restart(t)
	errs := 0
	var results []Result
	for i := 0; i < 5; i++ {
		res, err := bucket.Allow(ctx, "k", 1)
		if err != nil {
			errs++
			require.Zero(t, len(results), "an error after the first success: %v", err)
			continue
		}
		results = append(results, res)
	}
	assert.LessOrEqual(t, errs, 1)
	require.NotEmpty(t, results)
	assert.Equal(t, 4, results[0].Remaining, "the bucket started full again")
}
