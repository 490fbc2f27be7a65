package ratelimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// RedisConcurrency on real redis-servers: leases held by 64 goroutines, on
// one server and on a cluster; holders that die without releasing; a
// server killed, paused and restarted under load. These tests wait on
// real time where the server's clock is the subject.

func TestRealRedisConcurrencyReleasesTwiceAfterExpiryAndOfAnotherLimiter(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	checkReleases(t, client, time.Sleep)
}

func TestRealRedisConcurrencyHoldsAtMostItsLimitWith64Goroutines(t *testing.T) {
	client := redistest.Shared(t).Client(t)
	checkHeldNeverExceeds(t, client)
	n, err := client.DBSize(context.Background()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "every key is deleted with its last lease")
}

func TestRealRedisClusterConcurrencyHoldsAtMostItsLimitWith64Goroutines(t *testing.T) {
	t.Parallel()
	cluster := redistest.SharedCluster(t)
	client := cluster.Client(t)
	checkHeldNeverExceeds(t, client)
	assert.Equal(t, []int64{0, 0, 0}, masterSizes(t, client), "every key is deleted with its last lease")
	var mu sync.Mutex
	var calls []int
	require.NoError(t, client.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "commandstats").Result()
		mu.Lock()
		calls = append(calls, strings.Count(info, "cmdstat_evalsha:"))
		mu.Unlock()
		return err
	}))
	assert.Equal(t, []int{1, 1, 1}, calls, "every master decided some of the keys")
}

// checkHeldNeverExceeds runs 64 goroutines on two limiters sharing keys
// (two processes, say): 12 keys of 3 units in flight, each goroutine
// taking 1 or 2 units for a random few ms, extending half its leases
// halfway. A counter per key, raised inside the work and lowered before
// the release, never passes 3; the keys come back full.
func checkHeldNeverExceeds(t *testing.T, client redis.Scripter) {
	ctx := context.Background()
	const limit, keys, goroutines, rounds = 3, 12, 64, 40
	var limiters [2]*RedisConcurrency
	for i := range limiters {
		c, err := NewRedisConcurrency(client, limit, 10*time.Second)
		require.NoError(t, err)
		limiters[i] = c
	}
	var inFlight, peak [keys]atomic.Int64
	var granted, denied atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			c := limiters[g%2]
			r := rand.New(rand.NewPCG(uint64(g), 23))
			for range rounds {
				k, n := r.IntN(keys), 1+r.IntN(2)
				key := "job:" + strconv.Itoa(k)
				lease, d, err := c.Acquire(ctx, key, n)
				if !assert.NoError(t, err) {
					return
				}
				if !d.Allowed {
					denied.Add(1)
					time.Sleep(time.Duration(r.IntN(500)) * time.Microsecond)
					continue
				}
				granted.Add(1)
				v := inFlight[k].Add(int64(n))
				assert.LessOrEqual(t, v, int64(limit), "key %d", k)
				for p := peak[k].Load(); v > p && !peak[k].CompareAndSwap(p, v); p = peak[k].Load() {
				}
				work := time.Duration(r.IntN(3000)) * time.Microsecond
				time.Sleep(work / 2) // the work
				if r.IntN(2) == 0 {
					lease, err = lease.Extend(ctx)
					assert.NoError(t, err)
				}
				time.Sleep(work / 2)
				inFlight[k].Add(-int64(n))
				assert.NoError(t, lease.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.Positive(t, denied.Load(), "the keys were contended")
	reached := 0
	for k := range keys {
		if peak[k].Load() == limit {
			reached++
		}
		_, d, err := limiters[0].Acquire(ctx, "job:"+strconv.Itoa(k), 0)
		require.NoError(t, err)
		assert.Equal(t, ok(limit, limit, 0), d.Result, "key %d: every unit came back", k)
	}
	assert.Positive(t, reached, "some key held its whole limit")
	t.Logf("%d leases granted, %d denials; %d of %d keys reached their limit", granted.Load(), denied.Load(), reached, keys)
}

// holderAddrEnv names the variable that makes
// TestRealRedisConcurrencyHolderProcess a holder: the address of the
// server it acquires a lease on.
const holderAddrEnv = "RATELIMIT_TEST_HOLDER_ADDR"

// holderTTL is the TTL of the lease a dead holder leaves behind.
const holderTTL = time.Second

// TestRealRedisConcurrencyHolderProcess is not a test: run by
// TestRealRedisConcurrencyUnitsOfAKilledProcessComeBackAtTheTTL as a child
// process, it acquires the one unit of key "job" on the server at
// $RATELIMIT_TEST_HOLDER_ADDR, says so on stdout, and waits to be killed.
func TestRealRedisConcurrencyHolderProcess(t *testing.T) {
	addr := os.Getenv(holderAddrEnv)
	if addr == "" {
		t.Skip("the child process of TestRealRedisConcurrencyUnitsOfAKilledProcessComeBackAtTheTTL")
	}
	client := redis.NewClient(&redis.Options{Addr: addr})
	defer client.Close()
	c, err := NewRedisConcurrency(client, 1, holderTTL, WithKeyPrefix("dead:"))
	require.NoError(t, err)
	_, d, err := c.Acquire(context.Background(), "job", 1)
	fmt.Printf("held %v %v\n", d.Allowed, err)
	time.Sleep(time.Minute)
}

func TestRealRedisConcurrencyUnitsOfAKilledProcessComeBackAtTheTTL(t *testing.T) {
	server := redistest.Shared(t)
	client := server.Client(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestRealRedisConcurrencyHolderProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), holderAddrEnv+"="+server.Addr)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(out)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "held ") {
	}
	require.Equal(t, "held true <nil>", lines.Text(), "the child holds the unit")
	require.NoError(t, cmd.Process.Kill()) // it never releases
	_ = cmd.Wait()

	c, err := NewRedisConcurrency(client, 1, holderTTL, WithKeyPrefix("dead:"))
	require.NoError(t, err)
	checkComesBackAtExpiry(t, client, c, "job")
}

func TestRealRedisConcurrencyUnitsOfAClosedClientComeBackAtTheTTL(t *testing.T) {
	server := redistest.Shared(t)
	client := server.Client(t)
	holder := redis.NewClient(&redis.Options{Addr: server.Addr})
	h, err := NewRedisConcurrency(holder, 1, holderTTL)
	require.NoError(t, err)
	_, d, err := h.Acquire(context.Background(), "job", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, holder.Close()) // it never releases

	c, err := NewRedisConcurrency(client, 1, holderTTL)
	require.NoError(t, err)
	checkComesBackAtExpiry(t, client, c, "job")
}

// checkComesBackAtExpiry checks that key's one unit, held by a lease that
// nobody will release, comes back when the lease's expiry (read from its
// key, a STRING of one lease) passes on the server's clock, and not before: every Acquire made
// before the expiry, by the server's TIME after its reply, is denied, and
// the first made after it, by TIME before the call, is allowed.
func checkComesBackAtExpiry(t *testing.T, client *redis.Client, c *RedisConcurrency, key string) {
	t.Helper()
	ctx := context.Background()
	one, err := client.Get(ctx, storedKey(c.KeyPrefix(), key)).Result()
	require.NoError(t, err, "a key of one lease is a STRING")
	_, value, _ := strings.Cut(one, ":")
	_, expiry := leaseValue(t, value)
	serverNow := func() int64 {
		now, err := client.Time(ctx).Result()
		require.NoError(t, err)
		return now.UnixMicro()
	}
	left := time.Duration(expiry-serverNow()) * time.Microsecond
	require.Greater(t, left, holderTTL/2, "the test reached this point well within the TTL")
	denials := 0
	for {
		before := serverNow()
		_, d, err := c.Acquire(ctx, key, 1)
		require.NoError(t, err)
		after := serverNow()
		if after < expiry {
			require.False(t, d.Allowed, "allowed %v before the lease's expiry", time.Duration(expiry-after)*time.Microsecond)
			assert.GreaterOrEqual(t, d.RetryAfter, time.Duration(expiry-after)*time.Microsecond, "RetryAfter is the time to the expiry")
			assert.LessOrEqual(t, d.RetryAfter, time.Duration(expiry-before)*time.Microsecond, "RetryAfter is the time to the expiry")
			denials++
		}
		if before >= expiry {
			require.True(t, d.Allowed, "denied %v after the lease's expiry", time.Duration(before-expiry)*time.Microsecond)
			break
		}
		if d.Allowed {
			break // between the two readings
		}
		time.Sleep(min(20*time.Millisecond, time.Duration(expiry-after)*time.Microsecond/2+time.Millisecond))
	}
	assert.Greater(t, denials, 5, "denied until the expiry")
}

func TestRealRedisConcurrencyKilledPausedAndRestartedNeverHandsASlotOutTwice(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t, func(o *redis.Options) {
		o.MaxRetries = -1
		o.ContextTimeoutEnabled = true
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout = 200 * time.Millisecond
		o.WriteTimeout = 200 * time.Millisecond
		o.PoolSize = 32
	})
	ctx := context.Background()
	const limit, keys, workers, ttl = 2, 4, 16, 3 * time.Second
	c, err := NewRedisConcurrency(client, limit, ttl)
	require.NoError(t, err)

	// gen counts the servers' states: 1 after the restart. A lease granted
	// while gen did not change was granted by that state, and is counted
	// in that state's counter of its key, which must never pass the limit.
	var gen atomic.Int64
	var inFlight [2][keys]atomic.Int64
	var granted [2]atomic.Int64
	var backendErrs, lost, failedReleases atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for !stop.Load() {
				k := r.IntN(keys)
				key := "job:" + strconv.Itoa(k)
				g := gen.Load()
				callCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
				lease, d, err := c.Acquire(callCtx, key, 1)
				cancel()
				if err != nil {
					assert.ErrorIs(t, err, ErrBackend)
					backendErrs.Add(1)
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if !d.Allowed {
					time.Sleep(time.Millisecond)
					continue
				}
				counted := gen.Load() == g
				if counted {
					granted[g].Add(1)
					assert.LessOrEqual(t, inFlight[g][k].Add(1), int64(limit), "state %d, key %d: a slot handed out twice", g, k)
				}
				time.Sleep(time.Duration(1+r.IntN(10)) * time.Millisecond) // the work
				callCtx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				if _, err := lease.Extend(callCtx); err != nil {
					if assert.NotErrorIs(t, err, ErrCorruptState) && errors.Is(err, ErrLeaseExpired) {
						assert.NotEqual(t, g, gen.Load(), "a lease lost without a restart")
						lost.Add(1)
					}
				}
				if counted {
					inFlight[g][k].Add(-1)
				}
				if err := lease.Release(callCtx); err != nil {
					assert.ErrorIs(t, err, ErrBackend)
					failedReleases.Add(1) // held until its TTL
				}
				cancel()
			}
		})
	}
	run := func(d time.Duration) { time.Sleep(d) }

	run(300 * time.Millisecond)
	server.Pause()
	run(600 * time.Millisecond)
	server.Resume()
	run(300 * time.Millisecond)
	witness, d, err := c.Acquire(ctx, "witness", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	server.Kill()
	gen.Add(1)
	run(200 * time.Millisecond)
	server.Restart(t)
	// go-redis redials a pool whose dials failed once a second: wait for
	// the first lease of the new state, then run on.
	require.Eventually(t, func() bool { return granted[1].Load() > 0 }, 5*time.Second, 10*time.Millisecond, "no lease after the restart")
	run(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()

	// What a restart without persistence did to the leases it held: they
	// are gone, their units free at once, their Extend fails.
	_, err = witness.Extend(ctx)
	require.ErrorIs(t, err, ErrLeaseExpired)
	require.NoError(t, witness.Release(ctx))
	_, d, err = c.Acquire(ctx, "witness", 0)
	require.NoError(t, err)
	assert.Equal(t, ok(limit, limit, 0), d.Result, "the unit came back with the restart")

	assert.Positive(t, granted[0].Load(), "leases before the restart")
	assert.Positive(t, granted[1].Load(), "leases after the restart")
	assert.Positive(t, backendErrs.Load(), "calls failed while the server was paused or down")
	t.Logf("granted %d before and %d after the restart; %d backend errors; %d leases lost with the restart; %d releases failed",
		granted[0].Load(), granted[1].Load(), backendErrs.Load(), lost.Load(), failedReleases.Load())

	// Every unit comes back: at once, or, for a lease whose release failed
	// (or whose Acquire's reply was lost), at its TTL.
	deadline := time.Now().Add(ttl + time.Second)
	for k := range keys {
		for {
			_, d, err := c.Acquire(ctx, "job:"+strconv.Itoa(k), 0)
			require.NoError(t, err)
			if d.Remaining == limit {
				break
			}
			require.True(t, time.Now().Before(deadline), "key %d: %d units still held after the TTL", k, limit-d.Remaining)
			time.Sleep(50 * time.Millisecond)
		}
	}
}
