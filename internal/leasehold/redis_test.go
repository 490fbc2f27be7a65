package leasehold_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/leasehold"
	"github.com/ratelimit-go/ratelimit/internal/leasehold/leaseholdtest"
	"github.com/ratelimit-go/ratelimit/internal/redistest"
)

// A RedisConcurrency on miniredis, whose errors and contexts the tests
// control.

// ctxRecorder is a redis.Hook that keeps the deadline and the valueKey
// value of each command's context.
type ctxRecorder struct {
	mu        sync.Mutex
	deadlines []time.Duration // from when the command was sent; -1 for none
	values    []any
}

// valueKey is the key of a value the work's context carries.
type valueKey struct{}

func (r *ctxRecorder) record(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	left := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		left = time.Until(d)
	}
	r.deadlines = append(r.deadlines, left)
	r.values = append(r.values, ctx.Value(valueKey{}))
}

func (r *ctxRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *ctxRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(ctx)
		return next(ctx, cmd)
	}
}

func (r *ctxRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.record(ctx)
		return next(ctx, cmds)
	}
}

// last returns the deadline and value of the last command's context.
func (r *ctxRecorder) last(t *testing.T) (time.Duration, any) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.deadlines)
	return r.deadlines[len(r.deadlines)-1], r.values[len(r.values)-1]
}

// redisRig is a Hold of the one slot of key "k" of a RedisConcurrency
// with leases of 30 s on miniredis, under a context that carries a value
// and that the test cancels, with fake timers.
type redisRig struct {
	fail    func(on bool)
	l       *ratelimit.RedisConcurrency
	rec     *ctxRecorder
	timers  *leaseholdtest.Timers
	rep     *leaseholdtest.Reports
	hold    *leasehold.Hold
	cancel  context.CancelFunc
	advance func(time.Duration)
}

func newRedisRig(t *testing.T) *redisRig {
	t.Helper()
	m, client, advance := redistest.Miniredis(t, epoch)
	rig := &redisRig{rec: &ctxRecorder{}, timers: &leaseholdtest.Timers{}, rep: &leaseholdtest.Reports{}, hold: &leasehold.Hold{}, advance: advance}
	client.AddHook(rig.rec)
	rig.fail = func(on bool) {
		if on {
			m.SetError("LOADING Redis is loading the dataset in memory")
		} else {
			m.SetError("")
		}
	}
	var err error
	rig.l, err = ratelimit.NewRedisConcurrency(client, 1, 30*time.Second, ratelimit.WithoutCoalescing())
	require.NoError(t, err)
	var ctx context.Context
	ctx, rig.cancel = context.WithCancel(context.WithValue(context.Background(), valueKey{}, "v"))
	t.Cleanup(rig.cancel)
	rig.hold.Start(ctx, owner, acquire(t, rig.l, "k"), rig.timers.After, rig.rep)
	return rig
}

// An extension that fails otherwise than with ErrLeaseExpired (Redis
// fails) is reported and tried again a third of the TTL later; the lease
// was still held, and the next extension keeps it.
func TestFailedExtensionIsReportedAndTriedAgain(t *testing.T) {
	rig := newRedisRig(t)
	timer := rig.timers.Last(t, 1)
	rig.fail(true)
	rig.advance(10 * time.Second)
	timer.Fire()
	errs := rig.rep.All()
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], errTest)
	assert.ErrorIs(t, errs[0], ratelimit.ErrBackend)
	assert.False(t, errors.Is(errs[0], ratelimit.ErrLeaseExpired))
	armed, d, _ := timer.State()
	require.True(t, armed, "tried again")
	assert.Equal(t, 10*time.Second, d)

	rig.fail(false)
	rig.advance(10 * time.Second)
	timer.Fire()
	assert.Len(t, rig.rep.All(), 1)
	rig.advance(15 * time.Second) // 35 s: past the first lease's TTL
	assert.False(t, free(t, rig.l, "k"), "extended at 20 s")
	rig.hold.End()
	assert.True(t, free(t, rig.l, "k"))
	assert.Len(t, rig.rep.All(), 1)
}

// A release that fails is reported, wrapping the Owner's Err; the lease
// then stays until its TTL.
func TestFailedReleaseIsReported(t *testing.T) {
	rig := newRedisRig(t)
	rig.fail(true)
	rig.hold.End()
	errs := rig.rep.All()
	require.Len(t, errs, 1)
	assert.ErrorIs(t, errs[0], errTest)
	assert.ErrorIs(t, errs[0], ratelimit.ErrBackend)
	assert.Contains(t, errs[0].Error(), "Release of lease{")
	rig.fail(false)
	assert.False(t, free(t, rig.l, "k"), "held until its TTL")
	rig.advance(30 * time.Second)
	assert.True(t, free(t, rig.l, "k"))
}

// The extensions and the release run under the work's context without
// its cancellation, with its values, and bounded by Timeout: a cancelled
// request still extends and gives back its units.
func TestExtendAndReleaseOutliveTheWorksCancellation(t *testing.T) {
	rig := newRedisRig(t)
	rig.cancel()
	timer := rig.timers.Last(t, 1)
	timer.Fire()
	assertBounded := func(what string) {
		left, v := rig.rec.last(t)
		assert.Equal(t, "v", v, what)
		assert.Positive(t, left, what)
		assert.LessOrEqual(t, left, leasehold.Timeout, what)
	}
	assertBounded("Extend")
	rig.hold.End()
	assertBounded("Release")
	assert.Empty(t, rig.rep.All())
	assert.True(t, free(t, rig.l, "k"))

	lease := acquire(t, rig.l, "k")
	require.NoError(t, owner.Release(rig.hold, lease), "Release under a cancelled context")
	assertBounded("Owner.Release")
	assert.True(t, free(t, rig.l, "k"))
}
