package ratelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit/internal/redisbatch"
	"github.com/redis/go-redis/v9"
)

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
// Each key is one STRING at its Redis key (see KeyPrefix), "start:count":
// the start of the window it counted in (µs of Unix time) and its count, with a PX TTL
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
	redisShell
	cal   Calendar
	clock Clock
	zones *zoneNames // its own zone's and its keys' policies', each with the windows last seen in it
}

// NewRedisCalendarWindow returns a calendar window of limit per window of
// cal per key kept in Redis through client: a *redis.Client,
// *redis.ClusterClient, *redis.Ring or failover client.
//
// It accepts WithKeyPrefix, WithoutCoalescing, WithCallerClock,
// WithPolicyFunc, WithMaxDebt, WithMaxSettle, WithMaxKeyLength,
// WithKeysShown, WithHooks, WithName, and WithClock, which gives the clock
// the windows' bounds are computed from (the system clock by default; the
// decision itself uses the server's TIME). By default the key prefix is
// DefaultKeyPrefix + "cal:<limit>:<period>:<zone>:" (see KeyPrefix). Its
// Policy is limit per the period's nominal length (see
// CalendarPeriod.Nominal). Built WithPolicyFunc, each key's policy may give
// it a zone of its own (Policy.Zone), in which its windows are cut. It
// returns an error wrapping ErrInvalidConfig for a nil client, a limit <= 0
// or above 2^52 (beyond which the script cannot count exactly), a Calendar
// whose Period is not one of the constants or whose FirstWeekday is not a
// weekday, or whose Location its keys cannot name surely (see Calendar; the
// error names the zone, and for time.Local says to pass
// time.LoadLocation("Area/City")), or a nil or invalid option.
func NewRedisCalendarWindow(client redis.Scripter, limit int, cal Calendar, opts ...RedisOption) (*RedisCalendarWindow, error) {
	const kind = "NewRedisCalendarWindow"
	if err := cal.check(kind); err != nil {
		return nil, err
	}
	policy := Policy{Limit: limit, Window: cal.Period.Nominal()}
	if _, _, err := checkRedisCalendar(kind, policy); err != nil {
		return nil, err
	}
	zones, err := newZoneNames(cal, false)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, kind, err)
	}
	ownSeg := zones.own.segs[cal.Period]
	r, err := newRedisLimiter(client, redisParams{
		constructor:   kind,
		name:          "Redis calendar window",
		k:             calendarWindowKind{},
		check:         checkRedisCalendar,
		defaultPrefix: calendarPrefix,
		limit:         limit,
		param:         int64(cal.Period),
		tail:          fmt.Sprintf("%d:%s", limit, ownSeg),
		keyedTail:     fmt.Sprintf("%d:%s:", limit, cal.Period),
		ownSeg:        ownSeg,
		clocked:       true,
	}, opts)
	if err != nil {
		return nil, err
	}
	if r.policyFunc != nil {
		r.policyFunc.zones = zones
		r.segColons = 2 // each key's "<period>:<zone>:" (see redisKey)
	}
	cfg, err := applyRedisOptions(kind, onRedisClocked, opts)
	if err != nil {
		return nil, err
	}
	// Every request carries the limit of its window.
	r.send = newSender(client, nil, 1, r.send.Coalesces(), r.clock, redisbatch.CalendarWindow)
	// The windows' bounds come from WithClock's clock; without it, from the
	// caller's clock the limiter decides on, if any.
	clock := cfg.clock
	if !cfg.clockSet && r.clock != nil {
		clock = r.clock
	}
	return &RedisCalendarWindow{redisShell: redisShell{r: r}, cal: cal, clock: clock, zones: zones}, nil
}

// errRedisCalendarNotBuilt is the error of a call on a nil or zero-value
// *RedisCalendarWindow.
var errRedisCalendarNotBuilt = notBuilt("RedisCalendarWindow")

// built reports whether w was made by NewRedisCalendarWindow.
func (w *RedisCalendarWindow) built() bool { return w != nil && w.r.client != nil }

// span returns the window of period in zone z that holds the client
// clock's now.
func (w *RedisCalendarWindow) span(period CalendarPeriod, z *calendarZone) *redisCalendarSpan {
	now := w.clock.Now()
	ns := now.UnixNano()
	slot := &z.rcur[period]
	if sp := slot.Load(); sp != nil && ns >= sp.start && ns < sp.end {
		return sp
	}
	c := z.calendar(period)
	start, end := c.window(now)
	prev, _ := c.window(start.Add(-1))
	_, next := c.window(end)
	bounds := [4]int64{prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro()}
	sp := &redisCalendarSpan{start: start.UnixNano(), end: end.UnixNano(), own: redisbatch.NewCalendarLimit(int64(w.r.limit), bounds)}
	sp.policies = policyList(Policy{Limit: w.r.limit, Window: end.Sub(start), Zone: w.reported(z)}, w.r.obs.own)
	if w.r.policyFunc != nil {
		sp.limits = redisbatch.NewCalendarLimitCache(bounds)
	}
	if old := slot.Load(); old == nil || old.start <= sp.start {
		slot.Store(sp)
	}
	return sp
}

// limitOf returns the script's limit of limit in the window sp, of
// period.
func (w *RedisCalendarWindow) limitOf(sp *redisCalendarSpan, limit int, period CalendarPeriod) *redisbatch.Limit {
	if limit == w.r.limit {
		return sp.own
	}
	return sp.limits.Get(int64(limit), int64(period))
}

// policiesOf returns the one policy of a call of limit in the window sp,
// of zone z.
func (w *RedisCalendarWindow) policiesOf(sp *redisCalendarSpan, limit int, z *calendarZone) []NamedPolicy {
	if limit == w.r.limit {
		return sp.policies
	}
	return policyList(Policy{Limit: limit, Window: time.Duration(sp.end - sp.start), Zone: w.reported(z)}, w.r.obs.own)
}

// reported returns the Zone a policy of zone z reports: "" for the
// limiter's own zone, the name a key's policy gave otherwise.
func (w *RedisCalendarWindow) reported(z *calendarZone) string {
	if z == w.zones.own {
		return ""
	}
	return z.given
}

// rate returns the limit, period and zone of key's calls: the limiter's
// own, or the key's for a limiter built WithPolicyFunc (the limiter's own
// on an error).
func (w *RedisCalendarWindow) rate(ctx context.Context, key string) (int, CalendarPeriod, *calendarZone, error) {
	if w.r.policyFunc == nil {
		return w.r.limit, w.cal.Period, w.zones.own, nil
	}
	p, limit, period, err := w.r.policyFunc.resolve(ctx, key)
	return int(limit), CalendarPeriod(period), w.zoneOf(p, err), err
}

// zoneOf returns the zone of p, a key's policy resolved with err: the
// limiter's own when p has no Zone of its own or on an error (a zone that
// cannot be read or named fails the policy's resolve first).
func (w *RedisCalendarWindow) zoneOf(p Policy, err error) *calendarZone {
	if err != nil || p.Zone == "" {
		return w.zones.own
	}
	if z, err := w.zones.zone(p.Zone); err == nil {
		return z
	}
	return w.zones.own
}

// redisKey returns the Redis key of key for a call of period in zone z:
// the prefix, for a limiter built WithPolicyFunc the seg of the period and
// zone (the prefix of any other has its own), and key in a hash tag (see
// redisbatch.StoredKey).
func (w *RedisCalendarWindow) redisKey(key string, period CalendarPeriod, z *calendarZone) string {
	seg := ""
	if w.r.policyFunc != nil {
		seg = z.segs[period]
	}
	return redisbatch.StoredKey(w.r.prefix, seg, key)
}

// decide decides n for key and returns the policies of its Decision and,
// for a window that counts nothing, the time until it ends, as the script
// tells it (0 otherwise).
func (w *RedisCalendarWindow) decide(ctx context.Context, key string, n int) (Result, []NamedPolicy, time.Duration, error) {
	if ctx == nil {
		return Result{Limit: w.r.limit}, w.r.obs.own, 0, fmt.Errorf("ratelimit: %s: %w", w.r.name, errNilContext)
	}
	if err := w.r.obs.keys.check(w.r.name, key); err != nil {
		return Result{Limit: w.r.limit}, w.r.obs.own, 0, err
	}
	limit, period, z, err := w.rate(ctx, key)
	if err == nil {
		err = checkCost(n, limit)
	}
	if err != nil {
		policies := w.r.obs.own
		if w.r.policyFunc != nil {
			policies = policyList(Policy{Limit: limit, Window: period.Nominal(), Zone: w.reported(z)}, w.r.obs.own)
		}
		return Result{Limit: limit}, policies, 0, err
	}
	sp := w.span(period, z)
	res, next, err := w.r.requestNext(&redisbatch.Request{Ctx: ctx, Key: w.redisKey(key, period, z), N: n, Limit: w.limitOf(sp, limit, period)}, limit)
	return res, w.policiesOf(sp, limit, z), next, err
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
	res, policies, next, err := w.decide(ctx, key, n)
	d := withNext(oneDecision(res, policies, w.r.obs.rules), next)
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
	limit, period, z, err := w.rate(ctx, key)
	return w.policiesOf(w.span(period, z), limit, z), err
}

// KeyPrefix returns what every Redis key of w starts with: the Redis key
// of key is KeyPrefix() and key in a hash tag (see the package doc, Redis
// keys), with, built WithPolicyFunc, the period and zone of the key's
// policy between the two ("<period>:<zone>:"), since a count means
// nothing in another window. The period is "minute", "hour", "day",
// "week-<first weekday>" or "month", and the zone its name in keys (see
// Calendar): "UTC", an offset such as "UTC+0900", or an IANA name such as
// "Europe/Berlin". It is DefaultKeyPrefix + "cal:<limit>:<period>:<zone>:";
// built WithPolicyFunc, DefaultKeyPrefix + "cal:keyed:<limit>:<period>:" of
// the constructor's limit and period
// (without its weekday); given WithKeyPrefix(p), p + "cal:" and, but for a
// limiter built WithPolicyFunc, "<period>:<zone>:". It is "" for a nil
// *RedisCalendarWindow.
func (w *RedisCalendarWindow) KeyPrefix() string {
	return w.shell().KeyPrefix()
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
	limit, period, z, err := w.rate(ctx, key)
	if err != nil {
		return Result{Limit: limit}, err
	}
	a, err := settleArgs(w.r.name, taken, cost, w.r.policyFunc.takenBound(limit), limit, w.r.obs.maxSettle, opts)
	if err != nil {
		return Result{Limit: limit}, err
	}
	sp := w.span(period, z)
	p := &redisbatch.Request{Ctx: ctx, Key: w.redisKey(key, period, z), N: cost - taken, Limit: w.limitOf(sp, limit, period)}
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

// reset empties key: its Redis key under its policy now, for a limiter
// built WithPolicyFunc, whose keys name their period and zone.
func (w *RedisCalendarWindow) reset(ctx context.Context, key string) error {
	if ctx == nil {
		return fmt.Errorf("ratelimit: %s: %w", w.r.name, errNilContext)
	}
	if err := w.r.obs.keys.check(w.r.name, key); err != nil {
		return err
	}
	_, period, z, err := w.rate(ctx, key)
	if err != nil {
		return err
	}
	p := &redisbatch.Request{Ctx: ctx, Key: w.redisKey(key, period, z), Op: redisbatch.Reset, Limit: w.span(period, z).own}
	_, err = w.r.request(p, w.r.limit)
	return err
}

// shell returns w's shared part; a zero one, which answers that it was
// not built, for a nil w.
func (w *RedisCalendarWindow) shell() *redisShell {
	if w == nil {
		return &redisShell{}
	}
	return &w.redisShell
}
