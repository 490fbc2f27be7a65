package redisbatch

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// Coalescing: while a script call of a Redis limiter is in flight, the Allow
// calls that arrive are queued, and sent together as one call of the batch
// script when a call in flight returns. No goroutine is started: the caller
// that finds room leads its batch, and a leader whose batch is done hands
// the next batch (the queue, up to maxBatch calls) to the first of its
// calls, which leads it in turn, so that every goroutine returns as soon as
// its own answer is there. Before it hands over a queue shorter than the
// batch it answered, a leader yields once, so that the callers it answered
// can call again into that queue.

const (
	// defaultMaxInFlight is how many batches of one limiter may be on the
	// wire at once: one being decided while the reply of another travels
	// and is parsed, few enough that batches grow under load (measured in
	// bench/README.md: 2 gave more decisions per second than 1, 3, 4 or 6
	// at 64 and 256 goroutines, though fewer than one call per decision at
	// 8).
	defaultMaxInFlight = 2
	// defaultMaxBatch bounds the checks of one script call (its requests,
	// times a Composite's parts), so that one call never holds the server
	// for long: a batch of 128 runs for about 0.5 to 1.1 ms
	// (bench/README.md).
	defaultMaxBatch = 128
)

// coalescer gathers the calls of one Redis limiter into batches. Its fields
// are guarded by mu. It is safe for concurrent use.
type coalescer struct {
	mu          sync.Mutex
	inFlight    int
	queue       []*Request
	maxInFlight int
	maxBatch    int
	send        func(ctx context.Context, batch []*Request) // fills every request's Record or Err
	// apart makes a leader whose ctx has a deadline wait for its answer
	// apart from its batch, which then runs on a goroutine of its own
	// (see Sender.Do).
	apart bool
}

// do decides p: at once, as a batch of its own, when fewer than maxInFlight
// batches are on the wire and none is waiting; otherwise in a later batch.
// It returns p's answer, or, when p.Ctx ends while p waits, waiting false:
// the caller then answers with the ctx's error and must not read p again.
func (c *coalescer) do(p *Request) (waited bool) {
	c.mu.Lock()
	if c.inFlight < c.maxInFlight && len(c.queue) == 0 {
		c.inFlight++
		c.mu.Unlock()
		return c.lead([]*Request{p})
	}
	p.done = make(chan struct{}, 1)
	c.queue = append(c.queue, p)
	c.mu.Unlock()

	select {
	case <-p.done:
	case <-p.Ctx.Done():
		c.mu.Lock()
		if !p.taken {
			c.remove(p)
			c.mu.Unlock()
			return false
		}
		leads := p.lead != nil
		c.mu.Unlock()
		if !leads {
			// Its batch is on the wire: its decision may still be made,
			// but the caller has given up.
			return false
		}
		<-p.done // handed a batch, which must be sent all the same
	}
	if p.lead != nil {
		return c.lead(p.lead)
	}
	return true
}

// lead sends batch, answers its calls, and hands the next batch over, and
// reports whether its first call, the leader's, has its answer. A leader
// whose ctx has a deadline, when its client does not stop a command at it
// (apart), waits for the answer apart from the batch, which runs on a
// goroutine of its own: at the deadline it gives up, as a queued call
// does, and the batch runs on, answering its other calls and handing the
// next batch over when it is done.
func (c *coalescer) lead(batch []*Request) bool {
	if c.apart && hasDeadline(batch[0].Ctx) {
		return waitApart(batch[0].Ctx, func() { c.sendAndHandOver(batch) })
	}
	c.sendAndHandOver(batch)
	return true
}

// sendAndHandOver sends batch, answers its calls, and hands the next batch
// over. A batch of one is sent with its call's ctx; a larger one with none
// of its callers' cancellation (each caller stops waiting on its own) and
// the latest of their deadlines, if every one has a deadline.
func (c *coalescer) sendAndHandOver(batch []*Request) {
	ctx := batch[0].Ctx
	if len(batch) > 1 {
		var cancel context.CancelFunc
		ctx, cancel = batchContext(batch)
		defer cancel()
	}
	c.send(ctx, batch)
	for _, q := range batch[1:] {
		q.done <- struct{}{}
	}
	c.handOver(len(batch))
}

// handOver gives the queued calls, up to maxBatch, to the first of them to
// send, or frees the batch's place on the wire when none is queued; answered
// is how many calls the batch just sent answered.
func (c *coalescer) handOver(answered int) {
	c.mu.Lock()
	if answered > 1 && len(c.queue) < answered {
		// Fewer calls wait than were just answered: let the answered ones
		// run first, so that those that call again join the next batch
		// rather than wait for the one after it (bench/README.md: at 8
		// and 64 goroutines about a quarter fewer script calls per
		// decision, and less CPU on both sides). A yield, not a timer:
		// with nothing else to run it returns at once. Handing the
		// leadership over and letting the next leader take the queue when
		// it runs gained a tenth as much: it runs before most of them.
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
	}
	if len(c.queue) == 0 {
		c.inFlight--
		c.mu.Unlock()
		return
	}
	size := min(len(c.queue), c.maxBatch)
	batch := make([]*Request, size)
	copy(batch, c.queue)
	c.queue = c.queue[size:]
	if len(c.queue) == 0 {
		c.queue = nil
	}
	for _, q := range batch {
		q.taken = true
	}
	batch[0].lead = batch
	c.mu.Unlock()
	batch[0].done <- struct{}{}
}

// remove takes p out of the queue. The caller holds mu.
func (c *coalescer) remove(p *Request) {
	for i, q := range c.queue {
		if q == p {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			return
		}
	}
}

// batchContext returns the context a batch of several calls is sent with.
func batchContext(batch []*Request) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, p := range batch {
		d, ok := p.Ctx.Deadline()
		if !ok {
			return context.WithCancel(context.WithoutCancel(batch[0].Ctx))
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(batch[0].Ctx), latest)
}
