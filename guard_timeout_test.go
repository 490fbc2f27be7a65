package ratelimit

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// frozenServer listens on 127.0.0.1 and never answers: it reads what
// clients send and keeps their connections open until the test ends, as a
// server stopped with SIGSTOP does.
func frozenServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, c) })
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// stuckScripter is a redis.Scripter of another package that ignores its
// context: each script call waits 2 s, or until the test ends.
type stuckScripter struct {
	redis.Scripter
	release chan struct{}
}

func (s stuckScripter) EvalSha(context.Context, string, []string, ...any) *redis.Cmd {
	return s.wait()
}

func (s stuckScripter) Eval(context.Context, string, []string, ...any) *redis.Cmd {
	return s.wait()
}

func (s stuckScripter) wait() *redis.Cmd {
	select {
	case <-s.release:
	case <-time.After(2 * time.Second):
	}
	return redis.NewCmdResult(nil, errDown)
}

// checkTimeoutHolds makes calls through a fail-closed Guard of timeout
// around l, on a server that never answers, and checks that each returns
// by the timeout plus slack, answered by the policy.
func checkTimeoutHolds(t *testing.T, l Limiter, timeout, slack time.Duration) {
	t.Helper()
	hooks := &recordingHooks{}
	g, err := NewGuard(l, GuardConfig{Timeout: timeout, OnFailure: FailClosed, Hooks: hooks})
	require.NoError(t, err)
	for i := range 4 {
		start := time.Now()
		d, err := g.Decide(context.Background(), "k", 1)
		elapsed := time.Since(start)
		require.NoError(t, err)
		assert.Equal(t, FromFailClosed, d.Source, "call %d", i)
		assert.LessOrEqual(t, elapsed, timeout+slack, "call %d took %v", i, elapsed)
		assert.ErrorIs(t, hooks.last().BackendErr, ErrBackend, "call %d", i)
	}
}

// TestGuardTimeoutHoldsWhateverTheClientsOptions: a Guard's Timeout bounds
// each call on a server that never answers, through a go-redis client built
// without ContextTimeoutEnabled (whose reads then wait for its 5 s
// ReadTimeout), coalescing or not, alone or in a Composite, and through a
// redis.Scripter of another package that ignores its context.
func TestGuardTimeoutHoldsWhateverTheClientsOptions(t *testing.T) {
	// The slack is for a loaded machine; a call the Timeout did not bound
	// would take the client's 5 s, or the foreign Scripter's 2 s.
	const timeout, slack = 100 * time.Millisecond, 900 * time.Millisecond
	addr := frozenServer(t)
	client := func(t *testing.T) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	t.Run("coalescing", func(t *testing.T) {
		l, err := NewRedisTokenBucket(client(t), PerSecond(1), 10)
		require.NoError(t, err)
		checkTimeoutHolds(t, l, timeout, slack)
	})
	t.Run("WithoutCoalescing", func(t *testing.T) {
		l, err := NewRedisGCRA(client(t), 10, time.Second, WithoutCoalescing())
		require.NoError(t, err)
		checkTimeoutHolds(t, l, timeout, slack)
	})
	t.Run("Composite", func(t *testing.T) {
		c := client(t)
		rps, err := NewRedisTokenBucket(c, PerSecond(10), 10)
		require.NoError(t, err)
		day, err := NewRedisFixedWindow(c, 100, 24*time.Hour)
		require.NoError(t, err)
		l, err := NewComposite(Part{Name: "rps", Limiter: rps}, Part{Name: "day", Limiter: day})
		require.NoError(t, err)
		checkTimeoutHolds(t, l, timeout, slack)
	})
	t.Run("a Scripter of another package", func(t *testing.T) {
		s := stuckScripter{release: make(chan struct{})}
		defer close(s.release)
		l, err := NewRedisFixedWindow(s, 10, time.Second)
		require.NoError(t, err)
		checkTimeoutHolds(t, l, timeout, slack)
	})
}

// TestRealRedisGuardTimeoutHoldsWithoutContextTimeoutEnabled: on a real
// server stopped with SIGSTOP, a Guard with a 100 ms Timeout answers every
// call within it, through the client docs/redis.md sets up minus
// ContextTimeoutEnabled, whose reads would otherwise wait 5 s.
func TestRealRedisGuardTimeoutHoldsWithoutContextTimeoutEnabled(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.DialerRetries = 1
		o.ReadTimeout = 5 * time.Second
		o.WriteTimeout = 5 * time.Second
	})
	bucket, err := NewRedisTokenBucket(client, PerSecond(1), 10)
	require.NoError(t, err)
	_, err = bucket.Allow(context.Background(), "k", 1)
	require.NoError(t, err, "the server answers before it is stopped")

	server.Pause()
	defer server.Resume()
	checkTimeoutHolds(t, bucket, 100*time.Millisecond, 150*time.Millisecond)
}

// BenchmarkGuardTimeoutOnRedis measures a Guard with a Timeout around a
// RedisTokenBucket on a real server, one call at a time, through a client
// built with ContextTimeoutEnabled (the call runs on the caller's
// goroutine) and one without (the script call runs on a goroutine of its
// own, so that the Timeout holds).
func BenchmarkGuardTimeoutOnRedis(b *testing.B) {
	for _, enabled := range []bool{true, false} {
		name := "ContextTimeoutEnabled"
		if !enabled {
			name = "without ContextTimeoutEnabled"
		}
		b.Run(name, func(b *testing.B) {
			server := redistest.Start(b)
			client := server.Client(b, func(o *redis.Options) {
				o.MaxRetries = -1
				o.ContextTimeoutEnabled = enabled
			})
			bucket, err := NewRedisTokenBucket(client, PerSecond(1e6), 1<<30)
			require.NoError(b, err)
			g, err := NewGuard(bucket, GuardConfig{Timeout: time.Second})
			require.NoError(b, err)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := g.Allow(ctx, "k", 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
