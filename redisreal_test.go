package ratelimit

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// These tests run against a real redis-server started on a free 127.0.0.1
// port (and skip with a message where redis-server is not installed): what
// miniredis cannot show, such as real Lua number formatting, real TIME, real
// timeouts and a real cluster.

func TestRealRedisTokenBucketSharesOneBudgetAcrossClients(t *testing.T) {
	server := redistest.Start(t)
	const (
		capacity = 10
		rate     = 100.0 // tokens per second
		clients  = 3
		runFor   = 400 * time.Millisecond
	)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < clients; i++ {
		l, err := NewRedisTokenBucket(server.Client(t), capacity, rate)
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < runFor {
				res, err := l.Allow(context.Background(), "shared", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if res.Allowed {
					allowed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// Seed 000's bound: never more than the capacity plus what refilled.
	bound := capacity + rate*elapsed.Seconds()
	got := float64(allowed.Load())
	t.Logf("%d clients allowed %v in %v; bound %.1f", clients, got, elapsed, bound)
	assert.LessOrEqual(t, got, bound)
	assert.GreaterOrEqual(t, got, 0.8*bound, "clients hammering a shared key get close to the bound")
}

func TestRealRedisTokenBucketKeepsEveryDigitAndSetsTheTTL(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	ctx := context.Background()
	l, err := NewRedisTokenBucket(client, 5, 1) // 1 s per token
	require.NoError(t, err)
	res, err := l.Allow(ctx, "k", 3)
	require.NoError(t, err)
	assert.Equal(t, Result{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: 3 * time.Second}, res)

	key := DefaultTokenBucketPrefix + "k"
	fields, err := client.HGetAll(ctx, key).Result()
	require.NoError(t, err)
	assert.Equal(t, "2000000", fields["credit"])
	// last_refill is the server's TIME in µs, every one of its 16 digits:
	// tostring would have kept 14 and written it in exponent form.
	last, err := strconv.ParseInt(fields["last_refill"], 10, 64)
	require.NoError(t, err, "last_refill %q is a whole number", fields["last_refill"])
	assert.Len(t, fields["last_refill"], 16)
	serverNow, err := client.Time(ctx).Result()
	require.NoError(t, err)
	assert.InDelta(t, serverNow.UnixMicro(), last, float64(5*time.Second/time.Microsecond))

	ttl, err := client.PTTL(ctx, key).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, 3*time.Second)
	assert.Greater(t, ttl, 2500*time.Millisecond)
}

func TestRealRedisTokenBucketSurvivesScriptFlush(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	ctx := context.Background()
	l, err := NewRedisTokenBucket(client, 5, 0.001) // no refill during the test
	require.NoError(t, err)
	for want := 4; want >= 0; want-- {
		if want == 2 {
			require.NoError(t, client.ScriptFlush(ctx).Err())
		}
		res, err := l.Allow(ctx, "k", 1)
		require.NoError(t, err, "after SCRIPT FLUSH the script is sent again with EVAL")
		assert.True(t, res.Allowed)
		assert.Equal(t, want, res.Remaining)
	}
	res, err := l.Allow(ctx, "k", 1)
	require.NoError(t, err)
	assert.False(t, res.Allowed)
}

func TestRealRedisTokenBucketWrongKeyType(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	ctx := context.Background()
	require.NoError(t, client.LPush(ctx, DefaultTokenBucketPrefix+"list", "x").Err())
	l, err := NewRedisTokenBucket(client, 5, 1)
	require.NoError(t, err)
	res, err := l.Allow(ctx, "list", 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "WRONGTYPE")
	assert.Equal(t, Result{Limit: 5}, res)
}

func TestRealRedisTokenBucketStoppedServer(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t, func(o *redis.Options) {
		o.DialTimeout = 100 * time.Millisecond
		o.ReadTimeout = 100 * time.Millisecond
		o.WriteTimeout = 100 * time.Millisecond
		o.MaxRetries = -1
		o.DialerRetries = 1
	})
	l, err := NewRedisTokenBucket(client, 5, 1)
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "k", 1)
	require.NoError(t, err)

	server.Kill()
	start := time.Now()
	res, err := l.Allow(context.Background(), "k", 1)
	elapsed := time.Since(start)
	require.Error(t, err)
	assert.Equal(t, Result{Limit: 5}, res)
	var netErr net.Error
	assert.ErrorAs(t, err, &netErr, "the client's network error is wrapped")
	assert.Less(t, elapsed, time.Second, "an error comes within the client's timeouts")
}

func TestRealRedisClusterTokenBucketAcrossSlots(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	client := cluster.Client(t)
	ctx := context.Background()
	l, err := NewRedisTokenBucket(client, 2, 0.001)
	require.NoError(t, err)
	const keys = 300
	for i := 0; i < keys; i++ {
		key := "user:" + strconv.Itoa(i)
		for j, want := range []bool{true, true, false} {
			res, err := l.Allow(ctx, key, 1)
			require.NoError(t, err, "key %s call %d", key, j)
			require.Equal(t, want, res.Allowed, "key %s call %d", key, j)
		}
	}
	// The keys are spread over every master.
	var mu sync.Mutex
	var sizes []int64
	require.NoError(t, client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := node.DBSize(ctx).Result()
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		return err
	}))
	require.Len(t, sizes, 3)
	var total int64
	for _, n := range sizes {
		assert.Greater(t, n, int64(keys/10), "every master holds a share of the keys: %v", sizes)
		total += n
	}
	assert.Equal(t, int64(keys), total)
}

// TestRealRedisRetriedTimeoutTakesTokensTwice shows why the Redis limiters
// want a client with retries off: go-redis retries a command whose reply
// timed out, but the server may already have run the script, so one Allow
// can take its tokens twice.
func TestRealRedisRetriedTimeoutTakesTokensTwice(t *testing.T) {
	server := redistest.Start(t)
	ctx := context.Background()

	// dialed signals every new connection after the first, which is how a
	// retry after a timed-out read begins (the timed-out connection is
	// discarded).
	dialed := make(chan struct{}, 16)
	var dials atomic.Int64
	newClient := func(maxRetries int) *redis.Client {
		return server.Client(t, func(o *redis.Options) {
			o.ReadTimeout = 200 * time.Millisecond
			o.MaxRetries = maxRetries
			o.PoolSize = 1
			o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if dials.Add(1) > 1 {
					dialed <- struct{}{}
				}
				return conn, err
			}
		})
	}

	t.Run("with retries", func(t *testing.T) {
		dials.Store(0)
		l, err := NewRedisTokenBucket(newClient(3), 10, 0.001)
		require.NoError(t, err)
		_, err = l.Allow(ctx, "retried", 0) // connect while the server runs
		require.NoError(t, err)

		server.Pause()
		go func() {
			<-dialed // the first try timed out; the retry is dialing
			server.Resume()
		}()
		res, err := l.Allow(ctx, "retried", 1)
		require.NoError(t, err)
		assert.True(t, res.Allowed)
		assert.Equal(t, 8, res.Remaining, "one Allow took 2 tokens: the timed-out try ran too")
	})

	t.Run("without retries", func(t *testing.T) {
		dials.Store(0)
		l, err := NewRedisTokenBucket(newClient(-1), 10, 0.001)
		require.NoError(t, err)
		_, err = l.Allow(ctx, "once", 0)
		require.NoError(t, err)

		server.Pause()
		_, err = l.Allow(ctx, "once", 1)
		server.Resume()
		require.Error(t, err, "the read timed out and was not retried")

		res, err := l.Allow(ctx, "once", 0)
		require.NoError(t, err)
		assert.Equal(t, 9, res.Remaining, "the script still ran once: an error does not prove nothing was taken")
	})
}
