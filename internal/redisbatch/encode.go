package redisbatch

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

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
	for _, p := range batch {
		p.formKey()
	}
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
	leases := s.leased[0]
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
	if s.leased[0] {
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
				if s.takesLease(p, i-1) {
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

// takesLease reports whether p's check i takes p's Lease: whether its
// limit's kind holds leases (LuaKind.Leases).
func (s *Sender) takesLease(p *Request, i int) bool {
	if s.leased != nil {
		return s.leased[i]
	}
	return p.limit(i).leased
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

// newOnceArg returns the onceArg of a call of requests requests (R, or
// -R in the compact form).
func newOnceArg(requests int) *onceArg {
	a := &onceArg{}
	a.text = strconv.AppendInt(a.buf[:0], int64(requests), 10)
	return a
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

// Op is what a Request asks of the batch script.
type Op uint8

const (
	// Allow decides the request's costs, all or nothing.
	Allow Op = iota
	// Settle adds each check's cost (cost minus taken: > 0 takes more,
	// < 0 gives back) to its key, on every check or on none.
	Settle
	// Reset empties every check's key, or none.
	Reset
	// Release drops the lease Request.Lease from the key of a request of
	// one check of kind Concurrency. Its record's Allowed is 1 when the
	// lease held units until then, 0 when it had expired or was not there.
	Release
	// Extend renews the lease Request.Lease of the key of a request of one
	// check of kind Concurrency for its limit's TTL from now. Its record's
	// Allowed is 1 when it did, 0 when the lease held nothing any more
	// (which is then dropped).
	Extend
)

// Request is one request on its way to the batch script, through a
// coalescer or not: an Allow, a Settle or a Reset, of one check per key,
// or a Release or Extend of one lease, of one check.
// Its caller fills the fields above Record, and Op, hands it to Sender.Send
// once and then reads Record or Err; a Request is never reused. (Op sits
// beside Fault and taken, so that the three bytes share one word.)
type Request struct {
	Ctx context.Context
	// Key is the Redis key of its first check. Its caller may leave it
	// empty and give Prefix, Seg and Name instead, of which the key is
	// formed (see StoredKey) and set when the request is encoded; its
	// caller may read it once Send has returned true.
	Key string
	// Prefix, Seg and Name are what Key is formed of when it is empty:
	// the limiter's key prefix, the seg of the call's policy, and the
	// caller's key.
	Prefix, Seg, Name string
	More              []string // the Redis keys of its other checks, for a Composite
	// N is the cost of every check, unless Costs gives one per check: an
	// Allow's cost, or a Settle's cost minus taken.
	N     int
	Costs []int
	// Limit is the request's own limit, when its Sender was made without
	// limits (Config.Limits) and it has one check.
	Limit *Limit
	// Limits are the limits of its checks, one per check in order, when
	// its Sender was made without limits and it has several checks (a
	// Composite whose parts choose their policy per key).
	Limits []*Limit
	// Settlement is a Settle's age and token; nil for an Allow or a Reset.
	Settlement *Settlement
	// Lease names a lease, the field of its key's HASH it is kept in: the
	// one an Allow's checks of kind Concurrency take when their cost is
	// above 0 (every such check of the request, each on its own key), or
	// the one a Release or Extend is of. It must be unique among every
	// lease the key may ever hold, and never "u", "e" or "x"; "" for an
	// Allow that takes none (a peek, or no check of kind Concurrency).
	Lease string

	Record Record // its record of the script's reply, when Err is nil
	Err    error  // its script call's error
	// Verdict is the verdict of its one check, decoded and checked once
	// when the reply is split (see splitReply), when Err is nil and Fault
	// is Believed; zero for a request of several checks.
	Verdict Verdict

	done  chan struct{} // receives once: the answer is there, or lead is set
	lead  []*Request    // a batch this request must send; set under the coalescer's lock
	Op    Op            // what it asks; its zero value is Allow
	Fault Fault         // what is wrong with Record, for a request of one check
	taken bool          // in a batch; set under the coalescer's lock
}

// Settlement is what a Settle carries besides its costs.
type Settlement struct {
	// Age is the µs since the units were taken, rounded up; -1 when not
	// known.
	Age int64
	// Token is the token key (see Sender.TokenKey): the Settle is applied
	// only when that key is not there, and creates it. "" without.
	Token string
	// MaxDebt is the most debt, in whole units (0 to 2^52), the Settle may
	// leave on the key of every check, unless MaxDebts gives one per
	// check: a key is taken no further below empty (a window counted no
	// further past its limit), and one further already stays as it is.
	MaxDebt  int64
	MaxDebts []int64
}

// maxDebt returns the most debt of check i.
func (s *Settlement) maxDebt(i int) int64 {
	if s.MaxDebts != nil {
		return s.MaxDebts[i]
	}
	return s.MaxDebt
}

// hashTag returns the part of key that Redis Cluster (and go-redis's Ring)
// hashes: the text between the first "{" and the first "}" after it, when
// that text is not empty; otherwise the whole key.
func hashTag(key string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			return key[open+1 : open+1+end]
		}
	}
	return key
}

// formKey sets r.Key, when it is empty, to the Redis key of r.Prefix,
// r.Seg and r.Name (see StoredKey).
func (r *Request) formKey() {
	if r.Key == "" {
		r.Key = StoredKey(r.Prefix, r.Seg, r.Name)
	}
}

// checks returns how many checks r has: one per key.
func (r *Request) checks() int { return 1 + len(r.More) }

// limit returns the limit of r's check i, for a request that carries its
// own.
func (r *Request) limit(i int) *Limit {
	if r.Limits != nil {
		return r.Limits[i]
	}
	return r.Limit
}

// cost returns the cost of r's check i.
func (r *Request) cost(i int) int {
	if r.Costs != nil {
		return r.Costs[i]
	}
	return r.N
}

// Kind is the batch script's name of an algorithm.
type Kind string

// The algorithms of the batch script (see callformat.go).
const (
	TokenBucket Kind = "t" // a token bucket: Param is µs per token
	GCRA        Kind = "g" // GCRA: Param is µs per unit
	FixedWindow Kind = "w" // a fixed window: Param is the window in ms
	// TokenBucketWithInterval and GCRAWithInterval keep their interval with each key's
	// state, for a limiter whose policy is chosen per key; a fixed window
	// keeps nothing more, and is FixedWindow then too.
	TokenBucketWithInterval Kind = "T"
	GCRAWithInterval        Kind = "G"
	// Concurrency limits units in flight, each held by a lease: Units is
	// the most in flight, Param a lease's TTL in µs. Its key's state does
	// not depend on the policy, so a limiter whose policy is chosen per
	// key uses it too. An Allow's check of this kind takes Request.Lease.
	Concurrency Kind = "c"
	// SlidingLog is a sliding log: at most Units in any window of Param
	// ms. Its key's state does not depend on the policy, so a limiter
	// whose policy is chosen per key uses it too.
	SlidingLog Kind = "l"
	// CalendarWindow counts in windows aligned to a calendar: Units is the
	// limit, and Bounds are the windows the client's clock sees about now
	// (see NewCalendarLimit); Param is 0.
	CalendarWindow Kind = "k"
	// SlidingCounter is a sliding-window counter: Param is the window in
	// ms. Its keys keep their expiry, so a limiter whose policy is chosen
	// per key uses it too.
	SlidingCounter Kind = "s"
)

// Limit is one limit a request's checks refer to: the algorithm, its limit
// in whole units (a capacity, or a window's limit) and its param. A Limit
// is immutable once made by NewLimit, which makes its script arguments
// once so that sending it allocates nothing.
type Limit struct {
	Kind  Kind
	Units int64
	Param int64
	// Bounds are a CalendarWindow's windows, in µs of Unix time: the
	// previous window's start, the current one's start and end, and the
	// next one's end; zero for every other kind.
	Bounds [4]int64
	args   [3]any // Kind, Units and Param (Bounds, for a CalendarWindow) as script arguments
	leased bool   // its check takes Request.Lease (LuaKind.Leases)
}

// NewLimit returns the Limit of kind, units and param.
func NewLimit(kind Kind, units, param int64) *Limit {
	return &Limit{Kind: kind, Units: units, Param: param, args: [3]any{string(kind), units, param}, leased: holdsLeases(kind)}
}

// NewCalendarLimit returns the Limit of kind CalendarWindow of units and
// bounds (see Limit.Bounds), whose third script argument is the text
// "prev:start:end:next".
func NewCalendarLimit(units int64, bounds [4]int64) *Limit {
	text := fmt.Sprintf("%d:%d:%d:%d", bounds[0], bounds[1], bounds[2], bounds[3])
	return &Limit{Kind: CalendarWindow, Units: units, Bounds: bounds, args: [3]any{string(CalendarWindow), units, text}}
}

// same reports whether l and m are the same limit.
func (l *Limit) same(m *Limit) bool {
	return l == m || l.Kind == m.Kind && l.Units == m.Units && l.Param == m.Param && l.Bounds == m.Bounds
}

// LimitCache holds the Limits of the policies a limiter whose policy is
// chosen per key used last, so that a call of a policy in use allocates
// none. Each policy may sit in either of two slots its hash picks, so that
// two policies that share one slot both stay; a new policy takes an empty
// one of its two, or replaces the first. Its memory is bounded whatever the
// number of policies. Its zero value is not usable; make one with
// NewLimitCache. It is safe for concurrent use.
type LimitCache struct {
	kind     Kind
	bounds   [4]int64 // of every Limit, for a cache of CalendarWindow limits
	calendar bool     // made by NewCalendarLimitCache
	slots    [cacheSlots]atomic.Pointer[Limit]
}

// cacheSlots is how many policies a LimitCache holds at most: enough for
// the plans of a service; per-customer overrides beyond it cost a small
// allocation per call.
const cacheSlots = 1 << cacheBits

// cacheBits is the bits of a policy's hash that pick each of its slots.
const cacheBits = 5

// NewLimitCache returns an empty LimitCache of Limits of kind.
func NewLimitCache(kind Kind) *LimitCache { return &LimitCache{kind: kind} }

// NewCalendarLimitCache returns an empty LimitCache of Limits of kind
// CalendarWindow of bounds, whose param is never read.
func NewCalendarLimitCache(bounds [4]int64) *LimitCache {
	return &LimitCache{kind: CalendarWindow, bounds: bounds, calendar: true}
}

// Get returns the Limit of the cache's kind, units and param.
func (c *LimitCache) Get(units, param int64) *Limit {
	// A multiplicative hash, so that policies whose numbers share factors
	// (windows of whole seconds, say) still spread over the slots; its top
	// bits pick the first slot, the next ones the second.
	h := (uint64(units)*0x9E3779B97F4A7C15 ^ uint64(param)) * 0xBF58476D1CE4E5B9
	first := &c.slots[h>>(64-cacheBits)]
	second := &c.slots[(h>>(64-2*cacheBits))%cacheSlots]
	a := first.Load()
	if a != nil && a.Units == units && a.Param == param {
		return a
	}
	b := second.Load()
	if b != nil && b.Units == units && b.Param == param {
		return b
	}
	var l *Limit
	if c.calendar {
		l = NewCalendarLimit(units, c.bounds)
		l.Param = param
	} else {
		l = NewLimit(c.kind, units, param)
	}
	if a != nil && b == nil {
		second.Store(l)
	} else {
		first.Store(l)
	}
	return l
}

// StoredKey returns the Redis key of a limiter's key: prefix, seg, then
// key in a hash tag, so that every Redis key made of one key is in the
// hash slot key alone is in (prefix and seg hold no braces), whatever the
// limiter, and a Composite's parts on one key can be decided by one script
// call on a cluster. The name is one of three forms, which no two keys
// share:
//   - "{" + key + "}", for a key that is not empty and has no '}' (and so
//     no hash tag of its own): most keys;
//   - key as it is, for a key with a hash tag of its own ("{acme}:alice")
//     that is not of the first form or the third;
//   - "{" + tag + "}#" + key, for any other key: one whose hash tag opens
//     it and either ends it or is followed by '#' ("{acme}", "{a}#b"), tag
//     being its hash tag, and one with no hash tag that braces cannot hold
//     (empty, or with a '}'), tag being then three letters or digits in
//     its slot (see slotTags).
//
// A name of the first form has its first '}' last; one of the third, its
// first '}' followed by '#'; one of the second, neither, when it starts
// with '{': so the form, and key, can be read back from any name.
func StoredKey(prefix, seg, key string) string {
	if key != "" && strings.IndexByte(key, '}') < 0 {
		return prefix + seg + "{" + key + "}"
	}
	if hashTag(key) != key {
		// key has a hash tag: key[j] is the first '}' after its first '{'.
		if key[0] != '{' {
			return prefix + seg + key
		}
		j := strings.IndexByte(key, '}')
		if j < len(key)-1 && key[j+1] != '#' {
			return prefix + seg + key
		}
		return prefix + seg + key[:j+1] + "#" + key
	}
	tag := slotTags[HashSlot(key)]
	return prefix + seg + "{" + string(tag[:]) + "}#" + key
}

// KeyOf returns the key whose form in a stored name (what StoredKey
// writes after prefix and seg) is form, as StoredKey's forms say it can be
// read back.
func KeyOf(form string) string {
	if form == "" || form[0] != '{' {
		return form
	}
	j := strings.IndexByte(form, '}')
	switch {
	case j < 0:
		return form
	case j == len(form)-1:
		return form[1:j]
	case form[j+1] == '#':
		return form[j+2:]
	}
	return form
}

// FormAfter returns the form of a stored name rest, what StoredKey wrote
// after prefix, whose seg holds colons colons: rest after its first
// colons colons (a seg ends with one and holds no other but its fields').
func FormAfter(rest string, colons int) string {
	for range colons {
		i := strings.IndexByte(rest, ':')
		if i < 0 {
			return rest
		}
		rest = rest[i+1:]
	}
	return rest
}

// tokenPrefix starts the name of every Redis key that remembers a token,
// so that no limiter key (which starts with the limiter's prefix) can be
// one.
const tokenPrefix = "ratelimit:settled:"

// tokenKey returns the name of the Redis key that remembers token for the
// Redis key key: tokenPrefix, the length of key in decimal, ":", key, ":"
// and token, so that no two (key, token) pairs share a name (the length
// says where key ends). It is in key's hash slot: when key has a hash
// tag, that is the name's first (nothing before key has a brace);
// otherwise "{" + tag + "}", tag being three letters or digits in key's
// slot (see slotTags), comes first, so that braces in key or token
// cannot make another. The two forms start apart, with a digit and with
// "{".
func tokenKey(key, token string) string {
	n := strconv.Itoa(len(key))
	if hashTag(key) != key {
		return tokenPrefix + n + ":" + key + ":" + token
	}
	tag := slotTags[HashSlot(key)]
	return tokenPrefix + "{" + string(tag[:]) + "}" + n + ":" + key + ":" + token
}
