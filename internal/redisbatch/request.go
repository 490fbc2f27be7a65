package redisbatch

import "context"

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
// Its caller fills the fields above Record, and Op, hands it to Sender.Do
// once and then reads Record or Err; a Request is never reused. (Op sits
// beside taken, so that the two bytes share one word.)
type Request struct {
	Ctx  context.Context
	Key  string   // the Redis key of its first check
	More []string // the Redis keys of its other checks, for a Composite
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

	done  chan struct{} // receives once: the answer is there, or lead is set
	lead  []*Request    // a batch this request must send; set under the coalescer's lock
	Op    Op            // what it asks; its zero value is Allow
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
