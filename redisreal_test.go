package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run against a real redis-server started on a free 127.0.0.1
// port (and skip with a message where redis-server is not installed): what
// miniredis cannot show, such as real Lua number formatting, real TIME, real
// timeouts and a real cluster.

func TestRealRedisSharesOneBudgetAcrossClients(t *testing.T) {
	server := redistest.Shared(t)
	const (
		limit   = 10
		clients = 3
		runFor  = 400 * time.Millisecond
	)
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			// Buckets refill 100 tokens/s; the window lasts past the test.
			period := limit * 10 * time.Millisecond
			if kind.window {
				period = time.Minute
			}
			var allowed atomic.Int64
			var wg sync.WaitGroup
			start := time.Now()
			for i := 0; i < clients; i++ {
				l, err := kind.new(server.Client(t), limit, period)
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
			got := float64(allowed.Load())
			if kind.window {
				assert.Equal(t, float64(limit), got, "one window, shared")
				return
			}
			// Never more than the capacity plus what refilled, and clients
			// hammering a key get a good part of it (half: on a loaded
			// machine a client may wait for a core through whole refills).
			bound := limit + float64(limit)/period.Seconds()*elapsed.Seconds()
			t.Logf("%d clients allowed %v in %v; bound %.1f", clients, got, elapsed, bound)
			assert.LessOrEqual(t, got, bound)
			assert.GreaterOrEqual(t, got, 0.5*bound)
		})
	}
}

func TestRealRedisKeepsEveryDigitAndSetsTheTTL(t *testing.T) {
	server := redistest.Shared(t)
	client := server.Client(t)
	ctx := context.Background()
	serverMicros := func() int64 {
		now, err := client.Time(ctx).Result()
		require.NoError(t, err)
		return now.UnixMicro()
	}
	// A whole number of µs with all 16 digits: tostring would have kept 14
	// and written it in exponent form.
	assertMicros := func(t *testing.T, s string, near int64) {
		t.Helper()
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "%q is a whole number", s)
		assert.Len(t, s, 16)
		assert.InDelta(t, near, v, float64(10*time.Second/time.Microsecond))
	}
	assertTTL := func(t *testing.T, key string, want time.Duration) {
		t.Helper()
		ttl, err := client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		assert.LessOrEqual(t, ttl, want)
		assert.Greater(t, ttl, want-500*time.Millisecond)
	}

	t.Run("RedisTokenBucket", func(t *testing.T) {
		l, err := NewRedisTokenBucket(client, PerSecond(1), 5) // 1 s per token
		require.NoError(t, err)
		res, err := l.Allow(ctx, "k", 3)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: 3 * time.Second}, res)
		fields, err := client.HGetAll(ctx, storedKey(l.KeyPrefix(), "k")).Result()
		require.NoError(t, err)
		assert.Len(t, fields, 1)
		assertMicros(t, fields["tat"], serverMicros()+3_000_000)
		assertTTL(t, storedKey(l.KeyPrefix(), "k"), 3*time.Second)
	})
	t.Run("RedisGCRA", func(t *testing.T) {
		l, err := NewRedisGCRA(client, 5, 5*time.Second)
		require.NoError(t, err)
		res, err := l.Allow(ctx, "k", 3)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: 3 * time.Second}, res)
		tat, err := client.Get(ctx, storedKey(l.KeyPrefix(), "k")).Result()
		require.NoError(t, err)
		assertMicros(t, tat, serverMicros()+3_000_000)
		assertTTL(t, storedKey(l.KeyPrefix(), "k"), 3*time.Second)
	})
	t.Run("RedisFixedWindow", func(t *testing.T) {
		l, err := NewRedisFixedWindow(client, 5, 5*time.Second)
		require.NoError(t, err)
		res, err := l.Allow(ctx, "k", 3)
		require.NoError(t, err)
		assert.Equal(t, Result{Allowed: true, Limit: 5, Remaining: 2, ResetAfter: 5 * time.Second}, res)
		count, err := client.Get(ctx, storedKey(l.KeyPrefix(), "k")).Result()
		require.NoError(t, err)
		assert.Equal(t, "3", count)
		assertTTL(t, storedKey(l.KeyPrefix(), "k"), 5*time.Second)
	})
}

func TestRealRedisSurvivesScriptFlush(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t)
	ctx := context.Background()
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			l, err := kind.new(client, 5, time.Hour) // nothing refills during the test
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
		})
	}
}

func TestRealRedisDefaultPrefixesTellConfigurationsApart(t *testing.T) {
	server := redistest.Shared(t)
	checkDefaultPrefixesTellConfigurationsApart(t, server.Client(t))
}

func TestRealRedisLimitersLeaveForeignStateAlone(t *testing.T) {
	server := redistest.Shared(t)
	checkForeignStateIsLeftAlone(t, server.Client(t))
}

// TestRealRedisFixedWindowNeverErrsAtAWindowsEnd hammers a 10 ms window from
// one client: Redis keeps a key through its expiry millisecond with PTTL 0,
// and a window whose time is up has ended, so no call may fail there. Each
// window, told by the first allowed call's Remaining, allows at most the
// limit, and the next opens no sooner than a window later (less the expiry
// millisecond, and a millisecond for the two clocks).
func TestRealRedisFixedWindowNeverErrsAtAWindowsEnd(t *testing.T) {
	server := redistest.Shared(t)
	const (
		limit  = 5
		window = 10 * time.Millisecond
		runFor = 300 * time.Millisecond
	)
	l, err := NewRedisFixedWindow(server.Client(t), limit, window)
	require.NoError(t, err)
	ctx := context.Background()

	type call struct {
		start, end time.Duration
		res        Result
	}
	var calls []call
	var errs []error
	begin := time.Now()
	for i := 0; i < 50_000 && time.Since(begin) < runFor; i++ {
		start := time.Since(begin)
		res, err := l.Allow(ctx, "k", 1)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		calls = append(calls, call{start, time.Since(begin), res})
	}
	if len(errs) > 0 {
		t.Fatalf("%d errors in %d calls; the first: %v", len(errs), len(errs)+len(calls), errs[0])
	}

	var opened []call
	count := 0
	for i, c := range calls {
		switch {
		case !c.res.Allowed:
			require.Zero(t, c.res.Remaining, "call %d: a denial comes with nothing left", i)
		case c.res.Remaining == limit-1:
			opened, count = append(opened, c), 1
		default:
			count++
			require.LessOrEqual(t, count, limit, "call %d allowed more than the limit in one window", i)
			require.Equal(t, limit-count, c.res.Remaining, "call %d", i)
		}
	}
	for i := 1; i < len(opened); i++ {
		gap := opened[i].end - opened[i-1].start
		require.GreaterOrEqual(t, gap, window-2*time.Millisecond, "window %d opened %v after the one before", i, gap)
	}
	t.Logf("%d calls, %d windows", len(calls), len(opened))
	require.GreaterOrEqual(t, len(opened), 10, "the run crossed many windows' ends")
}

func TestRealRedisStoppedServer(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t, func(o *redis.Options) {
		o.DialTimeout = 100 * time.Millisecond
		o.ReadTimeout = 100 * time.Millisecond
		o.WriteTimeout = 100 * time.Millisecond
		o.MaxRetries = -1
		o.DialerRetries = 1
	})
	var limiters []Limiter
	for _, kind := range redisKinds {
		l, err := kind.new(client, 5, time.Second)
		require.NoError(t, err)
		_, err = l.Allow(context.Background(), "k", 1)
		require.NoError(t, err)
		limiters = append(limiters, l)
	}

	server.Kill()
	for i, l := range limiters {
		start := time.Now()
		res, err := l.Allow(context.Background(), "k", 1)
		elapsed := time.Since(start)
		require.Error(t, err, redisKinds[i].name)
		assert.Equal(t, Result{Limit: 5}, res)
		var netErr net.Error
		assert.ErrorAs(t, err, &netErr, "%s: the client's network error is wrapped", redisKinds[i].name)
		assert.Less(t, elapsed, time.Second, "%s: an error comes within the client's timeouts", redisKinds[i].name)
	}
}

func TestRealRedisClusterAcrossSlots(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	ctx := context.Background()
	const keys = 200
	for _, kind := range redisKinds {
		l, err := kind.new(client, 2, time.Hour)
		require.NoError(t, err)
		for i := 0; i < keys; i++ {
			key := "user:" + strconv.Itoa(i)
			for j, want := range []bool{true, true, false} {
				res, err := l.Allow(ctx, key, 1)
				require.NoError(t, err, "%s key %s call %d", kind.name, key, j)
				require.Equal(t, want, res.Allowed, "%s key %s call %d", kind.name, key, j)
			}
		}
	}
	// The keys are spread over every master.
	sizes := masterSizes(t, client)
	require.Len(t, sizes, 3)
	var total int64
	for _, n := range sizes {
		assert.Greater(t, n, int64(len(redisKinds)*keys/10), "every master holds a share of the keys: %v", sizes)
		total += n
	}
	assert.Equal(t, int64(len(redisKinds)*keys), total)
}

// masterSizes returns the number of keys on each master of client's cluster.
func masterSizes(t *testing.T, client *redis.ClusterClient) []int64 {
	t.Helper()
	var mu sync.Mutex
	var sizes []int64
	require.NoError(t, client.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		n, err := node.DBSize(ctx).Result()
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
		return err
	}))
	return sizes
}

// TestRealRedisRetriedTimeoutDecidesOnce: go-redis retries a command whose
// reply timed out, but the server may already have run the script; the
// limiters let go-redis send a script call only once, so one Allow never
// takes its tokens twice, and the caller gets an error that says why.
func TestRealRedisRetriedTimeoutDecidesOnce(t *testing.T) {
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
		l, err := NewRedisTokenBucket(newClient(3), Every(1000*time.Second), 10)
		require.NoError(t, err)
		_, err = l.Allow(ctx, "retried", 0) // connect while the server runs
		require.NoError(t, err)

		server.Pause()
		go func() {
			<-dialed // the first try timed out; the retry is dialing
			server.Resume()
		}()
		res, err := l.Allow(ctx, "retried", 1)
		require.ErrorIs(t, err, redisbatch.ErrNotResent)
		assert.Contains(t, err.Error(), `"ratelimit:tb:10:1000000000:"+`+KeyDigest("retried"), "the error names the key by its digest")
		assert.Equal(t, Result{Limit: 10}, res)

		res, err = l.Allow(ctx, "retried", 0)
		require.NoError(t, err)
		assert.Equal(t, 9, res.Remaining, "the timed-out try ran, and it alone: one token taken")
	})

	t.Run("without retries", func(t *testing.T) {
		dials.Store(0)
		l, err := NewRedisTokenBucket(newClient(-1), Every(1000*time.Second), 10)
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

// realCalendar is the calendar of the tests on a real server, whose clock
// is real: minutes, in a zone of a half-hour offset.
func realCalendar(t *testing.T) Calendar {
	return Calendar{Period: CalendarMinute, Location: zone(t, "Asia/Kolkata")}
}

// withinOneWindow runs f until a run starts and ends in one window of cal
// on the system clock (at most three runs), so that a boundary passing
// during a run cannot make its decisions differ.
func withinOneWindow(t *testing.T, cal Calendar, f func(t *testing.T, run int) bool) {
	for run := range 3 {
		before, _ := cal.window(time.Now())
		done := f(t, run)
		after, _ := cal.window(time.Now())
		if before.Equal(after) && done {
			return
		}
	}
	t.Fatal("a window boundary passed during each of three runs")
}

func TestRealRedisCalendarWindowDecidesAsInProcess(t *testing.T) {
	server := redistest.Shared(t)
	client := server.Client(t)
	ctx := context.Background()
	cal := realCalendar(t)
	withinOneWindow(t, cal, func(t *testing.T, run int) bool {
		prefix := fmt.Sprintf("run%d:", run)
		local, err := NewCalendarWindow(5, cal)
		require.NoError(t, err)
		remote, err := NewRedisCalendarWindow(client, 5, cal, WithKeyPrefix(prefix))
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(uint64(run), 24))
		for i := range 60 {
			kind := 3 + rng.IntN(6)
			if rng.IntN(8) == 0 {
				kind = rng.IntN(3)
			}
			key, n := string(rune('a'+rng.IntN(3))), rng.IntN(4)
			want, werr := calendarOp(ctx, local, kind, key, n, time.Now())
			got, gerr := calendarOp(ctx, remote, kind, key, n, time.Now())
			msg := fmt.Sprintf("call %d: op %d, key %q, n %d", i, kind, key, n)
			require.Equal(t, werr, gerr, msg)
			assert.Equal(t, want.Allowed, got.Allowed, msg)
			assert.Equal(t, want.Remaining, got.Remaining, msg)
			assert.InDelta(t, want.ResetAfter, got.ResetAfter, float64(time.Second), msg)
			assert.InDelta(t, want.RetryAfter, got.RetryAfter, float64(time.Second), msg)
			assert.Equal(t, want.Policies, got.Policies, msg)
		}
		// Every key's state: the window's start and the count, until the
		// window's end.
		start, end := cal.window(time.Now())
		for _, key := range []string{"a", "b", "c"} {
			res, err := local.Allow(ctx, key, 0)
			require.NoError(t, err)
			v, err := client.Get(ctx, storedKey(remote.KeyPrefix(), key)).Result()
			if res.Remaining == 5 {
				assert.ErrorIs(t, err, redis.Nil, key)
				continue
			}
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("%d:%d", start.UnixMicro(), 5-res.Remaining), v, key)
			// Read before PTTL, so that the TTL read after it can only be
			// shorter: the key expires at the window's end, rounded up to
			// whole ms. The server's PTTL reads its cached time, which a
			// loaded machine (CI under -race) has seen lag by a few ms:
			// 50 ms of slack, far below a minute window's length.
			until := time.Until(end)
			ttl, err := client.PTTL(ctx, storedKey(remote.KeyPrefix(), key)).Result()
			require.NoError(t, err)
			assert.LessOrEqual(t, ttl, until+50*time.Millisecond, key, "until the window ends")
		}
		return true
	})
}

func TestRealRedisCalendarWindowFailsOnClockSkewAndWritesNothing(t *testing.T) {
	server := redistest.Shared(t)
	client := server.Client(t)
	ctx := context.Background()
	cal := Calendar{Period: CalendarHour}
	w, err := NewRedisCalendarWindow(client, 3, cal, WithClock(ratelimittest.NewClock(time.Now().Add(-3*time.Hour))))
	require.NoError(t, err)
	_, err = w.Allow(ctx, "k", 1)
	require.ErrorIs(t, err, ErrBackend)
	assert.Contains(t, err.Error(), "clock skew")
	_, err = w.Settle(ctx, "k", 0, 1)
	require.ErrorIs(t, err, ErrBackend)
	size, err := client.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, size)
}

func TestRealRedisCalendarWindowOnACluster(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	ctx := context.Background()
	cal := Calendar{Period: CalendarDay}
	withinOneWindow(t, cal, func(t *testing.T, run int) bool {
		w, err := NewRedisCalendarWindow(client, 2, cal, WithKeyPrefix(fmt.Sprintf("cal%d:", run)))
		require.NoError(t, err)
		for i := range 60 {
			key := strconv.Itoa(i)
			for j := range 3 {
				res, err := w.Allow(ctx, key, 1)
				require.NoError(t, err)
				assert.Equal(t, j < 2, res.Allowed, "key %s, call %d", key, j)
			}
		}
		return true
	})
	sizes := masterSizes(t, client)
	for _, n := range sizes {
		assert.Positive(t, n, "every master holds keys: %v", sizes)
	}
}
