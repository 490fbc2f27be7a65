package outbound

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
	"github.com/stretchr/testify/require"
)

// fakeTime is the time an Upstream under test waits on: a ratelimittest.Clock
// that each sleep advances, and a record of the sleeps.
type fakeTime struct {
	clock *ratelimittest.Clock

	mu     sync.Mutex
	sleeps []time.Duration
	// onSleep, when set, runs before each sleep (to cancel a context, say).
	onSleep func()
}

// newFakeTime returns a fakeTime starting at the real now, so that real
// context deadlines can be compared with it.
func newFakeTime() *fakeTime {
	return &fakeTime{clock: ratelimittest.NewClock(time.Now())}
}

// install makes u wait on ft: its now, its sleeps, and the most jitter
// each sleep allows.
func (ft *fakeTime) install(u *Upstream) {
	u.now = ft.clock.Now
	u.rand = func(bound time.Duration) time.Duration { return bound }
	u.sleep = func(ctx context.Context, d time.Duration) error {
		if ft.onSleep != nil {
			ft.onSleep()
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		ft.mu.Lock()
		ft.sleeps = append(ft.sleeps, d)
		ft.mu.Unlock()
		ft.clock.Advance(d)
		return nil
	}
}

// slept returns the sleeps so far.
func (ft *fakeTime) slept() []time.Duration {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return append([]time.Duration(nil), ft.sleeps...)
}

// events records an Upstream's Events.
type events struct {
	mu  sync.Mutex
	all []Event
}

// observe is a Config.Observer.
func (e *events) observe(ev Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// of returns the events of kind k.
func (e *events) of(k EventKind) []Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Event
	for _, ev := range e.all {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// newLearningGCRA returns an in-process GCRA of limit per period on ft's
// clock that reads LearnedPolicy.
func newLearningGCRA(t testing.TB, ft *fakeTime, limit int, period time.Duration) *ratelimit.GCRA {
	t.Helper()
	g, err := ratelimit.NewGCRA(limit, period, ratelimit.WithClock(ft.clock), ratelimit.WithPolicyFunc(LearnedPolicy))
	require.NoError(t, err)
	return g
}

// newTestUpstream returns an Upstream of limiter with cfg, waiting on ft,
// its store on ft's clock unless cfg names one, and its events.
func newTestUpstream(t testing.TB, ft *fakeTime, limiter ratelimit.Limiter, cfg Config) (*Upstream, *events) {
	t.Helper()
	ev := &events{}
	cfg.Observer = ev.observe
	if cfg.Clock == nil {
		cfg.Clock = ft.clock
	}
	u, err := New(limiter, cfg)
	require.NoError(t, err)
	ft.install(u)
	return u, ev
}

// learn calls s.Learn, requires it not to fail, and returns whether it
// changed the partition's limit.
func learn(t testing.TB, s Store, ctx context.Context, partition string, p ratelimit.Policy, keep time.Duration) bool {
	t.Helper()
	changed, err := s.Learn(ctx, partition, p, keep)
	require.NoError(t, err)
	return changed
}
