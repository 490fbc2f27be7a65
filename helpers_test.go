package ratelimit

// The test helpers that more than one test file of package ratelimit uses:
// the fake clocks' start, the miniredis clock, recording hooks, stub
// backends, policy tables and random schedules.

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

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

// policyTable is where a test keeps each key's policy, and changes it while
// a limiter built WithPolicyFunc(table.f) runs. A key it has no policy for
// gets the zero Policy: the limiter's own.
type policyTable struct {
	mu       sync.Mutex
	policies map[string]Policy
	err      error // returned for every key while set
}

func newPolicyTable() *policyTable {
	return &policyTable{policies: map[string]Policy{}}
}

// set gives key the policy p from its next call on.
func (pt *policyTable) set(key string, p Policy) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.policies[key] = p
}

// fail makes every call's policy fail with err, until fail(nil).
func (pt *policyTable) fail(err error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.err = err
}

// get returns key's policy, the zero Policy when it has none.
func (pt *policyTable) get(key string) Policy {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	return pt.policies[key]
}

// f is the table's PolicyFunc.
func (pt *policyTable) f(_ context.Context, key string) (Policy, error) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if pt.err != nil {
		return Policy{}, pt.err
	}
	return pt.policies[key], nil
}

// call is one step of a random schedule.
type call struct {
	advance time.Duration
	key     string
	n       int
}

// randomSchedule is a random run of calls over keys: costs from 0 to
// capacity+1, gaps from 0 to about two token intervals, now and then a long
// pause, and, if back is set, now and then a clock that steps back.
func randomSchedule(r *rand.Rand, steps, capacity int, interval time.Duration, back bool, keys ...string) []call {
	calls := make([]call, steps)
	for i := range calls {
		c := call{key: keys[r.IntN(len(keys))], n: r.IntN(capacity + 2)}
		switch x := r.IntN(20); {
		case x < 5: // a burst: no time passes
		case x == 5 && back:
			c.advance = -time.Duration(r.Int64N(int64(interval)*3 + 1))
		case x == 6:
			c.advance = time.Duration(r.Int64N(int64(interval) * int64(capacity+2)))
		default:
			c.advance = time.Duration(r.Int64N(int64(interval)*2 + 1))
		}
		if r.IntN(4) == 0 {
			// Whole microseconds keep Redis (µs clock) and in-process (ns
			// clock) on the same schedule.
			c.advance = c.advance.Truncate(time.Microsecond)
		}
		calls[i] = c
	}
	return calls
}
