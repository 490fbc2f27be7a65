package ratelimit

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/redis/go-redis/v9"
)

// DefaultCalendarPrefix starts the key prefix RedisCalendarWindow uses
// unless WithKeyPrefix gives one: the default prefix is
// DefaultCalendarPrefix + "<limit>:<period>:<zone>:", for example
// "ratelimit:cal:1000:day:Europe/Berlin:", with the first weekday after
// the period for weeks ("ratelimit:cal:10:week-monday:UTC:"). Calendars
// that decide differently thus never share a key by accident; see
// KeyPrefix.
const DefaultCalendarPrefix = "ratelimit:cal:"

// RedisCalendarWindow is a counter per key in windows aligned to the wall
// clock, kept in Redis: at most limit units of work per minute, hour, day,
// week or month of a time zone (see Calendar), shared by every process
// using the same Redis.
//
// It decides as CalendarWindow does, by an embedded Lua script whose calls
// are coalesced as RedisFixedWindow's are, and the decision uses the
// server's TIME: the window a call counts in is the one that holds the
// server's time. The script has no time-zone database, so the client
// computes the boundaries: from its own clock (the system clock, or
// WithClock's) it sends the window that holds its now and the windows on
// either side (Go's time-zone rules, so every client should run with the
// same zone database), and the script picks the one that holds the
// server's time. Client and server clocks may thus disagree by up to a
// window; when the server's time is outside all three (the clocks are
// more than a window apart), the call fails with an error wrapping
// ErrBackend that says "clock skew", and nothing is written.
//
// Each key is one STRING at KeyPrefix()+key, "start:count": the start of
// the window it counted in (µs of Unix time) and its count, with a PX TTL
// until that window ends (whole ms rounded up). A count of a window that
// has ended counts 0, also during the millisecond in which Redis still
// keeps its key. A key holding anything else is left exactly as it is,
// and the call returns an error naming it and wrapping ErrCorruptState.
// After the server's clock steps back into an earlier window, a key that
// counted in a later one keeps its count until its key expires.
//
// Decide's Decision carries the key's limit and the length of the window
// the client's clock is in, which is the window the call counted in
// whenever the clocks agree. Calls with n < 0 or n > limit are answered
// without a round trip; n == 0 reads without creating the key. Redis
// errors, timeouts and malformed replies are returned wrapped.
//
// A RedisCalendarWindow is safe for concurrent use as far as its client
// is. The zero value is not usable (its Allow returns an error wrapping
// ErrInvalidConfig); create one with NewRedisCalendarWindow.
type RedisCalendarWindow struct {
	r     redisLimiter
	cal   Calendar
	clock Clock
	cur   [CalendarMonth + 1]atomic.Pointer[redisCalendarSpan] // per period, the window last seen
}

// redisCalendarSpan is one window of a RedisCalendarWindow's calendar on
// its client's clock, with the script's limits of it. It is immutable but
// for its cache.
type redisCalendarSpan struct {
	start, end int64             // ns of Unix time
	own        *redisbatch.Limit // of the limiter's own limit
	// limits holds the script's limits of this window of the keys'
	// limits, for a limiter built WithPolicyFunc; nil without.
	limits   *redisbatch.LimitCache
	policies []NamedPolicy // of the limiter's own limit in this window
}

// NewRedisCalendarWindow returns a calendar window of limit per window of
// cal per key kept in Redis through client: a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client.
//
// It accepts WithKeyPrefix, WithoutCoalescing, WithPolicyFunc,
// WithMaxDebt, WithHooks, WithName, and WithClock, which gives the clock
// the windows' bounds are computed from (the system clock by default; the
// decision itself uses the server's TIME). By default the key prefix is
// DefaultCalendarPrefix + "<limit>:<period>:<zone>:" (see KeyPrefix). Its
// Policy is limit per the period's nominal length (see
// CalendarPeriod.Nominal). It returns an error wrapping ErrInvalidConfig
// for a nil client, a limit <= 0 or above 2^52 (beyond which the script
// cannot count exactly), a Calendar whose Period is not one of the
// constants or whose FirstWeekday is not a weekday, or an option that does
// not apply.
func NewRedisCalendarWindow(client redis.Scripter, limit int, cal Calendar, opts ...Option) (*RedisCalendarWindow, error) {
	const kind = "NewRedisCalendarWindow"
	if err := cal.check(kind); err != nil {
		return nil, err
	}
	policy := Policy{Limit: limit, Window: cal.Period.Nominal()}
	if _, _, err := checkRedisCalendar(kind, policy); err != nil {
		return nil, err
	}
	period := cal.Period.String()
	if cal.Period == CalendarWeek {
		period += "-" + strings.ToLower(cal.FirstWeekday.String())
	}
	r, err := newRedisLimiter(client, redisParams{
		constructor:    kind,
		name:           "Redis calendar window",
		kind:           redisbatch.CalendarWindow,
		policyFuncKind: redisbatch.CalendarWindow,
		check:          checkRedisCalendar,
		defaultPrefix:  DefaultCalendarPrefix,
		limit:          limit,
		param:          int64(cal.Period),
		window:         policy.Window,
		prefixTail:     fmt.Sprintf("%d:%s:%s:", limit, period, cal.prefixName(false)),
		keyedTail:      cal.prefixName(true) + ":",
		clocked:        true,
	}, opts)
	if err != nil {
		return nil, err
	}
	cfg, err := applyOptions(kind, onRedisClocked, opts)
	if err != nil {
		return nil, err
	}
	// Every request carries the limit of its window.
	r.send = newSender(client, nil, 1, r.send.Coalesces(), r.clock)
	// The windows' bounds come from WithClock's clock; without it, from the
	// caller's clock the limiter decides on, if any.
	clock := cfg.clock
	if !cfg.clockSet && r.clock != nil {
		clock = r.clock
	}
	return &RedisCalendarWindow{r: r, cal: cal, clock: clock}, nil
}

// errRedisCalendarNotBuilt is the error of a call on a nil or zero-value
// *RedisCalendarWindow.
var errRedisCalendarNotBuilt = notBuilt("RedisCalendarWindow")

// built reports whether w was made by NewRedisCalendarWindow.
func (w *RedisCalendarWindow) built() bool { return w != nil && w.r.client != nil }

// span returns the window of period that holds the client clock's now.
func (w *RedisCalendarWindow) span(period CalendarPeriod) *redisCalendarSpan {
	now := w.clock.Now()
	ns := now.UnixNano()
	slot := &w.cur[period]
	if sp := slot.Load(); sp != nil && ns >= sp.start && ns < sp.end {
		return sp
	}
	c := w.cal
	c.Period = period
	start, end := c.window(now)
	prev, _ := c.window(start.Add(-1))
	_, next := c.window(end)
	bounds := [4]int64{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
	sp := &redisCalendarSpan{start: start.UnixNano(), end: end.UnixNano(), own: redisbatch.NewCalendarLimit(int64(w.r.limit), bounds)}
	sp.policies = policyList(Policy{Limit: w.r.limit, Window: end.Sub(start)}, w.r.obs.own)
	if w.r.policyFunc != nil {
		sp.limits = redisbatch.NewCalendarLimitCache(bounds)
	}
	if old := slot.Load(); old == nil || old.start <= sp.start {
		slot.Store(sp)
	}
	return sp
}

// limitOf returns the script's limit of limit in the window sp.
func (w *RedisCalendarWindow) limitOf(sp *redisCalendarSpan, limit int, period CalendarPeriod) *redisbatch.Limit {
	if limit == w.r.limit && period == w.cal.Period {
		return sp.own
	}
	return sp.limits.Get(int64(limit), int64(period))
}

// policiesOf returns the one policy of a call of limit in the window sp.
func (w *RedisCalendarWindow) policiesOf(sp *redisCalendarSpan, limit int) []NamedPolicy {
	if limit == w.r.limit {
		return sp.policies
	}
	return policyList(Policy{Limit: limit, Window: time.Duration(sp.end - sp.start)}, w.r.obs.own)
}

// rate returns the limit and period of key's calls: the limiter's own, or
// the key's for a limiter built WithPolicyFunc (the limiter's own on an
// error).
func (w *RedisCalendarWindow) rate(ctx context.Context, key string) (int, CalendarPeriod, error) {
	if w.r.policyFunc == nil {
		return w.r.limit, w.cal.Period, nil
	}
	_, limit, period, err := w.r.policyFunc.resolve(ctx, key)
	return int(limit), CalendarPeriod(period), err
}

// decide decides n for key and returns the policies of its Decision.
func (w *RedisCalendarWindow) decide(ctx context.Context, key string, n int) (Result, []NamedPolicy, error) {
	if ctx == nil {
		return Result{Limit: w.r.limit}, w.r.obs.own, fmt.Errorf("ratelimit: %s: %w", w.r.name, errNilContext)
	}
	if err := w.r.obs.keys.check(w.r.name, key); err != nil {
		return Result{Limit: w.r.limit}, w.r.obs.own, err
	}
	limit, period, err := w.rate(ctx, key)
	if err == nil {
		err = checkCost(n, limit)
	}
	if err != nil {
		policies := w.r.obs.own
		if w.r.policyFunc != nil {
			policies = policyList(Policy{Limit: limit, Window: period.Nominal()}, w.r.obs.own)
		}
		return Result{Limit: limit}, policies, err
	}
	sp := w.span(period)
	res, err := w.r.request(&redisbatch.Request{Ctx: ctx, Key: w.r.prefix + key, N: n, Limit: w.limitOf(sp, limit, period)}, limit)
	return res, w.policiesOf(sp, limit), err
}

// Allow counts n against key's count in the window open now in Redis if
// that keeps it within the limit. See Limiter for the contract. ctx bounds
// the round trip; a nil ctx is an error. On a nil or zero-value w, Allow
// returns an error wrapping ErrInvalidConfig.
func (w *RedisCalendarWindow) Allow(ctx context.Context, key string, n int) (Result, error) {
	d, err := w.Decide(ctx, key, n)
	return d.Result, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", of the key's limit (the
// limiter's, or the key's for a limiter built WithPolicyFunc) and the
// length of the window the client's clock is in.
func (w *RedisCalendarWindow) Decide(ctx context.Context, key string, n int) (Decision, error) {
	if !w.built() {
		return Decision{}, errRedisCalendarNotBuilt
	}
	var start time.Time
	if w.r.obs.hooks != nil {
		start = time.Now()
	}
	res, policies, err := w.decide(ctx, key, n)
	d := oneDecision(res, policies, w.r.obs.rules)
	if w.r.obs.hooks != nil {
		w.r.obs.report(key, n, d, err, time.Since(start))
	}
	return d, err
}

// Policies returns the one policy of key's calls, named "default": the
// key's limit and the length of the window the client's clock is in, as
// Decide would report it now. It asks nothing of Redis, and fails only on
// a nil or zero-value *RedisCalendarWindow, or when the key's policy
// cannot be read.
func (w *RedisCalendarWindow) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if !w.built() {
		return nil, errRedisCalendarNotBuilt
	}
	limit, period, err := w.rate(ctx, key)
	return w.policiesOf(w.span(period), limit), err
}

// KeyPrefix returns the string w puts before every key: the Redis key of
// key is exactly KeyPrefix() + key. It is the one WithKeyPrefix gave, or
// else DefaultCalendarPrefix + "<limit>:<period>:<zone>:" (the period
// "minute", "hour", "day", "week-<first weekday>" or "month", the zone its
// name, such as "UTC" or "Europe/Berlin", braces replaced by "_"). Built
// WithPolicyFunc (and without WithKeyPrefix), it is DefaultCalendarPrefix
// + "keyed:<zone>:<first weekday>:", whatever the constructor's limit and
// period. It is "" for a nil *RedisCalendarWindow.
func (w *RedisCalendarWindow) KeyPrefix() string {
	if w == nil {
		return ""
	}
	return w.r.prefix
}

// Policy returns the limit and the nominal length of the calendar's period
// (see CalendarPeriod.Nominal); the zero Policy for a nil w.
func (w *RedisCalendarWindow) Policy() Policy {
	if w == nil {
		return Policy{}
	}
	return Policy{Limit: w.r.limit, Window: w.cal.Period.Nominal()}
}

// Calendar returns the calendar the windows are cut by, its Location
// never nil; the zero Calendar for a nil *RedisCalendarWindow.
func (w *RedisCalendarWindow) Calendar() Calendar {
	if w == nil {
		return Calendar{}
	}
	c := w.cal
	c.Location = c.location()
	return c
}

// Refund gives n units back to key's count in the window open now, if the
// units were taken in it. See Adjuster and TakenAt; ctx bounds the round
// trip.
func (w *RedisCalendarWindow) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return w.adjust(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle replaces taken by cost in key's count in the window open now, as
// CalendarWindow's Settle does. See Adjuster; ctx bounds the round trip.
func (w *RedisCalendarWindow) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return w.adjust(ctx, AdjustSettle, key, taken, cost, opts)
}

// adjust applies a Refund or Settle (op) of taken and cost to key, and
// reports it to the adjust hooks, if any.
func (w *RedisCalendarWindow) adjust(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if !w.built() {
		return Result{}, errRedisCalendarNotBuilt
	}
	if w.r.obs.adjust == nil {
		return w.settle(ctx, key, taken, cost, opts)
	}
	start := time.Now()
	res, err := w.settle(ctx, key, taken, cost, opts)
	w.r.obs.reportAdjust(op, key, taken, cost, opts, res, err, time.Since(start))
	return res, err
}

// settle applies a Settle of taken and cost to key. See Adjuster.
func (w *RedisCalendarWindow) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if ctx == nil {
		return Result{Limit: w.r.limit}, fmt.Errorf("ratelimit: %s: %w", w.r.name, errNilContext)
	}
	if err := w.r.obs.keys.check(w.r.name, key); err != nil {
		return Result{Limit: w.r.limit}, err
	}
	limit, period, err := w.rate(ctx, key)
	if err != nil {
		return Result{Limit: limit}, err
	}
	a, err := settleArgs(w.r.name, taken, cost, w.r.policyFunc.takenBound(limit), opts)
	if err != nil {
		return Result{Limit: limit}, err
	}
	sp := w.span(period)
	p := &redisbatch.Request{Ctx: ctx, Key: w.r.prefix + key, N: cost - taken, Limit: w.limitOf(sp, limit, period)}
	settleRequest(w.r.send, p, a, w.r.clock)
	if a.hasTaken {
		p.Settlement.Age = w.age(a.takenAt)
	}
	p.Settlement.MaxDebt = w.r.debt.units(int64(limit))
	return w.r.request(p, limit)
}

// age returns the µs from takenAt to now on the clock the windows are
// read from, rounded up; 0 for a takenAt to come.
func (w *RedisCalendarWindow) age(takenAt time.Time) int64 {
	age := max(w.clock.Now().Sub(takenAt), 0)
	us := int64(age / time.Microsecond)
	if age%time.Microsecond != 0 {
		us++
	}
	return us
}

// Reset forgets key's count, deleting its Redis key. See Adjuster.
func (w *RedisCalendarWindow) Reset(ctx context.Context, key string) error {
	if !w.built() {
		return errRedisCalendarNotBuilt
	}
	var start time.Time
	if w.r.obs.adjust != nil {
		start = time.Now()
	}
	err := w.reset(ctx, key)
	if w.r.obs.adjust != nil {
		w.r.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, err, time.Since(start))
	}
	return err
}

// reset empties key.
func (w *RedisCalendarWindow) reset(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("ratelimit: %s: %w", w.r.name, errNilContext)
	}
	if err := w.r.obs.keys.check(w.r.name, key); err != nil {
		return err
	}
	p := &redisbatch.Request{Ctx: ctx, Key: w.r.prefix + key, Op: redisbatch.Reset, Limit: w.span(w.cal.Period).own}
	_, err := w.r.request(p, w.r.limit)
	return err
}
