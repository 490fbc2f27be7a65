package leasehold_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold"
	"github.com/ratelimit-go/ratelimit/internal/leasehold/leaseholdtest"
	"github.com/ratelimit-go/ratelimit/ratelimittest"
)

// errTest is the Err of the tests' Owner.
var errTest = errors.New("test: holding the lease failed")

// owner is the tests' Owner.
var owner = &leasehold.Owner{Err: errTest}

// epoch is where the tests' clocks start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// acquirer is a limiter of leases: a Concurrency or a RedisConcurrency.
type acquirer interface {
	Acquire(ctx context.Context, key string, n int) (ratelimit.Lease, ratelimit.Decision, error)
}

// acquire takes key's one slot of l and returns its lease.
func acquire(t *testing.T, l acquirer, key string) ratelimit.Lease {
	t.Helper()
	lease, d, err := l.Acquire(context.Background(), key, 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.True(t, lease.Held())
	return lease
}

// free reports whether key's one slot of l is free, giving it back at once.
func free(t *testing.T, l acquirer, key string) bool {
	t.Helper()
	lease, d, err := l.Acquire(context.Background(), key, 1)
	require.NoError(t, err)
	require.NoError(t, lease.Release(context.Background()))
	return d.Allowed
}

// holdRig is a Hold of the one slot of key "k" of a Concurrency with
// leases of 30 s on a fake clock, whose timers the test fires.
type holdRig struct {
	clock  *ratelimittest.Clock
	l      *ratelimit.Concurrency
	timers *leaseholdtest.Timers
	rep    *leaseholdtest.Reports
	hold   *leasehold.Hold
}

func newHoldRig(t *testing.T, opts ...ratelimit.Option) *holdRig {
	t.Helper()
	rig := &holdRig{clock: ratelimittest.NewClock(epoch), timers: &leaseholdtest.Timers{}, rep: &leaseholdtest.Reports{}, hold: &leasehold.Hold{}}
	var err error
	rig.l, err = ratelimit.NewConcurrency(1, 30*time.Second, append([]ratelimit.Option{ratelimit.WithClock(rig.clock)}, opts...)...)
	require.NoError(t, err)
	rig.hold.Start(context.Background(), owner, acquire(t, rig.l, "k"), rig.timers.After, rig.rep)
	return rig
}

// While the work runs, its lease is extended every third of its TTL, so
// that it outlives the TTL; the Hold's lease is the one last extended.
func TestHoldExtendsTheLeaseEveryThirdOfItsTTL(t *testing.T) {
	rig := newHoldRig(t)
	timer := rig.timers.Last(t, 1)
	armed, d, _ := timer.State()
	require.True(t, armed)
	assert.Equal(t, 10*time.Second, d)
	for range 5 { // 50 s in all, well past the first lease's 30 s
		rig.clock.Advance(10 * time.Second)
		timer.Fire()
		armed, d, _ = timer.State()
		require.True(t, armed)
		assert.Equal(t, 10*time.Second, d)
		assert.False(t, free(t, rig.l, "k"), "the slot is still held")
	}
	lease, ok := owner.LeaseOf(rig.hold)
	require.True(t, ok)
	assert.True(t, lease.Held())
	assert.Equal(t, "k", lease.Key())
	assert.Equal(t, 30*time.Second, lease.TTL())
	assert.Empty(t, rig.rep.All())
}

// End stops the timer before it releases the lease: the release finds it
// stopped, and the slot is free afterwards. A timer that fires as it is
// stopped extends nothing.
func TestEndStopsExtendingThenReleases(t *testing.T) {
	var stoppedAtRelease []bool
	var timer *leaseholdtest.Timer
	rig := newHoldRig(t, ratelimit.WithHooks(adjustFunc(func(e ratelimit.AdjustEvent) {
		if e.Op == ratelimit.AdjustRelease {
			_, _, stopped := timer.State()
			stoppedAtRelease = append(stoppedAtRelease, stopped)
		}
	})))
	timer = rig.timers.Last(t, 1)
	rig.hold.End()
	assert.Equal(t, []bool{true}, stoppedAtRelease)
	armed, _, _ := timer.State()
	assert.False(t, armed)
	assert.True(t, free(t, rig.l, "k"))

	timer.Reset(10 * time.Second) // as a firing that raced Stop
	timer.Fire()
	assert.Equal(t, []bool{true, true}, stoppedAtRelease, "only free's own release, no extension")
	assert.Empty(t, rig.rep.All(), "the released lease was not extended")
}

// adjustFunc is a ratelimit.Hooks that calls itself with each AdjustEvent.
type adjustFunc func(ratelimit.AdjustEvent)

func (adjustFunc) Decided(ratelimit.Event)                    {}
func (adjustFunc) BreakerChanged(_, _ ratelimit.BreakerState) {}
func (f adjustFunc) Adjusted(e ratelimit.AdjustEvent)         { f(e) }

// An extension that comes too late fails with ErrLeaseExpired: the error
// is reported wrapping the Owner's Err, the work's context is not
// cancelled, and the lease is not extended again; releasing the expired
// lease then is no error.
func TestExpiredLeaseIsReportedAndNotExtendedAgain(t *testing.T) {
	rig := newHoldRig(t)
	timer := rig.timers.Last(t, 1)
	rig.clock.Advance(31 * time.Second)
	timer.Fire()
	errs := rig.rep.All()
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], errTest)
	assert.ErrorIs(t, errs[0], ratelimit.ErrLeaseExpired)
	assert.Contains(t, errs[0].Error(), "Extend of lease{")
	armed, _, _ := timer.State()
	assert.False(t, armed, "not extended again")
	require.NoError(t, rig.hold.Err(), "the work is not cancelled")

	rig.hold.End()
	assert.Len(t, rig.rep.All(), 1, "releasing an expired lease is no error")
}

// A Hold without a Reporter fails as quietly: an expired lease is not
// extended again, and nothing panics.
func TestHoldWithoutAReporterFailsQuietly(t *testing.T) {
	l, err := ratelimit.NewConcurrency(1, 30*time.Second, ratelimit.WithClock(ratelimittest.NewClock(epoch)))
	require.NoError(t, err)
	timers := &leaseholdtest.Timers{}
	var h leasehold.Hold
	h.Start(context.Background(), owner, acquire(t, l, "k"), timers.After, nil)
	require.NoError(t, l.Reset(context.Background(), "k"))
	timer := timers.Last(t, 1)
	timer.Fire()
	armed, _, _ := timer.State()
	assert.False(t, armed)
	h.End()
}

// The work's context is the Hold's: its values, deadline and
// cancellation show through, and each Owner's LeaseOf finds the innermost
// Hold of its own, and none of another Owner's.
func TestLeaseOfFindsTheInnermostHoldOfItsOwner(t *testing.T) {
	l, err := ratelimit.NewConcurrency(1, time.Minute) // one slot per key: a held one is not free
	require.NoError(t, err)
	other := &leasehold.Owner{Err: errTest}
	timers := &leaseholdtest.Timers{}
	type valueKey struct{}
	base, cancel := context.WithCancel(context.WithValue(context.Background(), valueKey{}, "v"))
	outer, middle, inner := &leasehold.Hold{}, &leasehold.Hold{}, &leasehold.Hold{}
	a, b, c := acquire(t, l, "a"), acquire(t, l, "b"), acquire(t, l, "c")
	outer.Start(base, owner, a, timers.After, nil)
	middle.Start(outer, other, b, timers.After, nil)
	inner.Start(middle, owner, c, timers.After, nil)

	got, ok := owner.LeaseOf(inner)
	require.True(t, ok)
	assert.Equal(t, c, got)
	got, ok = other.LeaseOf(inner)
	require.True(t, ok)
	assert.Equal(t, b, got)
	got, ok = owner.LeaseOf(middle)
	require.True(t, ok)
	assert.Equal(t, a, got)
	_, ok = other.LeaseOf(outer)
	assert.False(t, ok)
	_, ok = owner.LeaseOf(base)
	assert.False(t, ok)
	var nilCtx context.Context
	_, ok = owner.LeaseOf(nilCtx)
	assert.False(t, ok)

	assert.Equal(t, "v", inner.Value(valueKey{}))
	cancel()
	assert.ErrorIs(t, inner.Err(), context.Canceled)
	assert.False(t, free(t, l, "a"))
	for _, h := range []*leasehold.Hold{inner, middle, outer} {
		h.End()
	}
	for _, key := range []string{"a", "b", "c"} {
		assert.True(t, free(t, l, key), "every Hold's slot came back")
	}
}

// Release gives a held lease back at once; a lease that holds nothing, or
// one released already, is no error.
func TestOwnerReleaseGivesTheLeaseBack(t *testing.T) {
	l, err := ratelimit.NewConcurrency(1, time.Minute)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, owner.Release(ctx, ratelimit.Lease{}))
	lease := acquire(t, l, "k")
	require.NoError(t, owner.Release(ctx, lease))
	assert.True(t, free(t, l, "k"))
	require.NoError(t, owner.Release(ctx, lease))
}
