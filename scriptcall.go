package ratelimit

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strings"

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

// batchArgs is how many arguments of the batch script each request of one
// check takes: its number of checks, then the number of its limit and its
// cost; limitArgs is how many the limits take before the requests: their
// number, then the one limit's kind, limit and param.
const (
	batchArgs = 3
	limitArgs = 4
)

// scriptCall is one call of the batch script: the requests it decides, and
// its command.
type scriptCall struct {
	batch []*pending
	cmd   *redis.Cmd
}

// sendBatch decides batch with as few script calls as its client's route
// allows, sent together, and sets each call's res and err: its decision,
// the error that refused its key, or its script call's error.
func (r *redisLimiter) sendBatch(ctx context.Context, batch []*pending) {
	calls := r.split(batch)
	for i := range calls {
		calls[i].cmd = r.command(ctx, calls[i].batch, "evalsha", batchSHA)
	}
	r.run(ctx, calls)
	// A server that does not know the script (after SCRIPT FLUSH, a restart
	// or a failover) refused those calls unrun: send them again whole.
	var again []scriptCall
	for i := range calls {
		if err := calls[i].cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			calls[i].cmd = r.command(ctx, calls[i].batch, "eval", batchLua)
			again = append(again, calls[i])
		}
	}
	if again != nil {
		r.run(ctx, again)
	}
	for _, c := range calls {
		r.answer(c)
	}
}

// split returns the script calls that decide batch: one for a single
// server; for a cluster, one per hash slot; for a ring, one per hash tag.
// Each call keeps the order of its requests.
func (r *redisLimiter) split(batch []*pending) []scriptCall {
	route := routeOf(r.client)
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
func (r *redisLimiter) command(ctx context.Context, batch []*pending, verb, script string) *redis.Cmd {
	args := make([]any, 3+len(batch)+1+limitArgs+batchArgs*len(batch))
	args[0], args[1], args[2] = verb, script, len(batch)
	keys := args[3 : 3+len(batch)]
	argv := args[3+len(batch):]
	var once *onceArg
	if sendsOnce(r.client) {
		once = newOnceArg(len(batch))
		argv[0] = once
	} else {
		argv[0] = len(batch)
	}
	argv[1], argv[2], argv[3], argv[4] = 1, r.algo, r.args[0], r.args[1]
	for i, p := range batch {
		keys[i] = p.key
		a := argv[1+limitArgs+batchArgs*i : 1+limitArgs+batchArgs*(i+1)]
		a[0], a[1], a[2] = 1, 1, p.n
	}
	cmd := redis.NewCmd(ctx, args...)
	if once != nil {
		once.cmd = cmd
	}
	return cmd
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
func (r *redisLimiter) run(ctx context.Context, calls []scriptCall) {
	if len(calls) > 1 {
		if c, ok := r.client.(pipeliner); ok {
			pipe := c.Pipeline()
			for _, call := range calls {
				_ = pipe.Process(ctx, call.cmd)
			}
			_, _ = pipe.Exec(ctx) // every command holds its own error
			return
		}
	}
	for _, call := range calls {
		if c, ok := r.client.(processor); ok {
			_ = c.Process(ctx, call.cmd)
			continue
		}
		// A Scripter of another kind: through its own EVALSHA or EVAL. The
		// onceArg allows no second write, as go-redis never sets an error on
		// call.cmd meanwhile.
		keys := make([]string, len(call.batch))
		for i, p := range call.batch {
			keys[i] = p.key
		}
		args := call.cmd.Args()
		argv := args[3+len(keys):]
		var res *redis.Cmd
		if args[0] == "eval" {
			res = r.client.Eval(ctx, batchLua, keys, argv...)
		} else {
			res = r.client.EvalSha(ctx, batchSHA, keys, argv...)
		}
		call.cmd.SetVal(res.Val())
		call.cmd.SetErr(res.Err())
	}
}

// answer sets the res and err of each request of call from its reply: one
// line per request.
func (r *redisLimiter) answer(call scriptCall) {
	reply, err := call.cmd.Result()
	text, ok := reply.(string)
	if err == nil && (!ok || strings.Count(text, "\n") != len(call.batch)-1) {
		// One line per request, no more, no fewer.
		err = fmt.Errorf("unexpected reply from Redis script: %.200q", fmt.Sprint(reply))
	}
	for _, p := range call.batch {
		if err != nil {
			p.res, p.err = Result{Limit: r.limit}, fmt.Errorf("ratelimit: %s %q: %w", r.name, p.key, err)
			continue
		}
		var line string
		line, text, _ = strings.Cut(text, "\n")
		p.res, p.err = r.decision(p.key, line)
	}
}
