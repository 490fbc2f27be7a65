package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold/leaseholdtest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// leaseRig is a Middleware built WithLeases over a Concurrency of 1 in
// flight with leases of 30 s on a fake clock, whose timers the test fires,
// in front of a handler that holds each request until told.
type leaseRig struct {
	clock    *ratelimittest.Clock
	timers   *leaseholdtest.Timers
	errs     *leaseholdtest.Reports
	h        http.Handler
	entered  chan *http.Request
	release  chan struct{}
	finished chan int
}

func newLeaseRig(t *testing.T) *leaseRig {
	t.Helper()
	clock := ratelimittest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	l, err := ratelimit.NewConcurrency(1, 30*time.Second, ratelimit.WithClock(clock))
	require.NoError(t, err)
	rig := &leaseRig{
		clock: clock, timers: &leaseholdtest.Timers{}, errs: &leaseholdtest.Reports{},
		entered: make(chan *http.Request, 1), release: make(chan struct{}), finished: make(chan int, 1),
	}
	m, err := NewMiddleware(l, KeyByHeader("X-Api-Key"), WithLeases(), WithOnError(func(_ *http.Request, err error) { rig.errs.ReportLease(err) }))
	require.NoError(t, err)
	m.after = rig.timers.After
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
// middleware's timer extends the lease (every third of its TTL, as package
// leasehold's tests check), and is stopped when the handler returns, and
// the slot is free then.
func TestLeaseExtendedWhileTheHandlerRuns(t *testing.T) {
	rig := newLeaseRig(t)
	rig.start()
	timer := rig.timers.Last(t, 1)
	for range 5 { // 50 s in all, well past the first lease's 30 s
		rig.clock.Advance(10 * time.Second)
		timer.Fire()
		assert.Equal(t, http.StatusTooManyRequests, rig.send(), "the slot is still held")
	}
	assert.Empty(t, rig.errs.All())

	close(rig.release)
	assert.Equal(t, http.StatusOK, <-rig.finished)
	armed, _, stopped := timer.State()
	assert.True(t, stopped)
	assert.False(t, armed)
	timer.Reset(10 * time.Second) // as a firing that raced Stop
	timer.Fire()                  // extends nothing: the lease was released
	assert.Equal(t, http.StatusOK, rig.send(), "the slot is free")
	assert.Empty(t, rig.errs.All())
}

// An extension that comes too late fails with ErrLeaseExpired: the error
// goes to the hook, the handler goes on uncancelled, and the lease is not
// extended again.
func TestLateExtensionReportsTheLostLeaseAndCancelsNothing(t *testing.T) {
	rig := newLeaseRig(t)
	r := rig.start()
	timer := rig.timers.Last(t, 1)

	rig.clock.Advance(31 * time.Second) // the lease has expired
	timer.Fire()
	errs := rig.errs.All()
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], ErrLease)
	assert.ErrorIs(t, errs[0], ratelimit.ErrLeaseExpired)
	armed, _, _ := timer.State()
	assert.False(t, armed, "not extended again")
	require.NoError(t, r.Context().Err(), "the handler's request is not cancelled")

	close(rig.release)
	assert.Equal(t, http.StatusOK, <-rig.finished)
	assert.Len(t, rig.errs.All(), 1, "releasing an expired lease is no error")
}

// A handler's own Extend of its lease and the middleware's agree: both
// renew the one lease.
func TestHandlerMayExtendItsOwnLease(t *testing.T) {
	rig := newLeaseRig(t)
	r := rig.start()
	timer := rig.timers.Last(t, 1)

	rig.clock.Advance(25 * time.Second)
	lease, ok := LeaseOf(r.Context())
	require.True(t, ok)
	_, err := lease.Extend(context.Background()) // to 55 s
	require.NoError(t, err)
	rig.clock.Advance(20 * time.Second) // 45 s: the middleware's timer was late
	timer.Fire()                        // to 75 s
	assert.Empty(t, rig.errs.All())
	rig.clock.Advance(25 * time.Second) // 70 s
	assert.Equal(t, http.StatusTooManyRequests, rig.send())

	close(rig.release)
	assert.Equal(t, http.StatusOK, <-rig.finished)
}
