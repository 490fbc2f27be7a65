package redisbatch

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// stream makes random batches of requests over a few kinds, sends each to
// the twins, and compares their replies and every key they hold after it.
type stream struct {
	t     *testing.T
	r     *rand.Rand
	w     *twins
	kinds []diffKind
	// shape returns the kinds of the checks of the next batch's requests,
	// in order: one per check.
	shape func(s *stream) []diffKind
	// leases are leases some Allow took, on their keys, newest last, for
	// Releases and Extends to name.
	leases    []heldLease
	nextLease int
	tokens    []string // Settle tokens used, newest last
	nextToken int
	stats     diffStats
	// mismatches describes the first few mismatches.
	mismatches []string
}

// heldLease is a lease an Allow took on key.
type heldLease struct{ key, name string }

// diffStats counts what a stream sent and what came back.
type diffStats struct {
	batches, compact, caller, requests int
	mismatched                         int // batches whose replies or keys differed
	allowed, denied, refused, errors   int // records of the old script's replies, and failed calls
	ops                                [Extend + 1]int
}

// newStream returns a stream of batches over kinds, whose checks shape
// picks, on twins of old and new started at a time of r's choosing.
func newStream(t *testing.T, seed uint64, old, new scripts, kinds []diffKind, shape func(s *stream) []diffKind) *stream {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, *diffSeed))
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.Int64N(int64(365 * 24 * time.Hour))))
	s := &stream{t: t, r: r, w: newTwins(t, start, old, new), kinds: kinds, shape: shape}
	s.seed()
	return s
}

// one is the shape of a stream of one kind: requests of one check, and
// some of two (a Composite of two parts of that kind).
func one(s *stream) []diffKind {
	if s.r.IntN(7) == 0 {
		return []diffKind{s.kinds[0], s.kinds[0]}
	}
	return s.kinds[:1]
}

// both is the shape of a stream of two kinds: requests of a check of each,
// in either order, and some of one.
func both(s *stream) []diffKind {
	a, b := s.kinds[0], s.kinds[1]
	switch x := s.r.IntN(20); {
	case x < 13:
		return []diffKind{a, b}
	case x < 17:
		return []diffKind{b, a}
	case x < 19:
		return []diffKind{a}
	}
	return []diffKind{b}
}

// three is the shape of a stream of every kind: requests of three checks,
// of any kinds.
func three(s *stream) []diffKind {
	return []diffKind{s.pick(), s.pick(), s.pick()}
}

// pick returns one of the stream's kinds.
func (s *stream) pick() diffKind { return s.kinds[s.r.IntN(len(s.kinds))] }

// run sends n batches.
func (s *stream) run(n int) {
	ctx := context.Background()
	for i := range n {
		s.batch(ctx, i)
	}
}

// batch sends the stream's batch number i and compares what comes back.
func (s *stream) batch(ctx context.Context, i int) {
	s.w.step(s.step())
	if i%25 == 24 {
		s.seed()
	}
	shape := s.shape(s)
	// The client's clock: the one the caller's clock sends, and from which
	// a calendar's windows are computed; now and then apart from the
	// server's.
	client := s.w.now.UnixMicro()
	if s.r.IntN(5) == 0 {
		client += s.r.Int64N(3_000_000) - 1_500_000
	}
	caller := s.r.IntN(2) == 0
	var fixed []*Limit // the sender's limits; nil when each request carries its own
	keyed := s.r.IntN(3) == 0
	for _, k := range shape {
		keyed = keyed || k.keyed
	}
	if !keyed {
		for _, k := range shape {
			fixed = append(fixed, s.limit(k, client))
		}
	}
	cfg := Config{Client: s.w.old.client, Script: NewScript("-- sent by SHA"), Limits: fixed, Checks: len(shape), TokenTTL: 5 * time.Minute}
	now := int64(-1)
	if caller {
		now = client
		if s.r.IntN(500) == 0 {
			now = MaxNow // refused by the script
		}
		cfg.Now = func() (int64, error) { return now, nil }
	}
	send := NewSender(cfg)
	size := 1 + s.r.IntN(8)
	if s.r.IntN(10) == 0 {
		size = 1 + s.r.IntN(24)
	}
	allows := s.r.IntN(2) == 0 // a batch of Allows only, in the compact form where the sender has one limit
	batch := make([]*Request, size)
	for j := range batch {
		batch[j] = s.request(ctx, send, shape, fixed, client, allows)
	}
	args := plainArgs(send.command(ctx, batch, "evalsha", "", now).Args())
	old, new := s.w.call(ctx, args, caller)
	s.count(batch, old, send.compact(batch), caller)
	oldKeys, newKeys := keys(s.t, s.w.old.m), keys(s.t, s.w.new.m)
	diff := keysDiff(oldKeys, newKeys)
	if old == new && diff == "" {
		return
	}
	s.stats.mismatched++
	if len(s.mismatches) < 3 {
		form := "general"
		if send.compact(batch) {
			form = "compact"
		}
		clock := "server's"
		if caller {
			clock = "caller's"
		}
		kinds := make([]string, len(shape))
		for j, k := range shape {
			kinds[j] = string(k.kind)
		}
		if diff == "" {
			diff = " none"
		}
		s.mismatches = append(s.mismatches, fmt.Sprintf("batch %d (%s form, the %s clock, checks %s, server time %d µs):\n  args %v\n  old reply %s\n  new reply %s\n  keys that differ:%s",
			i, form, clock, strings.Join(kinds, ","), s.w.now.UnixMicro(), args[2:], showReply(old), showReply(new), diff))
	}
	// Both servers start again from empty, so that what follows is
	// compared again.
	s.w.each(func(m *miniredis.Miniredis) { m.FlushAll() })
	s.leases = s.leases[:0]
	s.seed()
}

// step returns how far the clock moves before the next batch: mostly
// ahead, by up to minutes, and now and then back.
func (s *stream) step() time.Duration {
	var us int64
	switch x := s.r.IntN(100); {
	case x < 10:
		us = -s.r.Int64N(800_000)
	case x < 50:
		us = s.r.Int64N(50_000)
	case x < 85:
		us = s.r.Int64N(1_500_000)
	case x < 97:
		us = s.r.Int64N(6_000_000)
	default:
		us = s.r.Int64N(300_000_000)
	}
	return time.Duration(us) * time.Microsecond
}

// limit returns a limit of k, a calendar's about the client's time.
func (s *stream) limit(k diffKind, client int64) *Limit {
	p := k.policies[0]
	switch x := s.r.IntN(100); {
	case x < 2:
		p = k.edge
	case x < 30:
		p = k.policies[s.r.IntN(len(k.policies))]
	}
	if k.kind == CalendarWindow {
		return NewCalendarLimit(p[0], calendarBounds(p[1], client))
	}
	return NewLimit(k.kind, p[0], p[1])
}

// request returns a random request of shape's checks: only Allows when
// allows is set; the limits of its checks are fixed (the sender's) or,
// when fixed is nil, its own.
func (s *stream) request(ctx context.Context, send *Sender, shape []diffKind, fixed []*Limit, client int64, allows bool) *Request {
	keys := s.keys(shape)
	p := &Request{Ctx: ctx, Key: keys[0], More: keys[1:]}
	limits := fixed
	if limits == nil {
		limits = make([]*Limit, len(shape))
		for i, k := range shape {
			limits[i] = s.limit(k, client)
		}
		if len(shape) == 1 {
			p.Limit = limits[0]
		} else {
			p.Limits = limits
		}
	}
	if !allows {
		p.Op = s.op(shape)
	}
	s.stats.ops[p.Op]++
	switch p.Op {
	case Allow:
		costs := make([]int, len(shape))
		leased := false
		for i, l := range limits {
			costs[i] = s.cost(shape[i], l.Units)
			leased = leased || shape[i].kind == Concurrency && costs[i] > 0
		}
		s.costs(p, costs)
		if leased {
			p.Lease = s.lease()
			for i, k := range keys {
				if shape[i].kind == Concurrency && costs[i] > 0 {
					s.leases = append(s.leases, heldLease{key: k, name: p.Lease})
				}
			}
			if len(s.leases) > 64 {
				s.leases = append(s.leases[:0], s.leases[len(s.leases)-32:]...)
			}
		}
	case Settle:
		costs := make([]int, len(shape))
		debts := make([]int64, len(shape))
		for i, l := range limits {
			costs[i] = s.change(l.Units)
			debts[i] = s.maxDebt(l.Units)
		}
		s.costs(p, costs)
		p.Settlement = &Settlement{Age: s.age(), MaxDebt: debts[0]}
		if len(shape) > 1 && s.r.IntN(2) == 0 {
			p.Settlement.MaxDebts = debts
		}
		if s.r.IntN(5) < 2 {
			p.Settlement.Token = send.TokenKey(p.Key, s.token())
		}
	case Release, Extend:
		if len(s.leases) > 0 && s.r.IntN(5) != 0 {
			// Half of them the newest lease, which a pair of Acquire and
			// Release on a key that holds others releases.
			i := len(s.leases) - 1
			if s.r.IntN(2) == 0 {
				i = s.r.IntN(len(s.leases))
			}
			h := s.leases[i]
			p.Key, p.Lease = h.key, h.name
		} else {
			p.Lease = s.lease() // held by no key
		}
	}
	return p
}

// op returns a random op for a request of shape's checks: Releases and
// Extends for a request of one concurrency check only.
func (s *stream) op(shape []diffKind) Op {
	leases := len(shape) == 1 && shape[0].kind == Concurrency
	switch x := s.r.IntN(100); {
	case x < 45:
		return Allow
	case x < 75:
		return Settle
	case x < 85:
		return Reset
	case leases && x < 93:
		return Release
	case leases:
		return Extend
	}
	return Allow
}

// costs sets p's costs: N when they are all the same (always for one
// check, as the compact forms read N), else now and then Costs.
func (s *stream) costs(p *Request, costs []int) {
	same := true
	for _, c := range costs[1:] {
		same = same && c == costs[0]
	}
	if len(costs) == 1 || same && s.r.IntN(2) == 0 {
		p.N = costs[0]
		return
	}
	p.Costs = costs
}

// keys returns a key of each kind of shape, each apart from the others:
// mostly one of its kind's pool, now and then one of its foreign keys or
// one of another kind's pool.
func (s *stream) keys(shape []diffKind) []string {
	keys := make([]string, 0, len(shape))
	for _, k := range shape {
		for {
			key := s.key(k)
			if !slices.Contains(keys, key) {
				keys = append(keys, key)
				break
			}
		}
	}
	return keys
}

// key returns a random key for a check of kind k.
func (s *stream) key(k diffKind) string {
	switch x := s.r.IntN(100); {
	case x < 8:
		return foreignKey(k.kind, s.r.IntN(len(foreign(k.kind))))
	case x < 10:
		k = s.pick()
	}
	return poolKey(k.kind, string(rune('a'+s.r.IntN(5))))
}

// poolKey returns the Redis key name of kind's pool, as a limiter of
// that kind stores it.
func poolKey(kind Kind, name string) string {
	return StoredKey("rl:"+string(kind)+":", "", name)
}

// foreignKey returns the Redis key of kind's pool under which foreign(kind)[i]
// is seeded.
func foreignKey(kind Kind, i int) string { return poolKey(kind, "x"+strconv.Itoa(i)) }

// seed writes the foreign values of every kind of the stream under their
// keys, on both servers, where a key is absent.
func (s *stream) seed() {
	now := s.w.now.UnixMicro()
	for _, k := range s.kinds {
		for i, f := range foreign(k.kind) {
			key := foreignKey(k.kind, i)
			if !s.w.old.m.Exists(key) {
				s.w.each(func(m *miniredis.Miniredis) { f(m, key, now) })
			}
		}
	}
}

// cost returns an Allow's cost for check of kind k and a limit of units:
// 0 to units, and now and then units + 1 (k.over percent of them).
func (s *stream) cost(k diffKind, units int64) int {
	if s.r.IntN(100) < k.over {
		return int(units) + 1
	}
	if units <= 16 {
		return s.r.IntN(int(units) + 1)
	}
	return int(min(s.around(units), units))
}

// change returns a Settle's cost minus taken for a limit of units: mostly
// -(units + 1) to units + 1, now and then up to 2^52 either way.
func (s *stream) change(units int64) int {
	var d int64
	switch x := s.r.IntN(100); {
	case x < 1:
		d = 1 << 52
	case x < 3:
		d = 1 << 40
	case units <= 16:
		d = s.r.Int64N(units + 2)
	default:
		d = s.around(units)
	}
	if s.r.IntN(2) == 0 {
		d = -d
	}
	return int(d)
}

// around returns 0, 1, units / 2, units, units + 1, or any of 0 to units +
// 1.
func (s *stream) around(units int64) int64 {
	switch s.r.IntN(6) {
	case 0:
		return 0
	case 1:
		return 1
	case 2:
		return units / 2
	case 3:
		return units
	case 4:
		return units + 1
	}
	return s.r.Int64N(units + 2)
}

// maxDebt returns a Settle's most debt for a limit of units.
func (s *stream) maxDebt(units int64) int64 {
	switch x := s.r.IntN(10); {
	case x < 1:
		return 1 << 52
	case x < 3:
		return 0
	}
	return s.r.Int64N(min(units, 16) + 2)
}

// age returns a Settle's age: -1 (not known), or up to seconds, now and
// then minutes.
func (s *stream) age() int64 {
	switch x := s.r.IntN(20); {
	case x < 6:
		return -1
	case x < 19:
		return s.r.Int64N(3_000_000)
	}
	return s.r.Int64N(300_000_000)
}

// lease returns a lease name never used before, in the form a limiter
// names its leases.
func (s *stream) lease() string {
	s.nextLease++
	return "1f2e3d4c" + strconv.FormatInt(int64(s.nextLease), 16)
}

// token returns a Settle's token: mostly a new one, now and then one used
// before.
func (s *stream) token() string {
	if len(s.tokens) > 0 && s.r.IntN(3) == 0 {
		return s.tokens[s.r.IntN(len(s.tokens))]
	}
	s.nextToken++
	t := "tok" + strconv.Itoa(s.nextToken)
	s.tokens = append(s.tokens, t)
	if len(s.tokens) > 32 {
		s.tokens = append(s.tokens[:0], s.tokens[16:]...)
	}
	return t
}

// count adds a batch to the stream's stats: its form, its clock, and the
// records of the old script's reply.
func (s *stream) count(batch []*Request, reply string, compact, caller bool) {
	s.stats.batches++
	s.stats.requests += len(batch)
	if compact {
		s.stats.compact++
	}
	if caller {
		s.stats.caller++
	}
	if strings.HasPrefix(reply, "error: ") {
		s.stats.errors++
		return
	}
	// Each record: a refusal (255, check, length, reason), or 25 bytes
	// per check, allowed first.
	for _, p := range batch {
		if reply == "" {
			return
		}
		if reply[0] == 255 && len(reply) >= 4 {
			n := 4 + int(reply[2])<<8 + int(reply[3])
			s.stats.refused++
			reply = reply[min(n, len(reply)):]
			continue
		}
		checks := p.checks()
		if p.Op == Release || p.Op == Extend {
			checks = 1
		}
		if reply[0] == 1 {
			s.stats.allowed++
		} else {
			s.stats.denied++
		}
		reply = reply[min(25*checks, len(reply)):]
	}
}

// showReply returns a reply as text: an error as it is, records in hex.
func showReply(reply string) string {
	if strings.HasPrefix(reply, "error: ") {
		return reply
	}
	return fmt.Sprintf("%x", reply)
}
