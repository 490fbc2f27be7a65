package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
)

// fakeTimers stands for time.AfterFunc in a Middleware: the test fires
// each timer when it chooses, on the limiter's fake clock.
type fakeTimers struct {
	mu     sync.Mutex
	timers []*fakeTimer
}

// fakeTimer is one timer of fakeTimers.
type fakeTimer struct {
	mu      sync.Mutex
	f       func()
	d       time.Duration // as last set
	armed   bool
	stopped bool
}

func (ft *fakeTimers) after(d time.Duration, f func()) leaseTimer {
	t := &fakeTimer{f: f, d: d, armed: true}
	ft.mu.Lock()
	ft.timers = append(ft.timers, t)
	ft.mu.Unlock()
	return t
}

// only returns the one timer started.
func (ft *fakeTimers) only(t *testing.T) *fakeTimer {
	t.Helper()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	require.Len(t, ft.timers, 1)
	return ft.timers[0]
}

func (t *fakeTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.armed
	t.armed, t.stopped = false, true
	return was
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.armed
	t.armed, t.d = true, d
	return was
}

// state returns whether the timer is set, and for when.
func (t *fakeTimer) state() (bool, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.armed, t.d
}

// fire runs the timer's function as its expiry would, if it is set.
func (t *fakeTimer) fire() {
	t.mu.Lock()
	if !t.armed {
		t.mu.Unlock()
		return
	}
	t.armed = false
	f := t.f
	t.mu.Unlock()
	f()
}

// errorLog keeps the errors a WithOnError hook gets.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) hook(_ *http.Request, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errorLog) all() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// leaseRig is a Middleware built WithLeases over a Concurrency of 1 in
// flight with leases of 30 s on a fake clock, whose timers the test fires,
// in front of a handler that holds each request until told.
type leaseRig struct {
	clock    *ratelimit.FakeClock
	timers   *fakeTimers
	errs     *errorLog
	h        http.Handler
	entered  chan *http.Request
	release  chan struct{}
	finished chan int
}

func newLeaseRig(t *testing.T) *leaseRig {
	t.Helper()
	clock := ratelimit.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := ratelimit.NewConcurrency(1, 30*time.Second, ratelimit.WithClock(clock))
	require.NoError(t, err)
	rig := &leaseRig{
		clock: clock, timers: &fakeTimers{}, errs: &errorLog{},
		entered: make(chan *http.Request, 1), release: make(chan struct{}), finished: make(chan int, 1),
	}
	m, err := NewMiddleware(l, KeyByHeader("X-Api-Key"), WithLeases(), WithOnError(rig.errs.hook))
	require.NoError(t, err)
	m.after = rig.timers.after
	rig.h = m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rig.entered <- r
		<-rig.release
		w.WriteHeader(http.StatusOK)
	}))
	return rig
}

// start sends a request that stays in the handler, and returns it as the
// handler got it.
func (rig *leaseRig) start() *http.Request {
	go func() { rig.finished <- rig.send() }()
	return <-rig.entered
}

// send sends one request for alice and returns its status.
func (rig *leaseRig) send() int {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.Header.Set("X-Api-Key", "alice")
	w := httptest.NewRecorder()
	rig.h.ServeHTTP(w, r)
	return w.Code
}

// A handler that runs longer than the lease's TTL keeps its slot: the
// lease is extended every third of the TTL, the timer is stopped when the
// handler returns, and the slot is free then.
func TestLeaseExtendedWhileTheHandlerRuns(t *testing.T) {
	rig := newLeaseRig(t)
	rig.start()
	timer := rig.timers.only(t)
	armed, d := timer.state()
	require.True(t, armed)
	assert.Equal(t, 10*time.Second, d)

	for range 5 { // 50 s in all, well past the first lease's 30 s
		rig.clock.Advance(10 * time.Second)
		timer.fire()
		armed, d = timer.state()
		require.True(t, armed)
		assert.Equal(t, 10*time.Second, d)
		assert.Equal(t, http.StatusTooManyRequests, rig.send(), "the slot is still held")
	}
	assert.Empty(t, rig.errs.all())

	close(rig.release)
	assert.Equal(t, http.StatusOK, <-rig.finished)
	timer.mu.Lock()
	assert.True(t, timer.stopped)
	assert.False(t, timer.armed)
	timer.mu.Unlock()
	timer.fire() // a timer that fires as it is stopped does nothing
	assert.Equal(t, http.StatusOK, rig.send(), "the slot is free")
	assert.Empty(t, rig.errs.all())
}

// An extension that comes too late fails with ErrLeaseExpired: the error
// goes to the hook, the handler goes on uncancelled, and the lease is not
// extended again.
func TestLateExtensionReportsTheLostLeaseAndCancelsNothing(t *testing.T) {
	rig := newLeaseRig(t)
	r := rig.start()
	timer := rig.timers.only(t)

	rig.clock.Advance(31 * time.Second) // the lease has expired
	timer.fire()
	errs := rig.errs.all()
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], ErrLease)
	assert.ErrorIs(t, errs[0], ratelimit.ErrLeaseExpired)
	armed, _ := timer.state()
	assert.False(t, armed, "not extended again")
	require.NoError(t, r.Context().Err(), "the handler's request is not cancelled")

	close(rig.release)
	assert.Equal(t, http.StatusOK, <-rig.finished)
	assert.Len(t, rig.errs.all(), 1, "releasing an expired lease is no error")
}

// A handler's own Extend of its lease and the middleware's agree: both
// renew the one lease.
func TestHandlerMayExtendItsOwnLease(t *testing.T) {
	rig := newLeaseRig(t)
	r := rig.start()
	timer := rig.timers.only(t)

	rig.clock.Advance(25 * time.Second)
	lease, ok := LeaseOf(r.Context())
	require.True(t, ok)
	_, err := lease.Extend(context.Background()) // to 55 s
	require.NoError(t, err)
	rig.clock.Advance(20 * time.Second) // 45 s: the middleware's timer was late
	timer.fire()                        // to 75 s
	assert.Empty(t, rig.errs.all())
	rig.clock.Advance(25 * time.Second) // 70 s
	assert.Equal(t, http.StatusTooManyRequests, rig.send())

	close(rig.release)
	assert.Equal(t, http.StatusOK, <-rig.finished)
}
