// Package redisbatch carries the requests of ratelimit's Redis limiters to
// the batch script and brings back each one's record of its reply: the
// coalescing of concurrent requests into one script call, the encoding of
// the call in its formats, the guard that sends a call at most once, the
// routing of a batch by hash slot or ring shard, and the splitting of the
// binary reply into records, each record of one check decoded and checked
// once. It knows nothing of limiters, policies or Results: the root
// package makes its Requests and reads their Verdicts and Records.
//
// Its files follow a call: sender.go (the Sender, the coalescer, the
// send-once guard), encode.go (the Request, its Limits, its stored key
// and the call's arguments), record.go (the reply); route.go and node.go
// serve clients of several servers, assemble.go and callformat.go the
// script.
//
// Its surface: a Sender, made once per limiter (or per Composite of Redis
// limiters) by NewSender from a Config, whose Send sends one Request; the
// Limit a check refers to, and the LimitCache of per-key limits; the
// Record of a reply, its Verdicts, and a Fault.
package redisbatch

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script is the batch script: its Lua source, and the SHA1 by which
// EVALSHA names it. It is immutable.
type Script struct {
	src, sha string
}

// NewScript returns the Script of the Lua source src.
func NewScript(src string) Script {
	sum := sha1.Sum([]byte(src))
	return Script{src: src, sha: hex.EncodeToString(sum[:])}
}

// SHA returns the SHA1 by which EVALSHA names s, in lower-case hex.
func (s Script) SHA() string { return s.sha }

// Config is what a Sender is made from.
type Config struct {
	Client redis.Scripter
	Script Script
	// Limits are the limits of every request's checks, one check per
	// limit in order; empty when each request carries its own
	// (Request.Limit, or Request.Limits for several checks).
	Limits []*Limit
	// Checks is the number of checks of every request when Limits is
	// empty: 0 or 1 for one, each carrying Request.Limit; more for a
	// Composite's requests, each carrying Request.Limits.
	Checks int
	// Coalesce gathers the requests that arrive while others are in flight
	// into one script call (see coalescer); a client whose routing is
	// unknown never coalesces.
	Coalesce bool
	// TokenTTL is how long a Settle's token key is kept.
	TokenTTL time.Duration
	// Now, when set, is the caller's clock: it returns the time a batch is
	// decided on, in µs of Unix time, 0 <= now < MaxNow, or an error, which
	// becomes the Err of every request of the batch. It is read once per
	// batch, when the batch is sent, and the time goes to Script as its
	// first argument, which must then be the script of the caller's clock
	// (a script assembled on CallerTime). Nil: Script reads the server's TIME.
	Now func() (int64, error)
}

// MaxNow bounds the time a caller's clock may give, in µs of Unix time:
// 2^52, about the year 2112, so that the script's sums of a time and a
// span (each at most 2^52) stay below 2^53, which Lua's doubles hold
// exactly.
const MaxNow = 1 << 52

// Sender sends the batch script calls of one Redis limiter, or of the Redis
// parts of a Composite. It is immutable and safe for concurrent use as far
// as its client is.
type Sender struct {
	client redis.Scripter
	script Script
	route  route
	once   bool // calls are held to one write (see sendsOnce)
	// limits is the script's arguments after R: S, then each limit's
	// kind, units and param; nil when each request carries its own.
	limits []any
	leased []bool     // whether each of limits takes a lease (LuaKind.Leases); nil when each request carries its own
	checks int        // of every request (but a Release's or Extend's, one)
	units  int64      // of its one limit, if it has one; else 0
	co     *coalescer // nil without coalescing
	// apart makes a call whose ctx has a deadline wait for its answer
	// apart from the script call, which runs on a goroutine of its own:
	// the client does not stop a command at its ctx's deadline (see
	// honoursDeadlines).
	apart    bool
	tokenTTL int                   // ms
	now      func() (int64, error) // the caller's clock; nil: the server's TIME
	nowArgs  int                   // 1 with the caller's clock, which a call sends; else 0
}

// NewSender returns the Sender cfg describes, coalescing with batches of at
// most defaultMaxBatch checks.
func NewSender(cfg Config) *Sender {
	s := &Sender{
		client:   cfg.Client,
		script:   cfg.Script,
		route:    routeOf(cfg.Client),
		once:     sendsOnce(cfg.Client),
		apart:    !honoursDeadlines(cfg.Client),
		checks:   max(1, len(cfg.Limits), cfg.Checks),
		tokenTTL: int(cfg.TokenTTL / time.Millisecond),
		now:      cfg.Now,
	}
	if s.now != nil {
		s.nowArgs = 1
	}
	if len(cfg.Limits) == 1 {
		s.units = cfg.Limits[0].Units
	}
	if len(cfg.Limits) > 0 {
		s.limits = make([]any, 0, 1+3*len(cfg.Limits))
		s.limits = append(s.limits, len(cfg.Limits))
		for _, l := range cfg.Limits {
			s.limits = append(s.limits, l.args[:]...)
			s.leased = append(s.leased, l.leased)
		}
	}
	if cfg.Coalesce && s.route != routeAlone {
		// The bound is on checks, which is what holds the server: a
		// Composite's requests have one per part.
		s.co = &coalescer{maxInFlight: defaultMaxInFlight, maxBatch: max(1, defaultMaxBatch/s.checks), send: s.sendBatch, apart: s.apart}
	}
	return s
}

// Coalesces reports whether s gathers concurrent requests into one call.
func (s *Sender) Coalesces() bool { return s.co != nil }

// SameShard reports whether one script call can touch the Redis keys a
// and b: on a cluster when they are in one hash slot, on a ring when they
// have one hash tag, and always on one server.
func (s *Sender) SameShard(a, b string) bool { return sameShard(s.route, a, b) }

// TokenKey returns the Redis key that remembers a Settle's token for a
// request whose first key is key, in key's hash slot, so that the
// request's script call can touch it on any client (see tokenKey).
func (s *Sender) TokenKey(key, token string) string { return tokenKey(key, token) }

// Send sends r, alone or coalesced, and reports whether it got an answer
// (r.Record or r.Err); false when r.Ctx ended while r waited for its
// batch, or when its deadline passed before the reply came, and then r
// must not be read again.
//
// r.Ctx's deadline bounds the wait whatever the client's options: a client
// that stops a command at its ctx's deadline (see honoursDeadlines) is
// called on the caller's goroutine; through any other, a call whose ctx
// has a deadline waits for its reply apart, and returns false at the
// deadline while its script call runs on to the client's own timeout.
func (s *Sender) Send(r *Request) bool {
	if s.co == nil {
		if s.apart && hasDeadline(r.Ctx) {
			return waitApart(r.Ctx, func() { s.sendBatch(r.Ctx, []*Request{r}) })
		}
		s.sendBatch(r.Ctx, []*Request{r})
		return true
	}
	return s.co.do(r)
}

// honoursDeadlines reports whether client stops a command at its ctx's
// deadline: a go-redis *redis.Client (failover clients included),
// *redis.ClusterClient or *redis.Ring built with ContextTimeoutEnabled.
// Without it, go-redis reads each reply until its ReadTimeout whatever the
// ctx; a redis.Scripter of any other type is not known to.
func honoursDeadlines(client redis.Scripter) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// hasDeadline reports whether ctx has a deadline.
func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

// waitApart runs send on a goroutine of its own and waits until it
// returns, reporting true, or until ctx ends, reporting false: send then
// runs on, and its answer is never read.
func waitApart(ctx context.Context, send func()) bool {
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		send()
	}()
	select {
	case <-answered:
		return true
	case <-ctx.Done():
		return false
	}
}

// scriptCall is one call of the batch script: the requests it decides, and
// its command.
type scriptCall struct {
	batch []*Request
	cmd   *redis.Cmd
}

// sendBatch decides batch with as few script calls as its client's route
// allows, sent together, and sets each request's Record or Err (its script
// call's error).
func (s *Sender) sendBatch(ctx context.Context, batch []*Request) {
	now := int64(-1)
	if s.now != nil {
		var err error
		if now, err = s.now(); err != nil {
			for _, p := range batch {
				p.Record, p.Err = "", err
			}
			return
		}
	}
	calls := []scriptCall{{batch: batch}}
	if len(batch) > 1 && (s.route == routeSlot || s.route == routeTag) {
		calls = s.split(batch)
	}
	for i := range calls {
		calls[i].cmd = s.command(ctx, calls[i].batch, "evalsha", s.script.sha, now)
	}
	s.run(ctx, calls)
	// A server that does not know the script (after SCRIPT FLUSH, a restart
	// or a failover) refused those calls unrun: send them again whole.
	var again []scriptCall
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			calls[i].cmd = s.evalOf(ctx, calls[i].cmd)
			again = append(again, calls[i])
		}
	}
	if again != nil {
		s.run(ctx, again)
	}
	for _, c := range calls {
		s.answer(c)
	}
}

// evalOf returns the command that sends the script call of cmd, which
// the server refused unrun, again by "eval" and the script's source: its
// arguments, under a send-once guard of its own.
func (s *Sender) evalOf(ctx context.Context, cmd *redis.Cmd) *redis.Cmd {
	args := slices.Clone(cmd.Args())
	args[0], args[1] = "eval", s.script.src
	var once *onceArg
	for i, a := range args {
		if o, ok := a.(*onceArg); ok {
			once = &onceArg{}
			once.text = append(once.buf[:0], o.text...)
			args[i] = once
			break
		}
	}
	again := redis.NewCmd(ctx, args...)
	if once != nil {
		once.cmd = again
	}
	return again
}

// processor is what every go-redis client has: it sends a command.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// pipeliner is what the clients of several servers have: a pipeline that
// sends each command to its key's server, and each server's commands at
// once.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// run sends calls, together when there are several, and leaves each reply
// or error in its command.
func (s *Sender) run(ctx context.Context, calls []scriptCall) {
	if len(calls) > 1 {
		if c, ok := s.client.(pipeliner); ok {
			pipe := c.Pipeline()
			for _, call := range calls {
				_ = pipe.Process(ctx, call.cmd)
			}
			_, _ = pipe.Exec(ctx) // every command holds its own error
			return
		}
	}
	for _, call := range calls {
		if c, ok := s.client.(processor); ok {
			_ = c.Process(ctx, call.cmd)
			continue
		}
		// A Scripter of another kind: through its own EVALSHA or EVAL. The
		// onceArg allows no second write, as go-redis never sets an error on
		// call.cmd meanwhile.
		args := call.cmd.Args()
		keys := make([]string, args[2].(int))
		for i := range keys {
			keys[i] = args[3+i].(string)
		}
		argv := args[3+len(keys):]
		var res *redis.Cmd
		if args[0] == "eval" {
			res = s.client.Eval(ctx, s.script.src, keys, argv...)
		} else {
			res = s.client.EvalSha(ctx, s.script.sha, keys, argv...)
		}
		call.cmd.SetVal(res.Val())
		call.cmd.SetErr(res.Err())
	}
}

// answer sets the Record, and for a request of one check its Verdict and
// Fault (see readReply), or the Err of each request of call.
func (s *Sender) answer(call scriptCall) {
	reply, err := call.cmd.Result()
	if err == nil {
		if text, ok := reply.(string); ok {
			err = readReply(text, call.batch, s.units)
		} else {
			err = fmt.Errorf("unexpected reply from Redis script: %.200q", fmt.Sprint(reply))
		}
	}
	if err != nil {
		for _, p := range call.batch {
			p.Record, p.Err = "", err
		}
	}
}

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
	// (see Sender.Send).
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

// ErrNotResent is the error of a script call that go-redis tried to send a
// second time after a failure that came once the call had been sent (a read
// that timed out, a connection that broke): the server may have run it, and
// a second run would decide its requests twice.
var ErrNotResent = errors.New("the Redis client tried to send the script call again after it had been sent; " +
	"it was not sent again, since the server may already have decided it")

// onceArg is the first argument of a batch script call, its number of
// requests, written so that go-redis sends the call at most once: go-redis
// writes a command's arguments each time it sends it, and retries a command
// whose connection failed after it was written (MaxRetries), though the
// server may have run it. onceArg lets a call be written again only when
// the server answered the earlier try with an error that says it did not
// run the call (unrun) and go-redis set that error on the command before
// trying again, as a cluster client does when it follows MOVED or ASK to
// another node. Any other second write fails with ErrNotResent, which
// go-redis returns without retrying; so a retry of go-redis's within one
// client, after LOADING or TRYAGAIN as after a timeout, becomes an error.
//
// cmd is the call's command; nil when the call is not made through a
// command of ours, and then no second write is allowed. It is safe for
// concurrent use.
type onceArg struct {
	text []byte // in buf
	buf  [20]byte
	cmd  *redis.Cmd
	sent atomic.Bool
}

// MarshalBinary returns the argument's text the first time, and after an
// unrun answer; ErrNotResent otherwise.
func (a *onceArg) MarshalBinary() ([]byte, error) {
	if a.sent.Swap(true) {
		if a.cmd == nil || !unrun(a.cmd.Err()) {
			return nil, ErrNotResent
		}
		a.cmd.SetErr(nil) // the next second write needs an unrun answer of its own
	}
	return a.text, nil
}

// String returns the argument's text, for hooks and logs that print a
// command.
func (a *onceArg) String() string { return string(a.text) }

// unrunPrefixes are the prefixes of the error replies with which a Redis
// server refuses a command without running it, and after which go-redis may
// send the command again: to the slot's new owner, or once the server is
// ready.
var unrunPrefixes = [...]string{"MOVED ", "ASK ", "TRYAGAIN ", "CLUSTERDOWN ", "LOADING ", "READONLY ", "MASTERDOWN ", "NOREPLICAS "}

// unrun reports whether err is a reply with which the server refused a
// command without running it.
func unrun(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	msg := reply.Error()
	for _, p := range unrunPrefixes {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return strings.HasPrefix(msg, "ERR max number of clients reached")
}
