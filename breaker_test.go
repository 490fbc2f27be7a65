package ratelimit

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

func TestGuardsSharingABreakerNoticeAnOutageOnce(t *testing.T) {
	clock := ratelimittest.NewClock(epoch)
	breakerHooks := &recordingHooks{}
	shared, err := NewBreaker(BreakerConfig{Failures: 2, CoolDown: time.Second, Hooks: breakerHooks})
	require.NoError(t, err)
	backend := &stubBackend{}
	backend.set(Result{}, errDown)
	var guards []*Guard
	var guardHooks []*recordingHooks
	for range 3 {
		h := &recordingHooks{}
		g, err := NewGuard(backend, GuardConfig{Breaker: shared, Hooks: h, Clock: clock})
		require.NoError(t, err)
		guards, guardHooks = append(guards, g), append(guardHooks, h)
	}
	ctx := context.Background()

	// Two failures, by two Guards, open the one breaker.
	for _, g := range guards[:2] {
		d, err := g.Decide(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, FromFailOpen, d.Source)
	}
	assert.Equal(t, int64(2), backend.calls.Load())
	assert.Equal(t, BreakerOpen, shared.State())
	for _, g := range guards {
		assert.Equal(t, BreakerOpen, g.BreakerState())
	}
	// The third Guard answers by its policy without asking the backend.
	d, err := guards[2].Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromFailOpen, d.Source)
	assert.Equal(t, int64(2), backend.calls.Load(), "the open breaker keeps every Guard from the backend")

	// After the cool-down one probe, by any Guard, closes it for all.
	clock.Advance(time.Second)
	backend.set(Result{Allowed: true, Limit: 5, Remaining: 4}, nil)
	d, err = guards[2].Decide(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, FromBackend, d.Source)
	for _, g := range guards {
		assert.Equal(t, BreakerClosed, g.BreakerState())
	}

	assert.Equal(t, [][2]BreakerState{{BreakerClosed, BreakerOpen}, {BreakerOpen, BreakerHalfOpen}, {BreakerHalfOpen, BreakerClosed}},
		breakerHooks.changes, "each change reported once, to the Breaker's hooks")
	for i, h := range guardHooks {
		assert.Empty(t, h.changes, "Guard %d reports decisions only", i)
		assert.NotEmpty(t, h.events, "Guard %d", i)
	}
}

func TestSharedBreakerConfigurationErrors(t *testing.T) {
	for name, cfg := range map[string]BreakerConfig{
		"no failures":   {Failures: 0, CoolDown: time.Second},
		"negative":      {Failures: -1, CoolDown: time.Second},
		"no cool-down":  {Failures: 1},
		"cool-down < 0": {Failures: 1, CoolDown: -time.Second},
	} {
		_, err := NewBreaker(cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	shared, err := NewBreaker(BreakerConfig{Failures: 1, CoolDown: time.Second})
	require.NoError(t, err)
	backend := &stubBackend{}
	for name, cfg := range map[string]GuardConfig{
		"and BreakerFailures": {Breaker: shared, BreakerFailures: 3, BreakerCoolDown: time.Second},
		"and BreakerCoolDown": {Breaker: shared, BreakerCoolDown: time.Second},
		"a zero Breaker":      {Breaker: &Breaker{}},
	} {
		_, err := NewGuard(backend, cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig, name)
	}
	assert.Equal(t, BreakerClosed, (*Breaker)(nil).State())
}

// evalCounter counts the script calls a client sends.
type evalCounter struct{ calls atomic.Int64 }

func (c *evalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *evalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") {
			c.calls.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *evalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRealRedisGuardsSharingABreakerPayOneTimeout stalls the server with
// SIGSTOP under three Guards, one per limiter of one client, sharing a
// Breaker: the first call times out and opens it, and the other two Guards
// answer by their policy without sending anything.
func TestRealRedisGuardsSharingABreakerPayOneTimeout(t *testing.T) {
	server := redistest.Start(t)
	client := productionClient(t, server)
	counter := &evalCounter{}
	client.AddHook(counter)
	shared, err := NewBreaker(BreakerConfig{Failures: 1, CoolDown: time.Hour})
	require.NoError(t, err)
	bucket, err := NewRedisTokenBucket(client, PerSecond(1), 5)
	require.NoError(t, err)
	gcra, err := NewRedisGCRA(client, 5, time.Second)
	require.NoError(t, err)
	window, err := NewRedisFixedWindow(client, 5, time.Second)
	require.NoError(t, err)
	var guards []*Guard
	for _, l := range []Limiter{bucket, gcra, window} {
		g, err := NewGuard(l, GuardConfig{Timeout: 100 * time.Millisecond, OnFailure: FailClosed, Breaker: shared})
		require.NoError(t, err)
		guards = append(guards, g)
	}
	ctx := context.Background()
	for _, g := range guards {
		d, err := g.Decide(ctx, "k", 1)
		require.NoError(t, err)
		require.Equal(t, FromBackend, d.Source)
	}
	before := counter.calls.Load()

	server.Pause()
	defer server.Resume()
	for i, g := range guards {
		d, err := g.Decide(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, FromFailClosed, d.Source, "Guard %d", i)
	}
	assert.Equal(t, int64(1), counter.calls.Load()-before, "one script call timed out; the other Guards sent none")
	assert.Equal(t, BreakerOpen, shared.State())
}
