package ratelimit

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/batch.lua
var batchLua string

// batchSHA is the SHA1 of batchLua, by which EVALSHA names it.
var batchSHA = func() string {
	sum := sha1.Sum([]byte(batchLua))
	return hex.EncodeToString(sum[:])
}()

// route is how the server or servers behind a client take a batch of
// requests: which keys one script call may touch.
type route int

const (
	// routeOne: one server (*redis.Client, failover clients included); one
	// call may touch any keys.
	routeOne route = iota
	// routeSlot: a Redis Cluster (*redis.ClusterClient); one call per hash
	// slot, the calls of a batch pipelined to each node.
	routeSlot
	// routeTag: a *redis.Ring, which shards by hash tag; one call per hash
	// tag, pipelined to each shard.
	routeTag
	// routeAlone: any other redis.Scripter, whose routing is unknown; one
	// call per request, and no coalescing.
	routeAlone
)

func routeOf(client redis.Scripter) route {
	switch client.(type) {
	case *redis.Client:
		return routeOne
	case *redis.ClusterClient:
		return routeSlot
	case *redis.Ring:
		return routeTag
	}
	return routeAlone
}

// sendsOnce reports whether a script call through client can be held to
// one write with an onceArg. A *redis.AutoPipeliner cannot: it marshals a
// command's arguments to size its batches before it writes them, and its
// calls go with go-redis's own retry policy.
func sendsOnce(client redis.Scripter) bool {
	_, auto := client.(*redis.AutoPipeliner)
	return !auto
}

// sender sends the batch script calls of one Redis limiter, or of the
// Redis parts of a Composite: its limits, and its requests, one check per
// limit in order. It is immutable and safe for concurrent use.
type sender struct {
	client redis.Scripter
	// limits is the script's arguments after R: S, then each limit's kind,
	// limit and param, formatted once.
	limits []any
	co     *coalescer // nil without coalescing
	// keyed: each request carries its own limit (pending.spec), for a
	// limiter built WithPolicyFunc; limits then only counts one check.
	keyed bool
}

// newSender returns the sender of limits (kind, limit and param each) for
// client, whose requests carry their own limit when keyed, coalescing
// unless noCoalesce or the client's route forbids it, with batches of at
// most defaultMaxBatch checks.
func newSender(client redis.Scripter, limits [][3]any, keyed, noCoalesce bool) *sender {
	s := &sender{client: client, limits: make([]any, 0, 1+3*len(limits)), keyed: keyed}
	s.limits = append(s.limits, len(limits))
	for _, l := range limits {
		s.limits = append(s.limits, l[0], l[1], l[2])
	}
	if !noCoalesce && routeOf(client) != routeAlone {
		// The bound is on checks, which is what holds the server: a
		// Composite's requests have one per part.
		s.co = &coalescer{maxInFlight: defaultMaxInFlight, maxBatch: max(1, defaultMaxBatch/len(limits)), send: s.sendBatch}
	}
	return s
}

// checks returns how many checks each request has: one per limit.
func (s *sender) checks() int { return len(s.limits) / 3 }

// do sends p, alone or coalesced, and reports whether it got an answer
// (p.line or p.err); false when p.ctx ended while p waited for its batch.
func (s *sender) do(p *pending) bool {
	if s.co == nil {
		s.sendBatch(p.ctx, []*pending{p})
		return true
	}
	return s.co.do(p)
}

// scriptCall is one call of the batch script: the requests it decides, and
// its command.
type scriptCall struct {
	batch []*pending
	cmd   *redis.Cmd
}

// sendBatch decides batch with as few script calls as its client's route
// allows, sent together, and sets each request's line (its line of the
// reply) or err (its script call's error).
func (s *sender) sendBatch(ctx context.Context, batch []*pending) {
	calls := s.split(batch)
	for i := range calls {
		calls[i].cmd = s.command(ctx, calls[i].batch, "evalsha", batchSHA)
	}
	s.run(ctx, calls)
	// A server that does not know the script (after SCRIPT FLUSH, a restart
	// or a failover) refused those calls unrun: send them again whole.
	var again []scriptCall
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			calls[i].cmd = s.command(ctx, calls[i].batch, "eval", batchLua)
			again = append(again, calls[i])
		}
	}
	if again != nil {
		s.run(ctx, again)
	}
	for _, c := range calls {
		answer(c)
	}
}

// split returns the script calls that decide batch: one for a single
// server; for a cluster, one per hash slot; for a ring, one per hash tag.
// Each call keeps the order of its requests. The keys of one request share
// a slot (and tag); their owners see to it.
func (s *sender) split(batch []*pending) []scriptCall {
	route := routeOf(s.client)
	if len(batch) == 1 || route == routeOne || route == routeAlone {
		return []scriptCall{{batch: batch}}
	}
	var calls []scriptCall
	index := make(map[any]int, len(batch))
	for _, p := range batch {
		var group any = hashTag(p.key)
		if route == routeSlot {
			group = hashSlot(p.key)
		}
		i, ok := index[group]
		if !ok {
			i = len(calls)
			index[group] = i
			calls = append(calls, scriptCall{})
		}
		calls[i].batch = append(calls[i].batch, p)
	}
	return calls
}

// command returns the command that runs the batch script (by "evalsha" and
// its SHA, or "eval" and its source) on batch. Its first script argument is
// an onceArg, so that go-redis sends it at most once, where the client
// allows (sendsOnce).
func (s *sender) command(ctx context.Context, batch []*pending, verb, script string) *redis.Cmd {
	c := s.checks()
	// A batch of plain Allows of one check each goes in the compact form:
	// -R, then only each request's cost, or one cost when there are several
	// and all are the same.
	compact := !s.keyed && c == 1
	same := len(batch) > 1 // while compact: every cost is the first's
	nkeys, nreqs := 0, 0   // nreqs: the requests' arguments when not compact
	for _, p := range batch {
		nkeys += c
		switch {
		case p.op == nil:
			nreqs += 1 + 2*c
			same = same && compact && p.cost(0) == batch[0].cost(0)
		case p.op.reset:
			compact = false
			nreqs += 2 + c
		default:
			compact = false
			nreqs += 4 + 2*c
			if p.op.token != "" {
				nkeys++
			}
		}
	}
	// R, then the limits: S and each limit's three, at most one limit per
	// request when each carries its own (keyed).
	nargs := 1 + len(s.limits)
	if s.keyed {
		nargs = 2 + 3*len(batch)
	}
	switch {
	case compact && same:
		nargs++
	case compact:
		nargs += len(batch)
	default:
		nargs += nreqs
	}
	args := make([]any, 3, 3+nkeys+nargs)
	args[0], args[1], args[2] = verb, script, nkeys
	for _, p := range batch {
		args = append(args, p.key)
		for _, k := range p.more {
			args = append(args, k)
		}
		if p.op != nil && p.op.token != "" {
			args = append(args, p.op.token)
		}
	}
	r := len(batch)
	if compact {
		r = -r
	}
	var once *onceArg
	if sendsOnce(s.client) {
		once = newOnceArg(r)
		args = append(args, once)
	} else {
		args = append(args, r)
	}
	// Check i (from 1) of a request refers to limit i, or, when each
	// request carries its own (keyed), to its own limit: limits[j] + 1.
	var limits []int
	if s.keyed {
		var specs []*[3]any
		specs, limits = keyedLimits(batch)
		args = append(args, len(specs))
		for _, spec := range specs {
			args = append(args, spec[0], spec[1], spec[2])
		}
	} else {
		args = append(args, s.limits...)
	}
	switch {
	case compact && same:
		// Of a batch of several: one cost for all of them.
		args = append(args, batch[0].cost(0))
	case compact:
		for _, p := range batch {
			args = append(args, p.cost(0))
		}
	default:
		base := 0
		for j, p := range batch {
			if s.keyed {
				base = limits[j]
			}
			switch {
			case p.op == nil:
				args = append(args, c)
				for i := 1; i <= c; i++ {
					args = append(args, base+i, p.cost(i-1))
				}
			case p.op.reset:
				args = append(args, "X", c)
				for i := 1; i <= c; i++ {
					args = append(args, base+i)
				}
			default:
				ttl := 0
				if p.op.token != "" {
					ttl = int(SettleTokenTTL / time.Millisecond)
				}
				args = append(args, "S", c, p.op.age, ttl)
				for i := 1; i <= c; i++ {
					args = append(args, base+i, p.cost(i-1))
				}
			}
		}
	}
	cmd := redis.NewCmd(ctx, args...)
	if once != nil {
		once.cmd = cmd
	}
	return cmd
}

// keyedLimits returns the distinct limits of a batch of requests that
// carry their own (pending.spec), and the index of each request's among
// them: a batch of one plan sends its limit once. It compares with the
// first maxSharedLimits distinct limits only, so that a batch of many
// policies costs no more than one limit per request.
func keyedLimits(batch []*pending) ([]*[3]any, []int) {
	specs := make([]*[3]any, 0, 4)
	index := make([]int, len(batch))
	for j, p := range batch {
		k := -1
		for i, spec := range specs[:min(len(specs), maxSharedLimits)] {
			if spec == p.spec || *spec == *p.spec {
				k = i
				break
			}
		}
		if k < 0 {
			k = len(specs)
			specs = append(specs, p.spec)
		}
		index[j] = k
	}
	return specs, index
}

// maxSharedLimits bounds the limits keyedLimits compares a request's with.
const maxSharedLimits = 16

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
func (s *sender) run(ctx context.Context, calls []scriptCall) {
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
			res = s.client.Eval(ctx, batchLua, keys, argv...)
		} else {
			res = s.client.EvalSha(ctx, batchSHA, keys, argv...)
		}
		call.cmd.SetVal(res.Val())
		call.cmd.SetErr(res.Err())
	}
}

// answer sets the line (its record of the reply, see splitReply) or err of
// each request of call.
func answer(call scriptCall) {
	reply, err := call.cmd.Result()
	if err == nil {
		if text, ok := reply.(string); ok {
			err = splitReply(text, call.batch)
		} else {
			err = fmt.Errorf("unexpected reply from Redis script: %.200q", fmt.Sprint(reply))
		}
	}
	if err != nil {
		for _, p := range call.batch {
			p.line, p.err = "", err
		}
	}
}
