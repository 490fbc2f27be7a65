package ratelimit

import (
	"context"
	"fmt"
	"math/bits"
	"time"
)

var (
	_ Acquirer = (*Composite)(nil)
	_ Acquirer = (*Guard)(nil)
	_ Acquirer = (*DenyCache)(nil)
)

// Part is one limit of a Composite: a limiter, the name its policy goes by,
// and the key it applies to.
type Part struct {
	// Name names the part's policy, in HTTP headers and errors: 1 to 64
	// printable ASCII characters other than '"' and '\', unique within the
	// Composite.
	Name string
	// Limiter decides the part. All the parts of a Composite are
	// in-process limiters of this package (TokenBucket, GCRA, FixedWindow,
	// SlidingLog, SlidingCounter, CalendarWindow, and at most one
	// Concurrency), or all are Redis limiters of this package on the same
	// client (RedisTokenBucket, RedisGCRA, RedisFixedWindow,
	// RedisSlidingLog, RedisSlidingCounter, RedisCalendarWindow, and at
	// most one RedisConcurrency).
	Limiter Limiter
	// Key derives the part's key from the key of the call, for a limit on
	// another subject (the tenant a user belongs to, say); nil means the
	// call's key. On Redis Cluster every part's Redis key must be in one
	// hash slot: parts on one key are (each limiter puts the key in a hash
	// tag, see the package doc, Redis keys); keys Key derives need one
	// hash tag, as in "{tenant7}:user42" and "{tenant7}". Key must be safe
	// for concurrent use.
	Key func(key string) string
	// PerCall makes the part count calls rather than units, for a limit
	// on requests beside one on their cost (requests and tokens per
	// minute): each allowed call takes 1 from it whatever n is (a peek,
	// n == 0, takes nothing), and n is not checked against its limit.
	// Settle gives the call back when cost is 0 and taken is not (a
	// Refund), takes it when taken is 0 and cost is not, and otherwise
	// leaves the part alone.
	PerCall bool
}

// Composite is a Limiter of several limits at once, all or nothing: Allow
// allows n only when every part allows it, and then takes n from every
// part; a denial takes nothing from any part. In process the parts are
// decided under all their locks at once; on Redis, one script call decides
// every part atomically, coalesced with other calls as a single limiter's
// are.
//
// The Result of Allow is that of the part that bound the decision: for a
// denial, the denying part with the longest RetryAfter; for an allowed
// call, the part with the smallest share of its limit left (the first of
// those). Its
// Limit and Remaining are that part's, RetryAfter is the longest of the
// parts' (after it every part would allow the same call), and ResetAfter
// the longest (after it every part is full). Decide says which part
// bound, and gives every part's Result. A cost above any part's
// limit is an error wrapping ErrCostExceedsLimit, with that part's Limit.
//
// A part may be built WithPolicyFunc: it then decides each call by its
// key's policy (the PolicyFunc called with the part's key, after
// Part.Key), resolved on every call before any part is touched, and its
// key keeps what it has used across a change, as the limiter alone does.
// The parts' policies of the call are those the Result and Decision report
// (Decision.Policies names each part's key's, and the limits above are
// theirs), and Policies(ctx, key) returns them. A part's PolicyFunc error,
// or a policy its limiter refuses, fails the whole call with an error
// wrapping ErrPolicy or ErrInvalidConfig that names the part and its key,
// and changes no part. On Redis each request then carries each part's
// key's limit, still one script request for every part.
//
// Units in flight: one part may limit units in flight, for "5 in flight and
// 100 a minute": a Concurrency among in-process parts, or a
// RedisConcurrency among Redis parts. Acquire is then all or nothing as
// Allow is, under all the parts' locks in process, and on Redis in the one
// script request that decides every part: the rate parts' units are taken
// only when the slot is, and the slot only when every rate part allows the
// call; a denial takes nothing anywhere. It returns the concurrency part's
// Lease, whose key is the part's key (after Part.Key) and which that part
// releases and extends: releasing it (Lease.Release) gives back the units in flight alone, as the
// rate parts' units stay taken, counting work started. Allow and Decide
// take the concurrency part's units until its TTL has passed, as
// Concurrency.Allow and RedisConcurrency.Allow do: nobody can release them.
// On Redis, a call that fails with ErrBackend may have been decided all the
// same (the server may have run the request whose reply was lost), as a
// RedisConcurrency's Acquire may: its units in flight then come back at the
// TTL. Refund and Settle apply to the rate parts only, since units in
// flight come back by their leases, and report the concurrency part's state
// as it is; Reset drops the concurrency part's leases of its key too, as
// that part's own Reset does. Policies and Decisions list the concurrency
// part's policy with InFlight set, and a DenyCache never remembers such a
// Composite's denials. A concurrency part built WithPolicyFunc (plans of 2,
// 5 or 20 in flight) decides each call by its key's policy, as the other
// parts do. A PerCall concurrency part holds 1 unit per call whatever n is,
// and its Lease then holds 1.
//
// A Composite is safe for concurrent use. Create one with NewComposite.
type Composite struct {
	parts    []Part
	policies []NamedPolicy
	// windowsNow holds, for each part that is a calendar window, the
	// length of its window open now (see calendarPartsNow); nil when no
	// part is.
	windowsNow []func(Policy) time.Duration
	rules      []rule      // how each part's state moves
	tells      bool        // a part's limiter tells its next unit where its Result does not (see partsOut)
	tight      int         // the part with the smallest limit among those that count units
	perCall    bool        // every part counts calls
	shared     bool        // two parts have the same Limiter
	segmented  bool        // a part's keys name their key's policy (see tableKeys, redisParts.redisKey)
	local      *localParts // the parts, when in process
	remote     *redisParts // the parts, when on Redis
	// keyed holds what a Composite needs when a part was built
	// WithPolicyFunc; nil when none was.
	keyed *keyedParts
	// settleTight is the part whose bound on a Settle's taken is the
	// smallest among those that count units, and settleLimit that bound:
	// its limit, or 2^52 for a part built WithPolicyFunc (or when every
	// part counts calls).
	settleTight, settleLimit int
	// observers are the parts' observers when any part was built
	// WithHooks (nil entries for the others); nil when none was.
	observers []*observer
	// adjusters are those of observers that hear of adjustments (nil
	// entries for the others); nil when none does.
	adjusters []*observer
	// inFlight is the index of the part that limits units in flight (a
	// Concurrency or RedisConcurrency), -1 without one; holder is that
	// part's limiter, which grants the Composite's leases.
	inFlight int
	holder   leaseHolder
	// partKeyRules are the parts' limiters' key rules, in order, which
	// bound each part's key; keyRules are the Composite's own: keys shown
	// only when every part shows them.
	partKeyRules []keyRules
	keyRules     keyRules
}

// maxPolicyName bounds a Part's Name.
const maxPolicyName = 64

// NewComposite returns a Composite of parts. It returns an error wrapping
// ErrInvalidConfig for no parts, a nil Limiter, a Name that is empty,
// repeated, longer than 64 characters or not printable ASCII (or holds '"'
// or '\'), more than one concurrency limiter (Concurrency or
// RedisConcurrency), or parts that are not all in-process limiters of this
// package or all Redis limiters of this package on one client (a
// Concurrency among Redis limiters, or a RedisConcurrency among in-process
// ones, included). Redis parts must also decide on one clock: all on the
// server's TIME, or all WithCallerClock of the same Clock; parts that mix
// clocks fail with ErrInvalidConfig naming them. Parts that could never
// decide, since both are on the call's key (no Key) and keep every key's
// state in one place, fail with ErrInvalidConfig naming them: one limiter
// twice, or two Redis limiters whose Redis keys always coincide (of one
// kind and configuration, or given one WithKeyPrefix for states that mean
// the same, see WithKeyPrefix). Parts whose keys may coincide only under
// some keys' policies (two sliding counters or calendar windows built
// WithPolicyFunc) are accepted, and a call whose parts' Redis keys are
// one fails with ErrKeysApart.
func NewComposite(parts ...Part) (*Composite, error) {
	const kind = "NewComposite"
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: %s: no parts", ErrInvalidConfig, kind)
	}
	c := &Composite{parts: append([]Part(nil), parts...)}
	seen := make(map[string]bool, len(parts))
	limiters := make([]Limiter, len(parts))
	for i, p := range parts {
		if isNil(p.Limiter) {
			return nil, fmt.Errorf("%w: %s: part %d (%q) has a nil Limiter", ErrInvalidConfig, kind, i, p.Name)
		}
		if err := checkPartName(p.Name); err != nil {
			return nil, fmt.Errorf("%w: %s: part %d: %v", ErrInvalidConfig, kind, i, err)
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("%w: %s: two parts are named %q", ErrInvalidConfig, kind, p.Name)
		}
		seen[p.Name] = true
		policy, rl := policyOf(p.Limiter), ruleOf(p.Limiter)
		c.policies = append(c.policies, NamedPolicy{Name: p.Name, Policy: policy, PerCall: p.PerCall, InFlight: rl.inFlight})
		c.rules = append(c.rules, rl)
		c.windowsNow = windowNowOf(c.windowsNow, i, len(parts), p.Limiter)
		limiters[i] = p.Limiter
		rules := keyRulesOf(p.Limiter)
		c.partKeyRules = append(c.partKeyRules, rules)
		if i == 0 {
			c.keyRules = rules
		} else {
			c.keyRules = c.keyRules.both(rules)
		}
	}
	if err := c.findInFlight(kind); err != nil {
		return nil, err
	}
	c.tight, c.perCall = tightest(c.policies)
	for _, rl := range c.rules {
		c.tells = c.tells || rl.gradual || rl.calendar
	}
	var localErr, remoteErr error
	if c.local, localErr = newLocalParts(limiters); localErr == nil {
		if err := c.checkApart(kind, limiters, nil); err != nil {
			return nil, err
		}
		c.shared = sharesALimiter(limiters)
		if c.shared {
			stopLogRecycling(limiters)
		}
		c.observers = observers(len(parts), c.local.observer)
		c.keyed = newKeyedParts(len(parts), c.local.policyFunc, c.local.own, c.local.unit)
		c.segmented = c.local.segmented()
		c.settleTight, c.settleLimit = c.settleBound()
		c.adjusters = adjusters(c.observers)
		return c, nil
	}
	if c.remote, remoteErr = newRedisParts(limiters); remoteErr == nil {
		if err := c.checkApart(kind, limiters, c.remote.fixedPrefix); err != nil {
			return nil, err
		}
		c.shared = sharesALimiter(limiters)
		c.observers = observers(len(parts), c.remote.observer)
		c.keyed = newKeyedParts(len(parts), c.remote.policyFunc, c.remote.own, c.remote.unit)
		c.segmented = c.remote.segmented()
		c.settleTight, c.settleLimit = c.settleBound()
		c.adjusters = adjusters(c.observers)
		return c, nil
	}
	return nil, fmt.Errorf("%w: %s: the parts must be all in-process limiters of this package (%v) or all Redis limiters of this package on one client (%v)", ErrInvalidConfig, kind, localErr, remoteErr)
}

// checkApart returns an error wrapping ErrInvalidConfig, naming the two
// parts, when two parts with no Key of their own (both on the call's key)
// always keep their state in one place, so that every call would fail:
// they are one limiter, or, when prefix is given (Redis parts), prefix
// gives each the prefix every one of its Redis keys has before the key's
// (false for a part whose keys name their key's policy), and the two
// prefixes are the same.
func (c *Composite) checkApart(kind string, limiters []Limiter, prefix func(i int) (string, bool)) error {
	for i, p := range c.parts {
		for j, q := range c.parts[:i] {
			if p.Key != nil || q.Key != nil {
				continue
			}
			if limiters[i] == limiters[j] {
				return fmt.Errorf("%w: %s: parts %q and %q are the same limiter on the same key, so every call would fail; give one of them a Key", ErrInvalidConfig, kind, q.Name, p.Name)
			}
			if prefix == nil {
				continue
			}
			a, fixedA := prefix(j)
			b, fixedB := prefix(i)
			if fixedA && fixedB && a == b {
				return fmt.Errorf("%w: %s: parts %q and %q keep every key at the same Redis key (%q and the key), so every call would fail; give them different policies or prefixes (WithKeyPrefix), or one of them a Key", ErrInvalidConfig, kind, q.Name, p.Name, a)
			}
		}
	}
	return nil
}

// observers returns the observers of n parts, part i's being of(i), or nil
// when no part's listens.
func observers(n int, of func(i int) *observer) []*observer {
	var obs []*observer
	for i := range n {
		if o := of(i); o.hooks != nil {
			if obs == nil {
				obs = make([]*observer, n)
			}
			obs[i] = o
		}
	}
	return obs
}

// sharesALimiter reports whether two of limiters are the same one. They are
// pointers to this package's limiters, which compare without panicking.
func sharesALimiter(limiters []Limiter) bool {
	for i := range limiters {
		for j := range i {
			if limiters[i] == limiters[j] {
				return true
			}
		}
	}
	return false
}

// checkPartName returns an error for a name a policy cannot go by.
func checkPartName(name string) error {
	if name == "" || len(name) > maxPolicyName {
		return fmt.Errorf("a Name must be 1 to %d characters, got %q", maxPolicyName, name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return fmt.Errorf("the Name %q has a character other than printable ASCII without '\"' and '\\'", name)
		}
	}
	return nil
}

// partsBuffer is where a call keeps its parts' keys, costs and Results
// without allocating, for up to four parts.
type partsBuffer struct {
	keys     [4]string
	costs    [4]int
	results  [4]Result
	policies [4]NamedPolicy
	rates    [4]partRate
	nexts    [4]time.Duration
}

// slices returns keys, costs and results of length n, in b when they fit.
func (b *partsBuffer) slices(n int) ([]string, []int, []Result) {
	if n <= len(b.keys) {
		return b.keys[:n], b.costs[:n], b.results[:n]
	}
	return make([]string, n), make([]int, n), make([]Result, n)
}

// once is what a PerCall part counts of n units: 1 for n > 0, 0 for none.
func once(n int) int { return min(n, 1) }

// Allow takes n from every part's key if every part allows it, and nothing
// otherwise. See Composite for the Result (and what a part of units in
// flight takes); a nil ctx is an error.
func (c *Composite) Allow(ctx context.Context, key string, n int) (Result, error) {
	if c == nil || len(c.parts) == 0 {
		return Result{}, notBuilt("Composite")
	}
	var buf partsBuffer
	call := c.newCall(&buf)
	if c.tells && c.observers != nil {
		// For the hooks' Decisions.
		if n := len(c.parts); n <= len(buf.nexts) {
			call.nexts = buf.nexts[:n:n]
		} else {
			call.nexts = make([]time.Duration, n)
		}
	}
	bound, _, err := c.decide(ctx, key, n, &call)
	if err != nil {
		return call.results[bound], err
	}
	return combine(call.results, bound), nil
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): Policies are the parts', in order, each the part's key's for a
// part built WithPolicyFunc, Policy and PolicyIndex the part that bound the
// decision (see Composite), and Parts each part's own Result.
func (c *Composite) Decide(ctx context.Context, key string, n int) (Decision, error) {
	_, d, err := c.call(ctx, key, n, false)
	return d, err
}

// call is Decide, or Acquire when leased.
func (c *Composite) call(ctx context.Context, key string, n int, leased bool) (Lease, Decision, error) {
	if c == nil || len(c.parts) == 0 {
		return Lease{}, Decision{}, notBuilt("Composite")
	}
	var buf partsBuffer
	call := c.newCall(&buf)
	call.leased = leased
	// The Decision's Parts, and their next units, read from these
	// variables rather than from call, so that the compiler, which tracks
	// call's fields as one, keeps the call's buffers on the stack.
	results, nexts := c.partsOut()
	call.results, call.nexts = results, nexts
	bound, lease, err := c.decide(ctx, key, n, &call)
	policies, rules := c.policies, c.rules
	if c.keyed != nil {
		policies, rules = c.keyed.decided(c.policies, c.rules, call.policies, call.rates)
	}
	policies = c.windowsOpenNow(policies)
	d := Decision{Policy: policies[bound], Policies: policies, PolicyIndex: bound, rules: rules}
	if err != nil {
		d.Result = results[bound]
	} else {
		d.Result, d.Parts, d.partNext = combine(results, bound), results, nexts
	}
	d.Enforced = d.Result
	return lease, d, err
}

// partsOut returns the Parts of a Decision of c and, when a part's
// limiter tells its next unit where its Result does not (a sliding
// window, a calendar window), a slice of their next units beside them
// (see Decision.partNext): both in one allocation for up to four parts,
// so that telling them costs no allocation more.
func (c *Composite) partsOut() ([]Result, []time.Duration) {
	n := len(c.parts)
	switch {
	case !c.tells:
		return make([]Result, n), nil
	case n <= 2:
		b := new(struct {
			results [2]Result
			nexts   [2]time.Duration
		})
		return b.results[:n:n], b.nexts[:n:n]
	case n <= 4:
		b := new(struct {
			results [4]Result
			nexts   [4]time.Duration
		})
		return b.results[:n:n], b.nexts[:n:n]
	}
	return make([]Result, n), make([]time.Duration, n)
}

// Policies returns the parts' policies for key, named, in order (see
// Decider): each part's own, or its key's (the key Part.Key gives) for a
// part built WithPolicyFunc. It fails on a nil or zero-value *Composite,
// and, with the parts' own policies, when a part's key's policy cannot be
// read (an error wrapping ErrPolicy or ErrInvalidConfig that names the
// part and its key) or, for such a part, its key is longer than its
// limiter takes (ErrInvalidKey).
func (c *Composite) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if c == nil || len(c.parts) == 0 {
		return nil, notBuilt("Composite")
	}
	if c.keyed == nil {
		return c.windowsOpenNow(c.policies), nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	var buf partsBuffer
	call := c.newCall(&buf)
	if err := c.keys(key, call.keys); err != nil {
		return c.policies, err
	}
	if _, err := c.resolve(ctx, &call); err != nil {
		return c.policies, err
	}
	policies, _ := c.keyed.decided(c.policies, c.rules, call.policies, call.rates)
	return c.windowsOpenNow(policies), nil
}

// partsCall is one call's view of the parts: each part's key, cost (or
// change, for a Settle), Result, and policy, in slices of the parts'
// length.
type partsCall struct {
	keys     []string
	costs    []int
	results  []Result
	policies []NamedPolicy // c.policies, or the parts' keys' when keyed
	rates    []partRate    // the parts' keys' policies in their engines' numbers; nil unless keyed
	tight    int           // the part with the smallest limit among those that count units
	leased   bool          // the call is an Acquire
	// nexts, when not nil, gets each part's next unit where its limiter
	// tells it (see Decision.partNext), 0 elsewhere.
	nexts []time.Duration
}

// newCall returns the partsCall of a call of c, in buf.
func (c *Composite) newCall(buf *partsBuffer) partsCall {
	n := len(c.parts)
	call := partsCall{policies: c.policies, tight: c.tight}
	call.keys, call.costs, call.results = buf.slices(n)
	if c.keyed != nil {
		if n <= len(buf.policies) {
			call.policies, call.rates = buf.policies[:n], buf.rates[:n]
		} else {
			call.policies, call.rates = make([]NamedPolicy, n), make([]partRate, n)
		}
		copy(call.policies, c.policies)
	}
	return call
}

// decide fills call's keys with the parts' keys, its costs with what each
// takes of n, its policies with the parts' keys' and its results with
// their Results, and returns the index of the part that bound the
// decision (on an error, the index of the Result to answer with) and the
// lease an Acquire granted. c is built. The lease is returned, not kept
// in call: the compiler tracks call's fields as one, and a lease read
// from call and returned would move the call's buffers to the heap.
func (c *Composite) decide(ctx context.Context, key string, n int, call *partsCall) (int, Lease, error) {
	if c.observers == nil {
		return c.decideParts(ctx, key, n, call)
	}
	return c.observed(ctx, key, n, call)
}

// observed is decide for a Composite whose parts have hooks: it reports
// each part's share of the decision to its hooks.
func (c *Composite) observed(ctx context.Context, key string, n int, call *partsCall) (int, Lease, error) {
	start := time.Now()
	bound, granted, err := c.decideParts(ctx, key, n, call)
	latency := time.Since(start)
	for i, o := range c.observers {
		if o != nil {
			// A part that decided nothing (an error before the parts were
			// asked) reports the call's key and cost.
			k, cost := call.keys[i], call.costs[i]
			if k == "" && cost == 0 {
				k, cost = key, n
			}
			var lease Lease
			if i == c.inFlight {
				lease = granted
			}
			d := o.decision(call.results[i], call.policies[i].Policy, nil)
			if call.nexts != nil {
				d = withNext(d, call.nexts[i])
			}
			reportLease(o, k, cost, d, lease, err, latency)
		}
	}
	return bound, granted, err
}

// decideParts is decide without the parts' hooks.
func (c *Composite) decideParts(ctx context.Context, key string, n int, call *partsCall) (int, Lease, error) {
	if err := c.check(ctx, n, call); err != nil {
		c.failed(call)
		return c.tight, Lease{}, err
	}
	if err := c.keys(key, call.keys); err != nil {
		c.failed(call)
		return 0, Lease{}, err
	}
	if c.keyed != nil {
		if i, err := c.resolve(ctx, call); err != nil {
			c.failed(call)
			return i, Lease{}, err
		}
		if err := c.checkLimit(n, call); err != nil {
			c.failed(call)
			return call.tight, Lease{}, err
		}
	}
	for i := range c.parts {
		call.costs[i] = n
		if c.parts[i].PerCall {
			call.costs[i] = once(n)
		}
	}
	if c.local != nil {
		lease := c.local.allow(c.local.tableKeys(call.keys, call.rates), call.costs, call.rates, call.results, call.nexts, call.leased)
		return bound(call.results), lease, nil
	}
	lease, err := c.remote.allow(ctx, call.keys, call.costs, call.rates, call.results, call.nexts, call.leased)
	if err != nil {
		c.failed(call)
		return 0, Lease{}, err
	}
	return bound(call.results), lease, nil
}

// check returns the error of a call that no part can decide: a nil ctx, a
// cost below 0, or, when no part was built WithPolicyFunc, one above the
// smallest limit of the parts that count units (see checkLimit).
func (c *Composite) check(ctx context.Context, n int, call *partsCall) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("ratelimit: Composite: %w", errNilContext)
	case n < 0:
		return checkCost(n, c.policies[c.tight].Limit)
	case c.keyed == nil:
		return c.checkLimit(n, call)
	}
	return nil
}

// checkLimit returns the error of a cost n above the smallest limit of
// the parts that count units, by the call's policies.
func (c *Composite) checkLimit(n int, call *partsCall) error {
	if limit := call.policies[call.tight].Limit; !c.perCall && n > limit {
		return fmt.Errorf("ratelimit: Composite part %q: %w", c.parts[call.tight].Name, checkCost(n, limit))
	}
	return nil
}

// failed sets call's results to those of a call that decided nothing:
// each part's Limit alone, by the call's policies.
func (c *Composite) failed(call *partsCall) {
	for i := range call.results {
		call.results[i] = Result{Limit: call.policies[i].Limit}
	}
	clear(call.nexts)
}

// tightest returns the index of the policy with the smallest limit among
// those that count units (the first of those), and true when every one
// counts calls (the index is then 0).
func tightest(policies []NamedPolicy) (int, bool) {
	t, perCall := 0, true
	for i, p := range policies {
		if !p.PerCall && (perCall || p.Limit < policies[t].Limit) {
			t, perCall = i, false
		}
	}
	return t, perCall
}

// keys fills keys with each part's key for key, and refuses a key longer
// than its part's limiter takes (see WithMaxKeyLength) and two parts on one
// limiter and key, which would count one subject twice.
func (c *Composite) keys(key string, keys []string) error {
	for i, p := range c.parts {
		keys[i] = key
		if p.Key != nil {
			keys[i] = p.Key(key)
		}
		if c.partKeyRules[i].tooLong(keys[i]) {
			return c.partKeyRules[i].refusal(fmt.Sprintf("Composite part %q", p.Name), keys[i])
		}
		if !c.shared {
			continue
		}
		for j := range i {
			if keys[j] == keys[i] && c.parts[j].Limiter == p.Limiter {
				return callerErr(fmt.Errorf("ratelimit: Composite: parts %q and %q are the same limiter on the same key %s", c.parts[j].Name, p.Name, c.keyRules.quote(keys[i])))
			}
		}
	}
	return nil
}

// bound returns the index of the part that bound a decision whose parts
// answered results: for a denial, the denying part with the longest
// RetryAfter; otherwise the part with the smallest share of its limit left.
// Ties go to the first.
func bound(results []Result) int {
	b := 0
	for i := 1; i < len(results); i++ {
		r, br := &results[i], &results[b]
		if r.RetryAfter > br.RetryAfter || r.RetryAfter == br.RetryAfter && lessLeft(r, br) {
			b = i
		}
	}
	return b
}

// lessLeft reports whether a has a smaller share of its limit left than b:
// a.Remaining/a.Limit < b.Remaining/b.Limit, compared exactly.
func lessLeft(a, b *Result) bool {
	if a.Limit == b.Limit {
		return a.Remaining < b.Remaining
	}
	aHi, aLo := bits.Mul64(uint64(max(a.Remaining, 0)), uint64(max(b.Limit, 1)))
	bHi, bLo := bits.Mul64(uint64(max(b.Remaining, 0)), uint64(max(a.Limit, 1)))
	return aHi < bHi || aHi == bHi && aLo < bLo
}

// combine returns a Composite's Result: the bound part's, with the longest
// RetryAfter and ResetAfter of all parts.
func combine(results []Result, b int) Result {
	res := results[b]
	for i := range results {
		res.RetryAfter = max(res.RetryAfter, results[i].RetryAfter)
		res.ResetAfter = max(res.ResetAfter, results[i].ResetAfter)
	}
	return res
}

// Refund gives n back to every part's key (see Adjuster), in one step: in
// process under all the parts' locks, on Redis in one script call. A
// concurrency part is left as it is (see Composite).
func (c *Composite) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return c.adjust(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle settles every part's key (see Adjuster), in one step: in process
// under all the parts' locks, on Redis in one script call, each part by
// its key's policy for a part built WithPolicyFunc. Its Result is combined
// as Allow's. taken may be up to the smallest limit of the parts that
// count units, or 2^52 when those parts are all built WithPolicyFunc. A
// concurrency part is left as it is (see Composite).
func (c *Composite) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return c.adjust(ctx, AdjustSettle, key, taken, cost, opts)
}

// settle is Settle without the hooks, on a built c. It fills call's keys
// with the parts' keys, its costs with what each takes (gives back when
// negative), and its results with their Results.
func (c *Composite) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption, call *partsCall) (Result, error) {
	if ctx == nil {
		return Result{Limit: c.policies[0].Limit}, fmt.Errorf("ratelimit: Composite: %w", errNilContext)
	}
	a, err := adjustOptions("Composite", opts)
	if err != nil {
		return Result{Limit: c.policies[0].Limit}, err
	}
	if err := checkSettle(taken, cost, c.settleLimit); err != nil {
		return Result{Limit: c.policies[c.settleTight].Limit}, fmt.Errorf("ratelimit: Composite part %q: %w", c.parts[c.settleTight].Name, err)
	}
	keys, changes, results := call.keys, call.costs, call.results
	if err := c.keys(key, keys); err != nil {
		return Result{Limit: c.policies[0].Limit}, err
	}
	if c.keyed != nil {
		if i, err := c.resolve(ctx, call); err != nil {
			return Result{Limit: call.policies[i].Limit}, err
		}
	}
	if i, err := c.checkCharge(taken, cost, call.policies); err != nil {
		return Result{Limit: call.policies[i].Limit}, err
	}
	for i, p := range c.parts {
		changes[i] = cost - taken
		if p.PerCall {
			changes[i] = once(cost) - once(taken)
		}
	}
	if c.local != nil {
		c.local.settle(c.local.tableKeys(keys, call.rates), changes, a, call.rates, results)
	} else if err := c.remote.settle(ctx, keys, changes, a, call.rates, results); err != nil {
		return Result{Limit: call.policies[0].Limit}, err
	}
	return combine(results, bound(results)), nil
}

// Reset returns every part's key to full, in one step.
func (c *Composite) Reset(ctx context.Context, key string) error {
	if c == nil || len(c.parts) == 0 {
		return notBuilt("Composite")
	}
	var buf partsBuffer
	keys, _, _ := buf.slices(len(c.parts))
	if c.adjusters == nil {
		return c.reset(ctx, key, keys)
	}
	start := time.Now()
	err := c.reset(ctx, key, keys)
	c.reportAdjust(AdjustReset, key, 0, 0, nil, keys, nil, nil, err, time.Since(start))
	return err
}

// reset is Reset without the hooks, on a built c. It fills keys with the
// parts' keys.
func (c *Composite) reset(ctx context.Context, key string, keys []string) error {
	if ctx == nil {
		return fmt.Errorf("ratelimit: Composite: %w", errNilContext)
	}
	if err := c.keys(key, keys); err != nil {
		return err
	}
	var rates []partRate
	if c.segmented {
		// A part whose keys name their policy resets the key of its
		// key's policy now.
		var buf partsBuffer
		call := c.newCall(&buf)
		call.keys = keys
		if _, err := c.resolve(ctx, &call); err != nil {
			return err
		}
		rates = call.rates
	}
	if c.local != nil {
		c.local.reset(c.local.tableKeys(keys, rates))
		return nil
	}
	return c.remote.reset(ctx, keys, rates)
}

// partKeys returns the parts' keys for key, in order; key for each when
// they cannot be derived.
func (c *Composite) partKeys(key string) []string {
	keys := make([]string, len(c.parts))
	if c.keys(key, keys) != nil {
		for i := range keys {
			keys[i] = key
		}
	}
	return keys
}

// Acquire takes n units for key from every part, all or nothing, as Allow
// does, and returns the Lease that holds the concurrency part's units:
// the slot is taken only when every rate part allows the call, and the
// rate parts' units only when the slot is free, so a denial takes nothing
// anywhere. The Lease is the concurrency part's (its key is the part's
// key, after Part.Key); releasing it gives back the units in flight alone,
// as the rate parts' units stay taken. A Composite without a concurrency
// part decides as Decide does and returns a Lease that holds nothing. On
// Redis it is one script request for every part, coalesced with the
// Composite's other calls. See Composite.
func (c *Composite) Acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	return c.call(ctx, key, n, true)
}

// findInFlight finds the part of c that limits units in flight, if any,
// and refuses more than one. kind names the constructor in errors.
func (c *Composite) findInFlight(kind string) error {
	c.inFlight = -1
	var names []string
	for i, p := range c.parts {
		// Built or not: a zero-value one fails newLocalParts and
		// newRedisParts.
		e, ok := engineOf(p.Limiter)
		if !ok || !e.kindOf().inFlight() {
			continue
		}
		h, ok := p.Limiter.(leaseHolder)
		if !ok {
			continue
		}
		names = append(names, p.Name)
		if c.inFlight < 0 {
			c.inFlight, c.holder = i, h
		}
	}
	if len(names) > 1 {
		return fmt.Errorf("%w: %s: parts %q are concurrency limiters; a Composite holds at most one limit of units in flight", ErrInvalidConfig, kind, names)
	}
	return nil
}

// resolve fills call's policies and rates with each part's policy for its
// key (call.keys, filled), and call.tight with the tightest of them. A
// part's PolicyFunc error or a policy its limiter refuses fails the call:
// resolve returns the part's index and an error, wrapping ErrPolicy or
// ErrInvalidConfig, that names the part and its key; call's policies are
// then each part's own for the parts not resolved. c.keyed is not nil.
func (c *Composite) resolve(ctx context.Context, call *partsCall) (int, error) {
	k := c.keyed
	for i, t := range k.policyFuncs {
		if t == nil {
			call.policies[i], call.rates[i] = c.policies[i], k.owns[i]
			continue
		}
		p, limit, param, err := t.resolve(ctx, call.keys[i])
		if err != nil {
			copy(call.policies[i:], c.policies[i:])
			return i, fmt.Errorf("ratelimit: Composite part %q: %w", c.parts[i].Name, err)
		}
		call.policies[i] = NamedPolicy{Name: c.policies[i].Name, Policy: p, PerCall: c.policies[i].PerCall, InFlight: c.policies[i].InFlight}
		call.rates[i] = partRate{limit: limit, param: param, zone: t.zoneOf(p)}
	}
	call.tight, _ = tightest(call.policies)
	return 0, nil
}

// settleBound returns the part whose bound on a Settle's taken is the
// smallest among the parts that count units, and that bound: its limit,
// or 2^52 for a part built WithPolicyFunc, since its units may have been
// taken under an earlier, larger policy; part 0 and 2^52 when every part
// counts calls.
func (c *Composite) settleBound() (int, int) {
	b, limit := 0, maxSettleCost
	for i, p := range c.policies {
		l := p.Limit
		if c.keyed != nil && c.keyed.policyFuncs[i] != nil {
			l = maxSettleCost
		}
		if !p.PerCall && l < limit {
			b, limit = i, l
		}
	}
	if limit == maxSettleCost {
		b = c.tight // the same part as before per-key policies, for errors
	}
	return b, limit
}

// checkCharge returns an error naming the part for a Settle of taken and
// cost that a part of c refuses by its bound (see WithMaxSettle), its
// index, and nil and -1 otherwise: each part that counts units, by its
// limiter's bound and its limit in policies (the call's: its key's, for a
// part built WithPolicyFunc).
func (c *Composite) checkCharge(taken, cost int, policies []NamedPolicy) (int, error) {
	for i, p := range c.parts {
		if p.PerCall || i == c.inFlight {
			continue
		}
		o := observerOf(p.Limiter)
		if o == nil {
			continue
		}
		if err := o.maxSettle.check(taken, cost, policies[i].Limit); err != nil {
			return i, fmt.Errorf("ratelimit: Composite part %q: %w", p.Name, err)
		}
	}
	return -1, nil
}

// adjust applies a Refund or Settle (op) of taken and cost to every
// part's key, and reports each part's share to its adjust hooks, if any.
func (c *Composite) adjust(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if c == nil || len(c.parts) == 0 {
		return Result{}, notBuilt("Composite")
	}
	var buf partsBuffer
	call := c.newCall(&buf)
	if c.adjusters == nil {
		return c.settle(ctx, key, taken, cost, opts, &call)
	}
	start := time.Now()
	res, err := c.settle(ctx, key, taken, cost, opts, &call)
	c.reportAdjust(op, key, taken, cost, opts, call.keys, call.policies, call.results, err, time.Since(start))
	return res, err
}

// reportAdjust reports to each part's adjust hooks its share of an
// adjustment of taken and cost for key: its key in keys, its own taken and
// cost (1 for each above 0, for a part that counts calls), its Result in
// results (nil for a Reset: the zero Result), or only its Limit on an
// error: its key's policy's in policies (nil: the parts' own). A part
// whose key was not derived (an error came first) reports the call's key.
func (c *Composite) reportAdjust(op AdjustOp, key string, taken, cost int, opts []AdjustOption, keys []string, policies []NamedPolicy, results []Result, err error, latency time.Duration) {
	if policies == nil {
		policies = c.policies
	}
	for i, o := range c.adjusters {
		if o == nil || i == c.inFlight && op != AdjustReset {
			// A concurrency part hears of Resets alone: Refunds and
			// Settles leave it as it is.
			continue
		}
		k, t, n := keys[i], taken, cost
		if k == "" {
			k = key
		}
		if c.parts[i].PerCall {
			t, n = once(taken), once(cost)
		}
		var res Result
		switch {
		case err != nil && op != AdjustReset:
			res = Result{Limit: policies[i].Limit}
		case results != nil:
			res = results[i]
		}
		o.reportAdjust(op, k, t, n, opts, res, err, latency)
	}
}

// windowsOpenNow returns policies, the parts' policies of a call, with
// each calendar part's Window the length of its window open now, on its
// limiter's clock (a RedisCalendarWindow's client clock): a copy, when a
// Composite has calendar parts. A part's policy names its period by its
// nominal length.
func (c *Composite) windowsOpenNow(policies []NamedPolicy) []NamedPolicy {
	if c.windowsNow == nil {
		return policies
	}
	out := append([]NamedPolicy(nil), policies...)
	for i, now := range c.windowsNow {
		if now != nil && periodOfNominal(out[i].Window) != 0 {
			out[i].Window = now(out[i].Policy)
		}
	}
	return out
}

// reportLease tells o's hooks of one call's Decision d and the lease it
// granted. The caller has checked that o.hooks is not nil.
func reportLease(o *observer, key string, n int, d Decision, lease Lease, err error, latency time.Duration) {
	o.hooks.Decided(Event{Limiter: o.name, Key: o.keys.event(o.hooks, key), Cost: n, Decision: d, Lease: lease, Err: err, Latency: latency})
}
