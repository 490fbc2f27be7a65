package ratelimit

import (
	"context"
	"errors"
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

// gatedSender is a coalescer's send that records each batch's keys and
// blocks until the test releases it.
type gatedSender struct {
	mu      sync.Mutex
	batches [][]string
	entered chan struct{}
	release chan error
}

func newGatedSender() *gatedSender {
	return &gatedSender{entered: make(chan struct{}, 16), release: make(chan error, 16)}
}

func (g *gatedSender) send(_ context.Context, batch []*pending) {
	keys := make([]string, len(batch))
	for i, p := range batch {
		keys[i] = p.key
	}
	g.mu.Lock()
	g.batches = append(g.batches, keys)
	g.mu.Unlock()
	g.entered <- struct{}{}
	err := <-g.release
	for _, p := range batch {
		p.res, p.err = Result{Allowed: err == nil, Limit: 1}, err
	}
}

func (g *gatedSender) sent() [][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([][]string(nil), g.batches...)
}

// waitQueued waits until c holds n queued calls.
func waitQueued(t *testing.T, c *coalescer, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.queue) == n
	}, 5*time.Second, time.Millisecond)
}

func TestCoalescerSendsAtOnceThenGathersWhatArrivesMeanwhile(t *testing.T) {
	g := newGatedSender()
	c := &coalescer{maxInFlight: 1, maxBatch: 2, send: g.send}
	var wg sync.WaitGroup
	results := make([]bool, 5)
	call := func(i int) {
		defer wg.Done()
		p := &pending{ctx: context.Background(), key: strconv.Itoa(i), n: 1}
		require.True(t, c.do(p))
		results[i] = p.res.Allowed
	}
	wg.Add(1)
	go call(0)
	<-g.entered // the first call went at once, alone
	for i := 1; i < 5; i++ {
		wg.Add(1)
		go call(i)
		waitQueued(t, c, i)
	}
	g.release <- nil
	<-g.entered // the next batch: at most maxBatch of the queue, in order
	g.release <- nil
	<-g.entered
	g.release <- nil
	wg.Wait()
	assert.Equal(t, [][]string{{"0"}, {"1", "2"}, {"3", "4"}}, g.sent())
	assert.Equal(t, []bool{true, true, true, true, true}, results)
	assert.Equal(t, 0, c.inFlight, "no batch left in flight")
}

func TestCoalescerCallWhoseContextEndsWhileQueuedReturnsAtOnce(t *testing.T) {
	g := newGatedSender()
	c := &coalescer{maxInFlight: 1, maxBatch: 8, send: g.send}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.do(&pending{ctx: context.Background(), key: "first", n: 1})
	}()
	<-g.entered

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan bool)
	go func() { gaveUp <- c.do(&pending{ctx: ctx, key: "gives up", n: 1}) }()
	waitQueued(t, c, 1)
	cancel()
	assert.False(t, <-gaveUp, "returns while the batch ahead is still on the wire")
	waitQueued(t, c, 0)

	g.release <- nil
	wg.Wait()
	assert.Equal(t, [][]string{{"first"}}, g.sent(), "a call that gave up while queued is never sent")
	assert.Equal(t, 0, c.inFlight)
}

func TestCoalescerBatchErrorFailsOnlyThatBatch(t *testing.T) {
	g := newGatedSender()
	c := &coalescer{maxInFlight: 1, maxBatch: 8, send: g.send}
	boom := errors.New("connection reset")
	var wg sync.WaitGroup
	errs := make([]error, 3)
	call := func(i int) {
		defer wg.Done()
		p := &pending{ctx: context.Background(), key: strconv.Itoa(i), n: 1}
		c.do(p)
		errs[i] = p.err
	}
	wg.Add(1)
	go call(0)
	<-g.entered
	wg.Add(2)
	go call(1)
	waitQueued(t, c, 1)
	go call(2)
	waitQueued(t, c, 2)
	g.release <- boom // the first batch fails
	<-g.entered
	g.release <- nil // the second does not
	wg.Wait()
	assert.ErrorIs(t, errs[0], boom)
	assert.NoError(t, errs[1])
	assert.NoError(t, errs[2])
}

// evalshaCalls reads how many EVALSHA and EVAL calls the server has served.
func evalshaCalls(t *testing.T, client *redis.Client) int64 {
	t.Helper()
	info, err := client.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	var total int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), cmd); ok {
				n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				require.NoError(t, err)
				total += n
			}
		}
	}
	return total
}

func TestRealRedisCoalescedCallsStayExact(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t, func(o *redis.Options) { o.PoolSize = 64 })
	for _, kind := range redisKinds {
		t.Run(kind.name, func(t *testing.T) {
			// 3 per key for a long time; 64 goroutines ask 5 times for
			// each of 1,000 keys, and 2,000 times for one hot key of 100.
			l, err := kind.new(client, 3, time.Hour)
			require.NoError(t, err)
			hot, err := kind.new(client, 100, time.Hour)
			require.NoError(t, err)
			_, err = l.Allow(context.Background(), "warm", 0) // the server caches the script
			require.NoError(t, err)
			before := evalshaCalls(t, client)
			const goroutines, keys = 64, 1000
			var allowed [keys]atomic.Int64
			var hotAllowed, calls atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Go(func() {
					ctx := context.Background()
					for i := g; i < keys*5; i += goroutines {
						res, err := l.Allow(ctx, "k"+strconv.Itoa(i%keys), 1)
						if !assert.NoError(t, err) {
							return
						}
						if res.Allowed {
							allowed[i%keys].Add(1)
						}
						res, err = hot.Allow(ctx, "hot", 1)
						if !assert.NoError(t, err) {
							return
						}
						if res.Allowed {
							hotAllowed.Add(1)
						}
						calls.Add(2)
					}
				})
			}
			wg.Wait()
			for i := range allowed {
				require.Equal(t, int64(3), allowed[i].Load(), "key %d", i)
			}
			assert.Equal(t, int64(100), hotAllowed.Load())
			scripts := evalshaCalls(t, client) - before
			t.Logf("%d decisions in %d script calls (%.1f per call)", calls.Load(), scripts, float64(calls.Load())/float64(scripts))
			assert.Less(t, scripts, calls.Load(), "concurrent calls were coalesced")
		})
	}
}

func TestRedisLimitersWithoutCoalescingSendOneCallPerDecision(t *testing.T) {
	server := redistest.Start(t)
	client := server.Client(t, func(o *redis.Options) { o.PoolSize = 16 })
	l, err := NewRedisTokenBucket(client, 1000, 1, WithoutCoalescing())
	require.NoError(t, err)
	_, err = l.Allow(context.Background(), "warm", 1) // the server caches the script
	require.NoError(t, err)
	before := evalshaCalls(t, client)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Go(func() {
			for i := 0; i < 20; i++ {
				_, err := l.Allow(context.Background(), "k", 1)
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(320), evalshaCalls(t, client)-before)

	_, err = NewTokenBucket(1, 1, WithoutCoalescing())
	require.ErrorIs(t, err, ErrInvalidConfig, "in-process limiters do not coalesce")
}
