package redisbatch

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// command returns the command that runs the batch script (by "evalsha" and
// its SHA, or "eval" and its source) on batch, in the compact form when
// batch allows it and in the general form otherwise (see callformat.go).
// Its script argument R is an onceArg, so that go-redis sends it at most
// once, where the client allows (sendsOnce). now is the time the
// batch is decided on, in µs of Unix time, sent as the first script
// argument, before R, to the script of the caller's clock; -1 for the
// script that reads the server's TIME.
func (s *Sender) command(ctx context.Context, batch []*Request, verb, script string, now int64) *redis.Cmd {
	if s.compact(batch) {
		return s.encodeCompact(ctx, batch, verb, script, now)
	}
	return s.encodeGeneral(ctx, batch, verb, script, now)
}

// compact reports whether batch can go in the compact form: Allows of one
// check each, on the sender's one limit; or, for a limit of kind
// Concurrency, Allows, Releases and Extends.
func (s *Sender) compact(batch []*Request) bool {
	if s.limits == nil || s.checks != 1 {
		return false
	}
	leases := s.kinds[0] == Concurrency
	for _, p := range batch {
		if p.Op != Allow && !(leases && (p.Op == Release || p.Op == Extend)) {
			return false
		}
	}
	return true
}

// encodeCompact returns the command of batch in the compact form: -R, the
// one limit, then each request's cost, or one cost when there are several
// and all are the same.
func (s *Sender) encodeCompact(ctx context.Context, batch []*Request, verb, script string, now int64) *redis.Cmd {
	if s.kinds[0] == Concurrency {
		return s.encodeLeases(ctx, batch, verb, script, now)
	}
	same := len(batch) > 1
	for _, p := range batch[1:] {
		same = same && p.cost(0) == batch[0].cost(0)
	}
	costs := len(batch)
	if same {
		costs = 1
	}
	args := make([]any, 3, 3+len(batch)+1+len(s.limits)+costs+s.nowArgs)
	args[0], args[1], args[2] = verb, script, len(batch)
	for _, p := range batch {
		args = append(args, p.Key)
	}
	args, once := s.appendCount(args, -len(batch), now)
	args = append(args, s.limits...)
	if same {
		args = append(args, batch[0].cost(0))
	} else {
		for _, p := range batch {
			args = append(args, p.cost(0))
		}
	}
	return s.finish(ctx, args, once)
}

// encodeLeases returns the command of batch in the compact form of a limit
// of kind Concurrency: -R, the one limit, then two arguments per request,
// an Allow's cost and lease, or "R" or "E" and the lease of a Release or
// an Extend.
func (s *Sender) encodeLeases(ctx context.Context, batch []*Request, verb, script string, now int64) *redis.Cmd {
	args := make([]any, 3, 3+len(batch)+1+len(s.limits)+2*len(batch)+s.nowArgs)
	args[0], args[1], args[2] = verb, script, len(batch)
	for _, p := range batch {
		args = append(args, p.Key)
	}
	args, once := s.appendCount(args, -len(batch), now)
	args = append(args, s.limits...)
	for _, p := range batch {
		switch p.Op {
		case Release:
			args = append(args, "R", p.Lease)
		case Extend:
			args = append(args, "E", p.Lease)
		default:
			args = append(args, p.N, p.Lease)
		}
	}
	return s.finish(ctx, args, once)
}

// encodeGeneral returns the command of batch in the general form: R, the
// limits (the sender's, or the distinct ones its requests carry), then
// each request as an Allow (a check of kind Concurrency with its lease), a
// Settle ('S', each check with its most debt), a Reset ('X'), a Release
// ('R') or an Extend ('E'), every check naming its limit by number. A
// Release or Extend has one check: it goes through a sender of one check
// (a concurrency limiter's own).
func (s *Sender) encodeGeneral(ctx context.Context, batch []*Request, verb, script string, now int64) *redis.Cmd {
	c := s.checks
	nkeys, nargs := 0, 1+len(s.limits) // R, then S and the limits
	if s.limits == nil {
		nargs = 2 + 3*c*len(batch) // at most one limit per check
	}
	for _, p := range batch {
		nkeys += c
		switch p.Op {
		case Allow:
			nargs += 1 + 3*c // a lease for each check, at most
		case Reset:
			nargs += 2 + c
		case Settle:
			nargs += 4 + 3*c
			if p.Settlement.Token != "" {
				nkeys++
			}
		case Release, Extend:
			nkeys += 1 - c
			nargs += 3
		}
	}
	args := make([]any, 3, 3+nkeys+nargs+s.nowArgs)
	args[0], args[1], args[2] = verb, script, nkeys
	for _, p := range batch {
		args = append(args, p.Key)
		for _, k := range p.More {
			args = append(args, k)
		}
		if p.Op == Settle && p.Settlement.Token != "" {
			args = append(args, p.Settlement.Token)
		}
	}
	args, once := s.appendCount(args, len(batch), now)
	// Check i (from 1) of a request refers to limit i, or, when each
	// request carries its own, to its own: limits[j*c+i-1] + 1.
	var limits []int
	if s.limits == nil {
		var own []*Limit
		own, limits = distinctLimits(batch, c)
		args = append(args, len(own))
		for _, l := range own {
			args = append(args, l.args[:]...)
		}
	} else {
		args = append(args, s.limits...)
	}
	// ref returns the number of the limit of check i (from 1) of request j.
	ref := func(j, i int) int {
		if limits != nil {
			return limits[j*c+i-1] + 1
		}
		return i
	}
	for j, p := range batch {
		switch p.Op {
		case Allow:
			args = append(args, c)
			for i := 1; i <= c; i++ {
				args = append(args, ref(j, i), p.cost(i-1))
				if s.kind(p, i-1) == Concurrency {
					args = append(args, p.Lease)
				}
			}
		case Release:
			args = append(args, "R", ref(j, 1), p.Lease)
		case Extend:
			args = append(args, "E", ref(j, 1), p.Lease)
		case Reset:
			args = append(args, "X", c)
			for i := 1; i <= c; i++ {
				args = append(args, ref(j, i))
			}
		case Settle:
			ttl := 0
			if p.Settlement.Token != "" {
				ttl = s.tokenTTL
			}
			args = append(args, "S", c, p.Settlement.Age, ttl)
			for i := 1; i <= c; i++ {
				args = append(args, ref(j, i), p.cost(i-1), p.Settlement.maxDebt(i-1))
			}
		}
	}
	return s.finish(ctx, args, once)
}

// kind returns the kind of p's check i.
func (s *Sender) kind(p *Request, i int) Kind {
	if s.kinds != nil {
		return s.kinds[i]
	}
	return p.limit(i).Kind
}

// appendCount appends the call's script argument R (or -R), as an onceArg
// where the client allows, and returns it then; before it, now, the time
// of the call in µs, unless it is -1 (the server's TIME).
func (s *Sender) appendCount(args []any, r int, now int64) ([]any, *onceArg) {
	if now >= 0 {
		args = append(args, now)
	}
	if !s.once {
		return append(args, r), nil
	}
	once := newOnceArg(r)
	return append(args, once), once
}

// finish returns the command of args, which once, if any, guards.
func (s *Sender) finish(ctx context.Context, args []any, once *onceArg) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	if once != nil {
		once.cmd = cmd
	}
	return cmd
}

// distinctLimits returns the distinct limits of a batch of requests of c
// checks each that carry their own (Request.Limit or Request.Limits), and
// the index among them of each check's, check i of request j at j·c+i: a
// batch of one plan sends its limit once. It compares with the first
// maxSharedLimits distinct limits only, so that a batch of many policies
// costs no more than one limit per check.
func distinctLimits(batch []*Request, c int) ([]*Limit, []int) {
	own := make([]*Limit, 0, 4)
	index := make([]int, len(batch)*c)
	for j, p := range batch {
		for i := range c {
			l := p.limit(i)
			k := -1
			for m, o := range own[:min(len(own), maxSharedLimits)] {
				if o.same(l) {
					k = m
					break
				}
			}
			if k < 0 {
				k = len(own)
				own = append(own, l)
			}
			index[j*c+i] = k
		}
	}
	return own, index
}

// maxSharedLimits bounds the limits distinctLimits compares a request's
// with.
const maxSharedLimits = 16
