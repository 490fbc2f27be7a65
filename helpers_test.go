package ratelimit

// The test helpers that more than one test file of package ratelimit uses:
// the fake clocks' start, the miniredis clock, recording hooks, stub
// backends, policy tables, and the random streams of operations.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// epoch is the start of every fake clock in the tests.
var epoch = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

// miniredisClock starts a miniredis whose TIME reads epoch; see
// redistest.Miniredis.
func miniredisClock(t *testing.T) (*miniredis.Miniredis, *redis.Client, func(time.Duration)) {
	t.Helper()
	return redistest.Miniredis(t, epoch)
}

// recordingHooks keeps what it is told.
type recordingHooks struct {
	mu      sync.Mutex
	events  []Event
	changes [][2]BreakerState
}

func (h *recordingHooks) Decided(ev Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, ev)
}

func (h *recordingHooks) BreakerChanged(from, to BreakerState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, [2]BreakerState{from, to})
}

func (h *recordingHooks) last() Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.events[len(h.events)-1]
}

// stubBackend answers every call with res and err, and counts the calls.
// With block set, a call waits for its context to end and returns its error.
type stubBackend struct {
	mu    sync.Mutex
	res   Result
	err   error
	block bool
	calls atomic.Int64
}

func (s *stubBackend) set(res Result, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.res, s.err = res, err
}

func (s *stubBackend) Allow(ctx context.Context, _ string, _ int) (Result, error) {
	s.calls.Add(1)
	s.mu.Lock()
	res, err, block := s.res, s.err, s.block
	s.mu.Unlock()
	if block {
		<-ctx.Done()
		return Result{}, ctx.Err()
	}
	return res, err
}

var errDown = errors.New("connection refused")

// refusingScripter fails the test on any call: for checks that no round
// trip is made.
type refusingScripter struct {
	redis.Scripter
	t *testing.T
}

func (s refusingScripter) EvalSha(context.Context, string, []string, ...any) *redis.Cmd {
	s.t.Fatal("EvalSha called")
	return nil
}

func (s refusingScripter) Eval(context.Context, string, []string, ...any) *redis.Cmd {
	s.t.Fatal("Eval called")
	return nil
}

// cannedScripter answers every script call with reply and err.
type cannedScripter struct {
	redis.Scripter
	reply any
	err   error
}

func (s cannedScripter) EvalSha(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmdResult(s.reply, s.err)
}

func (s cannedScripter) Eval(ctx context.Context, _ string, _ []string, _ ...any) *redis.Cmd {
	return redis.NewCmdResult(s.reply, s.err)
}

// planMap is where a test keeps each key's policy, and changes it while
// a limiter built WithPolicyFunc(table.f) runs. A key it has no policy for
// gets the zero Policy: the limiter's own.
type planMap struct {
	mu       sync.Mutex
	policies map[string]Policy
	err      error // returned for every key while set
}

func newPlanMap() *planMap {
	return &planMap{policies: map[string]Policy{}}
}

// set gives key the policy p from its next call on.
func (pt *planMap) set(key string, p Policy) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.policies[key] = p
}

// fail makes every call's policy fail with err, until fail(nil).
func (pt *planMap) fail(err error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.err = err
}

// get returns key's policy, the zero Policy when it has none.
func (pt *planMap) get(key string) Policy {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.policies[key]
}

// f is the table's PolicyFunc.
func (pt *planMap) f(_ context.Context, key string) (Policy, error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.err != nil {
		return Policy{}, pt.err
	}
	return pt.policies[key], nil
}

// op is one step of a random stream of operations, the one kind every
// differential test draws: move the clock by advance, give key the policy
// set (when change is true), then make the call kind: "allow" of n,
// "refund" of n, "settle" of taken and cost, or "reset"; a Refund or
// Settle carries TakenAt (as time since the epoch) when hasTakenAt is true.
type op struct {
	advance    time.Duration
	change     bool
	set        Policy
	kind       string
	key        string
	n, taken   int
	cost       int
	takenAt    time.Duration
	hasTakenAt bool
}

func (op op) String() string {
	s := fmt.Sprintf("+%v ", op.advance)
	if op.change {
		s += fmt.Sprintf("policy %d/%v; ", op.set.Limit, op.set.Window)
	}
	s += fmt.Sprintf("%s(%q, n=%d, taken=%d, cost=%d)", op.kind, op.key, op.n, op.taken, op.cost)
	if op.hasTakenAt {
		s += fmt.Sprintf(" TakenAt(%v)", op.takenAt)
	}
	return s
}

// apply makes op's call on l (its policy, if any, already set).
func (op op) apply(ctx context.Context, l Adjuster) (Result, error) {
	var opts []AdjustOption
	if op.hasTakenAt {
		opts = append(opts, TakenAt(epoch.Add(op.takenAt)))
	}
	switch op.kind {
	case "allow":
		return l.Allow(ctx, op.key, op.n)
	case "refund":
		return l.Refund(ctx, op.key, op.n, opts...)
	case "settle":
		return l.Settle(ctx, op.key, op.taken, op.cost, opts...)
	default:
		return Result{}, l.Reset(ctx, op.key)
	}
}

// opStream describes the random streams of a test, which ops draws.
type opStream struct {
	// mix bounds the calls' numbers: an Allow's n is below mix.allow, a
	// Refund's below mix.refund, a Settle's taken and cost below mix.taken
	// and mix.cost. A stream whose mix has only allow makes Allows only.
	mix opMix
	// step returns how far the clock moves before a call; nil: it stands
	// still.
	step func(r *rand.Rand) time.Duration
	// policies, when not empty, are the policies a key may be given (the
	// zero Policy among them): a quarter of the calls first change their
	// key's.
	policies []Policy
	// takenAt makes half the Refunds and Settles carry TakenAt, which
	// only in-process limiters can follow on a fake clock.
	takenAt bool
}

// opMix bounds the numbers of a stream's calls; see opStream.
type opMix struct{ allow, refund, taken, cost int }

// ops returns steps random calls over keys: Allows half the time,
// Refunds and Settles a fifth each, Resets a tenth (or Allows alone). An
// Allow-only stream draws a call's n before its step.
func (s opStream) ops(r *rand.Rand, steps int, keys ...string) []op {
	ops := make([]op, steps)
	allowOnly := s.mix.refund == 0 && s.mix.taken == 0 && s.mix.cost == 0
	var now time.Duration
	for i := range ops {
		op := op{key: keys[r.IntN(len(keys))]}
		if allowOnly {
			op.kind, op.n = "allow", r.IntN(s.mix.allow)
		}
		if s.step != nil {
			op.advance = s.step(r)
		}
		now += op.advance
		if len(s.policies) > 0 && r.IntN(4) == 0 {
			op.change, op.set = true, s.policies[r.IntN(len(s.policies))]
		}
		if !allowOnly {
			switch x := r.IntN(10); {
			case x < 5:
				op.kind, op.n = "allow", r.IntN(s.mix.allow)
			case x < 7:
				op.kind, op.n = "refund", r.IntN(s.mix.refund)
			case x < 9:
				op.kind, op.taken, op.cost = "settle", r.IntN(s.mix.taken), r.IntN(s.mix.cost)
			default:
				op.kind = "reset"
			}
		}
		if s.takenAt && (op.kind == "refund" || op.kind == "settle") && r.IntN(2) == 0 {
			op.hasTakenAt, op.takenAt = true, now-time.Duration(r.Int64N(int64(3*time.Second)))
		}
		ops[i] = op
	}
	return ops
}

// randomSchedule is a random run of Allows over keys: costs from 0 to
// capacity+1, gaps from 0 to about two token intervals, now and then a long
// pause, and, if back is set, now and then a clock that steps back.
func randomSchedule(r *rand.Rand, steps, capacity int, interval time.Duration, back bool, keys ...string) []op {
	return opStream{mix: opMix{allow: capacity + 2}, step: scheduleStep(capacity, interval, back)}.ops(r, steps, keys...)
}

// scheduleStep returns randomSchedule's steps for capacity and interval.
func scheduleStep(capacity int, interval time.Duration, back bool) func(r *rand.Rand) time.Duration {
	return func(r *rand.Rand) time.Duration {
		var step time.Duration
		switch x := r.IntN(20); {
		case x < 5: // a burst: no time passes
		case x == 5 && back:
			step = -time.Duration(r.Int64N(int64(interval)*3 + 1))
		case x == 6:
			step = time.Duration(r.Int64N(int64(interval) * int64(capacity+2)))
		default:
			step = time.Duration(r.Int64N(int64(interval)*2 + 1))
		}
		if r.IntN(4) == 0 {
			// Whole microseconds keep Redis (µs clock) and in-process (ns
			// clock) on the same schedule.
			step = step.Truncate(time.Microsecond)
		}
		return step
	}
}

// storedKey returns the Redis key of key under prefix, for a limiter
// whose keys have no seg of their own (see redisbatch.StoredKey).
func storedKey(prefix, key string) string { return redisbatch.StoredKey(prefix, "", key) }

// decideAny decides n for key through l, as internal/adapt.Decide does for
// the middleware: l's own Decision when l is a Decider, and otherwise one
// made of Allow's Result (see foreignDecision). A nil l is an error wrapping
// ErrInvalidConfig.
func decideAny(ctx context.Context, l Limiter, key string, n int) (Decision, error) {
	if d, ok := l.(Decider); ok && !isNil(d) {
		return d.Decide(ctx, key, n)
	}
	if isNil(l) {
		return Decision{}, fmt.Errorf("%w: Decide: nil limiter", ErrInvalidConfig)
	}
	res, err := l.Allow(ctx, key, n)
	return foreignDecision(res), err
}
