package outbound

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/nilcheck"
	"github.com/ratelimit-go/ratelimit/internal/pace"
)

// The jitter of a wait, as ratelimit.Wait's: a tenth of each sleep, at
// most 250 ms.
const (
	jitterFraction = 10 // a sleep's jitter is at most 1/jitterFraction of it
	maxJitter      = 250 * time.Millisecond
)

// minWait is the shortest sleep after a denial, so that a limiter whose
// denial names no RetryAfter cannot make a call spin.
const minWait = time.Millisecond

// probeKey is the key New asks the limiter's policies for.
const probeKey = "outbound-probe"

// Upstream admits the calls to one upstream within its limits: a limiter
// that holds the budget (in process, or on Redis for a whole fleet), what
// the upstream's answers taught (pauses, a lower limit), kept in a Store,
// and the waits between. Transport uses it for HTTP, and package
// grpclimit's client interceptors for gRPC; Admit and Observe serve any
// other client.
//
// Its zero value is not usable: build one with New. It is safe for
// concurrent use, and starts no goroutine.
type Upstream struct {
	limiter  ratelimit.Limiter
	store    Store
	suffix   string           // after a partition's name in the store: "" or " qu=" and the unit
	own      ratelimit.Policy // the limiter's own, when it learns
	learns   bool             // the limiter reads LearnedPolicy
	parsers  []Parser
	maxWait  time.Duration // < 0: never wait
	maxPause time.Duration
	forget   time.Duration
	limited  time.Duration
	jitter   bool
	observer func(Event)

	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
	rand  func(bound time.Duration) time.Duration
}

// New returns an Upstream that admits calls by limiter and learns from
// answers as cfg says. limiter is any ratelimit.Limiter, its keys the
// calls' partitions (a host, a credential, a route): build it
// WithPolicyFunc(LearnedPolicy), so that a limit the upstream states
// lowers it, or set cfg.IgnorePolicies.
//
// It returns an error wrapping ratelimit.ErrInvalidConfig for a nil
// limiter (a typed nil too), a negative MaxPause, Forget or LimitedPause,
// a nil Parser, or, without IgnorePolicies, a limiter that does not read
// LearnedPolicy or has no rate to lower (its policies limit calls in
// flight). A limiter that learns must tell its policies (implement
// ratelimit.Decider, as every limiter of package ratelimit does): the
// learned limit is lowered to no more than the tightest of the policies
// that read LearnedPolicy (a Composite's learning parts), as the limiter
// tells them for a key New asks about, so that a PolicyFunc's per-key
// plans are not read here. A calendar window cannot learn: a stated
// limit is no calendar period.
func New(limiter ratelimit.Limiter, cfg Config) (*Upstream, error) {
	if nilcheck.IsNil(limiter) {
		return nil, fmt.Errorf("%w: outbound: New: nil limiter", ratelimit.ErrInvalidConfig)
	}
	for _, c := range []struct {
		name string
		d    time.Duration
	}{{"MaxPause", cfg.MaxPause}, {"Forget", cfg.Forget}, {"LimitedPause", cfg.LimitedPause}} {
		if c.d < 0 {
			return nil, fmt.Errorf("%w: outbound: Config.%s is %v; it must be >= 0 (0 for the default)", ratelimit.ErrInvalidConfig, c.name, c.d)
		}
	}
	u := &Upstream{
		limiter:  limiter,
		store:    cfg.Store,
		parsers:  cfg.Parsers,
		maxWait:  orDefault(cfg.MaxWait, DefaultMaxWait),
		maxPause: orDefault(cfg.MaxPause, DefaultMaxPause),
		forget:   orDefault(cfg.Forget, DefaultForget),
		limited:  orDefault(cfg.LimitedPause, DefaultLimitedPause),
		jitter:   !cfg.NoJitter,
		observer: cfg.Observer,
		now:      time.Now,
		sleep:    pace.Sleep,
		rand:     pace.Jitter,
	}
	if cfg.Clock != nil {
		u.now = cfg.Clock.Now
	}
	if nilcheck.IsNil(u.store) {
		u.store = NewMemoryStore(cfg.Clock)
	}
	unit := cfg.Unit
	if unit == "requests" {
		unit = ""
	}
	for i := 0; i < len(unit); i++ {
		if c := unit[i]; c <= ' ' || c > '~' {
			return nil, fmt.Errorf("%w: outbound: Config.Unit %q must be printable ASCII without spaces", ratelimit.ErrInvalidConfig, cfg.Unit)
		}
	}
	if unit != "" {
		u.suffix = " qu=" + unit
	}
	if u.parsers == nil {
		u.parsers = []Parser{IETFFieldsIn(unit), RetryAfter, VendorFields}
	}
	for i, p := range u.parsers {
		if p == nil {
			return nil, fmt.Errorf("%w: outbound: Config.Parsers[%d] is nil", ratelimit.ErrInvalidConfig, i)
		}
	}
	if !cfg.IgnorePolicies {
		own, err := ownPolicy(limiter)
		if err != nil {
			return nil, err
		}
		u.own, u.learns = own, true
	}
	return u, nil
}

// probePolicy is the limit New puts in a probe's context to find the
// policies that read LearnedPolicy: a value no limiter is likely to have
// of its own, that every kind but the calendar window accepts.
var probePolicy = ratelimit.Policy{Limit: 7, Window: 7*time.Hour + 7*time.Second}

// ownPolicy returns the tightest of the policies of limiter that read
// LearnedPolicy, as they are with no limit learned, having checked that
// some policy reads it: a Composite whose one part learns is lowered by
// that part's own policy, not by the others'.
func ownPolicy(limiter ratelimit.Limiter) (ratelimit.Policy, error) {
	d, ok := limiter.(ratelimit.Decider)
	if !ok {
		return ratelimit.Policy{}, fmt.Errorf("%w: outbound: New: a %T does not tell its policies (ratelimit.Decider), so a limit the upstream states cannot be kept below them; set Config.IgnorePolicies to learn pauses only", ratelimit.ErrInvalidConfig, limiter)
	}
	var probed atomic.Bool
	plain := context.WithValue(context.Background(), learnedKey{}, &learnedValue{probe: &probed})
	own, err := d.Policies(plain, probeKey)
	if err != nil {
		return ratelimit.Policy{}, fmt.Errorf("outbound: New: the limiter's policies: %w", err)
	}
	if !probed.Load() {
		return ratelimit.Policy{}, fmt.Errorf("%w: outbound: New: the limiter does not read the limits an upstream states: build it WithPolicyFunc(outbound.LearnedPolicy), or set Config.IgnorePolicies to learn pauses only", ratelimit.ErrInvalidConfig)
	}
	learning, err := d.Policies(context.WithValue(context.Background(), learnedKey{}, &learnedValue{policy: probePolicy}), probeKey)
	if err != nil {
		return ratelimit.Policy{}, fmt.Errorf("%w: outbound: New: the limiter refuses a limit an upstream could state (a calendar window takes calendar periods only); set Config.IgnorePolicies to learn pauses only: %w", ratelimit.ErrInvalidConfig, err)
	}
	var tightest ratelimit.Policy
	if len(learning) == len(own) {
		for i := range own {
			if learning[i].Policy == probePolicy && own[i].Policy != probePolicy && !own[i].InFlight {
				tightest = tighter(tightest, own[i].Policy)
			}
		}
	}
	if tightest.Limit <= 0 || tightest.Window <= 0 {
		return ratelimit.Policy{}, fmt.Errorf("%w: outbound: New: the limiter has no rate a stated limit could lower (the policies that read it limit calls in flight, or state no limit): set Config.IgnorePolicies to learn pauses only", ratelimit.ErrInvalidConfig)
	}
	return tightest, nil
}

// orDefault returns d, or def for d == 0.
func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// errNilUpstream is the error of a call on a nil or zero-value Upstream.
var errNilUpstream = fmt.Errorf("%w: outbound: a nil or zero-value Upstream; build one with New", ratelimit.ErrInvalidConfig)

// Permit is a call Admit let through: tell its answer to Observe. Its
// zero value is no permit.
type Permit struct {
	partition string
	cost      int
	policy    ratelimit.Policy // the learned limit the limiter applied, or zero
	state     State            // the partition's, read before the call
}

// Partition returns the partition the call was admitted in.
func (p Permit) Partition() string { return p.partition }

// Cost returns the units the call took from the limiter.
func (p Permit) Cost() int { return p.cost }

// Admit waits until the limiter allows cost units for partition and the
// partition is not paused, and returns the call's Permit: send the call,
// then give its answer to Observe. Each sleep is jittered (see
// Config.NoJitter) and ends early when ctx ends.
//
// cost is at least 1: a call of cost 0 would be sent without taking from
// the budget, and fails, unsent, with an error wrapping
// ratelimit.ErrInvalidCost. A call that would wait past Config.MaxWait,
// or past ctx's deadline, is not made to wait in vain: Admit returns at once an error wrapping
// ErrLimited (and context.DeadlineExceeded for the deadline), and takes
// nothing. It returns ctx's error when ctx ends during a sleep, and the
// limiter's error when it fails (a cost above its limit, a Redis
// failure), wrapped. A Store that fails is reported to the Observer
// (StoreFailed) and the call goes on as if nothing were learned: the
// limiter still holds the budget.
func (u *Upstream) Admit(ctx context.Context, partition string, cost int) (Permit, error) {
	return u.admit(ctx, partition, cost, 0)
}

// admit is Admit, with a pause of at least floor before the call, whatever
// the store says: the one a retried call's answer set.
func (u *Upstream) admit(ctx context.Context, partition string, cost int, floor time.Duration) (Permit, error) {
	if u == nil || u.limiter == nil {
		return Permit{}, errNilUpstream
	}
	if ctx == nil {
		return Permit{}, fmt.Errorf("%w: outbound: Admit: nil context", ratelimit.ErrInvalidConfig)
	}
	if cost < 1 {
		// A limiter lets a cost of 0 through as a peek, taking nothing:
		// the call would be sent outside the budget.
		return Permit{}, u.refuse(partition, time.Time{}, fmt.Errorf("%w: outbound: a call's cost of %d; every call costs at least 1 unit", ratelimit.ErrInvalidCost, cost))
	}
	// start is read at the first wait only: a call that does not wait
	// reads no clock here.
	var start time.Time
	slept := false
	wait := func(d time.Duration) error {
		if !slept {
			start, slept = u.now(), true
		}
		if err := u.wait(ctx, start, d); err != nil {
			return u.refuse(partition, start, err)
		}
		return nil
	}
	for {
		st, err := u.store.Load(ctx, u.stored(partition))
		if err != nil {
			if ctx.Err() != nil {
				return Permit{}, u.refuse(partition, start, fmt.Errorf("outbound: %w", ctx.Err()))
			}
			u.report(Event{Kind: StoreFailed, Partition: partition, Err: err})
			st = State{}
		}
		if pause := max(st.Pause, floor); pause > 0 {
			floor = 0
			if err := wait(pause); err != nil {
				return Permit{}, err
			}
			continue
		}
		policy := u.learned(st.Policy)
		res, err := u.limiter.Allow(withLearned(ctx, policy), partition, cost)
		if err != nil {
			return Permit{}, u.refuse(partition, start, fmt.Errorf("outbound: the limiter: %w", err))
		}
		if res.Allowed {
			if slept && u.observer != nil {
				u.observer(Event{Kind: Waited, Partition: partition, Wait: max(u.now().Sub(start), 0)})
			}
			return Permit{partition: partition, cost: cost, policy: policy, state: st}, nil
		}
		if err := wait(max(res.RetryAfter, minWait)); err != nil {
			return Permit{}, err
		}
	}
}

// stored returns the name partition's state is kept under in the store:
// partition, followed by the unit unless the limiter counts calls.
func (u *Upstream) stored(partition string) string {
	if u.suffix == "" {
		return partition
	}
	return partition + u.suffix
}

// learned returns the limit the limiter applies for a partition whose
// upstream stated stated: stated lowered to no more than the limiter's
// own, or the zero Policy when that is the limiter's own or nothing is
// learned.
func (u *Upstream) learned(stated ratelimit.Policy) ratelimit.Policy {
	if !u.learns || stated == (ratelimit.Policy{}) {
		return ratelimit.Policy{}
	}
	p := tighter(u.own, stated)
	if p == u.own {
		return ratelimit.Policy{}
	}
	return p
}

// wait sleeps d and a jitter, unless the call, which started waiting at
// start, would then have waited past MaxWait or past ctx's deadline: then
// it returns an error wrapping ErrLimited at once (see room). The jitter
// is cut so that the sleep ends by both, and the sum cannot overflow: it
// is at most what is left of MaxWait.
func (u *Upstream) wait(ctx context.Context, start time.Time, d time.Duration) error {
	left, err := u.room(ctx, max(u.now().Sub(start), 0), d)
	if err != nil {
		return err
	}
	sleep := d
	if u.jitter {
		sleep += min(u.rand(min(d/jitterFraction, maxJitter)), left-d)
	}
	if err := u.sleep(ctx, sleep); err != nil {
		return fmt.Errorf("outbound: waiting %v: %w", d, err)
	}
	return nil
}

// room returns the most a call that has waited waited may still wait,
// by MaxWait and ctx's deadline, having checked that a wait of d fits it:
// otherwise it returns an error wrapping ErrLimited (and
// context.DeadlineExceeded when the deadline is what d passes).
func (u *Upstream) room(ctx context.Context, waited, d time.Duration) (time.Duration, error) {
	if u.maxWait < 0 {
		return 0, fmt.Errorf("%w: %v to wait, and Config.MaxWait allows no wait", ErrLimited, d)
	}
	left := u.maxWait - waited
	if d > left {
		return 0, fmt.Errorf("%w: %v more to wait after %v, past Config.MaxWait of %v", ErrLimited, d, waited, u.maxWait)
	}
	if deadline, ok := ctx.Deadline(); ok {
		untilDeadline := deadline.Sub(u.now())
		if d > untilDeadline {
			return 0, fmt.Errorf("%w: %v to wait, past the call's deadline in %v: %w", ErrLimited, d, max(untilDeadline, 0), context.DeadlineExceeded)
		}
		left = min(left, untilDeadline)
	}
	return left, nil
}

// refuse reports the refusal of a call that waited since start (the zero
// time: it did not wait), and returns err.
func (u *Upstream) refuse(partition string, start time.Time, err error) error {
	if u.observer != nil {
		var waited time.Duration
		if !start.IsZero() {
			waited = max(u.now().Sub(start), 0)
		}
		u.observer(Event{Kind: Refused, Partition: partition, Wait: waited, Err: err})
	}
	return err
}

// report tells the observer of e, if there is one.
func (u *Upstream) report(e Event) {
	if u.observer != nil {
		u.observer(e)
	}
}

// Observe reads the answer to the call of p with the Upstream's parsers
// and keeps what it teaches in the Store, for every replica that shares
// it, and returns the Lesson as kept: a Limited answer (a 429) pauses the
// partition for the pause it tells, or Config.LimitedPause; a pause is at
// most Config.MaxPause; a limit the upstream states is kept for
// Config.Forget (unless IgnorePolicies), and the limiter applies it,
// lowered to no more than its own, from the next call on. Writes to the
// store are not cut short by ctx's end (ctx's values are kept), so that
// a caller that gives up on the answer still passes its lesson on; a
// store that fails is reported to the Observer, and the lesson lost.
func (u *Upstream) Observe(ctx context.Context, p Permit, a Answer) Lesson {
	if u == nil || u.limiter == nil {
		return Lesson{}
	}
	if a.Now.IsZero() {
		a.Now = u.now()
	}
	var l Lesson
	for _, parse := range u.parsers {
		l = l.merge(parse(a))
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if l.Limited {
		u.report(Event{Kind: UpstreamLimited, Partition: p.partition, Status: a.Status})
		if l.Pause == 0 {
			l.Pause = u.limited
		}
	}
	l.Pause = min(l.Pause, u.maxPause)
	if l.Pause > 0 {
		if err := u.store.Pause(context.WithoutCancel(ctx), u.stored(p.partition), l.Pause); err != nil {
			u.report(Event{Kind: StoreFailed, Partition: p.partition, Err: err})
		} else {
			u.report(Event{Kind: Paused, Partition: p.partition, Pause: l.Pause})
		}
	}
	if u.learns && l.Policy != (ratelimit.Policy{}) {
		u.keep(ctx, p, l.Policy)
	} else {
		l.Policy = ratelimit.Policy{}
	}
	return l
}

// keep stores stated, the limit an answer to p's call stated, unless the
// store held it already, when p's call was admitted, for more than half of
// Config.Forget, and reports it as Learned when the store says it changed
// the partition's limit (once, however many calls in flight state it) and
// the limiter then applies another limit than before: a stated limit at
// or above the limiter's own, where none was, changes nothing applied.
func (u *Upstream) keep(ctx context.Context, p Permit, stated ratelimit.Policy) {
	if stated == p.state.Policy && p.state.PolicyLeft > u.forget/2 {
		return
	}
	changed, err := u.store.Learn(context.WithoutCancel(ctx), u.stored(p.partition), stated, u.forget)
	if err != nil {
		u.report(Event{Kind: StoreFailed, Partition: p.partition, Err: err})
		return
	}
	if changed && u.learned(stated) != u.learned(p.state.Policy) {
		u.report(Event{Kind: Learned, Partition: p.partition, Policy: stated})
	}
}

// errNotAdjuster is the error of Settle on an Upstream whose limiter
// cannot settle.
var errNotAdjuster = errors.New("outbound: Settle: the limiter is not a ratelimit.Adjuster")

// Settle replaces the units p's call took by cost, its true cost (see
// ratelimit.Adjuster's Settle), with the limit the call was admitted by.
// It returns an error wrapping ratelimit.ErrInvalidConfig when the
// limiter cannot settle, and the limiter's error otherwise, and reports
// either to the Observer (SettleFailed).
func (u *Upstream) Settle(ctx context.Context, p Permit, cost int) error {
	if u == nil || u.limiter == nil {
		return errNilUpstream
	}
	err := u.settle(ctx, p, cost)
	if err != nil {
		u.report(Event{Kind: SettleFailed, Partition: p.partition, Err: err})
	}
	return err
}

// settle is Settle without the report.
func (u *Upstream) settle(ctx context.Context, p Permit, cost int) error {
	adj, ok := u.limiter.(ratelimit.Adjuster)
	if !ok {
		return fmt.Errorf("%w: %w", ratelimit.ErrInvalidConfig, errNotAdjuster)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if _, err := adj.Settle(withLearned(ctx, p.policy), p.partition, p.cost, cost); err != nil {
		return fmt.Errorf("outbound: Settle: %w", err)
	}
	return nil
}
