package redisbatch

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

func (g *gatedSender) send(_ context.Context, batch []*Request) {
	keys := make([]string, len(batch))
	for i, p := range batch {
		keys[i] = p.Key
	}
	g.mu.Lock()
	g.batches = append(g.batches, keys)
	g.mu.Unlock()
	g.entered <- struct{}{}
	err := <-g.release
	for _, p := range batch {
		p.Record, p.Err = "1 0 0 0", err
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
		p := &Request{Ctx: context.Background(), Key: strconv.Itoa(i), N: 1}
		require.True(t, c.do(p))
		results[i] = p.Err == nil && p.Record == "1 0 0 0"
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
		c.do(&Request{Ctx: context.Background(), Key: "first", N: 1})
	}()
	<-g.entered

	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan bool)
	go func() { gaveUp <- c.do(&Request{Ctx: ctx, Key: "gives up", N: 1}) }()
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
		p := &Request{Ctx: context.Background(), Key: strconv.Itoa(i), N: 1}
		c.do(p)
		errs[i] = p.Err
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

// TestCoalescerLeaderApartGivesUpAtItsDeadline: with apart set (a client
// that does not stop a command at its ctx's deadline), a leader whose ctx
// has a deadline returns false at it while its batch is still on the wire;
// the batch runs on, answers the calls queued meanwhile in the next batch,
// and frees its place, as if the leader had waited.
func TestCoalescerLeaderApartGivesUpAtItsDeadline(t *testing.T) {
	g := newGatedSender()
	c := &coalescer{maxInFlight: 1, maxBatch: 4, send: g.send, apart: true}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	leader := &Request{Ctx: ctx, Key: "leader", N: 1}
	start := time.Now()
	gaveUp := make(chan bool)
	go func() { gaveUp <- c.do(leader) }()
	<-g.entered
	assert.False(t, <-gaveUp, "the leader gives up at its deadline")
	assert.Less(t, time.Since(start), 2*time.Second)

	// A call without a deadline queues behind the batch still on the wire.
	queued := &Request{Ctx: context.Background(), Key: "queued", N: 1}
	answered := make(chan bool)
	go func() { answered <- c.do(queued) }()
	waitQueued(t, c, 1)
	g.release <- nil // the leader's batch returns
	<-g.entered      // and hands the queue over
	g.release <- nil
	assert.True(t, <-answered)
	assert.Equal(t, Record("1 0 0 0"), queued.Record)
	assert.Equal(t, [][]string{{"leader"}, {"queued"}}, g.sent())
	c.mu.Lock()
	defer c.mu.Unlock()
	assert.Zero(t, c.inFlight, "every place on the wire is free again")
}
