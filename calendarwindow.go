package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// CalendarWindow is an in-process counter per key in windows aligned to
// the wall clock: at most limit units of work per minute, hour, day, week
// or month of a time zone (see Calendar for where each window starts and
// ends).
//
// Every key's window is the calendar's window open now, whatever time the
// key's first request came: a key's count resets at each boundary, for
// all keys at once. Allow(n) is allowed iff the count of the key in the
// window open now plus n is at most limit. Denials do not count, and a
// denial's RetryAfter is the time until the window ends; ResetAfter is the
// time until the window ends when the key has counted something in it, 0
// otherwise; Remaining is limit minus the count. Around a boundary a key
// can get up to 2×limit through in a short time.
//
// The wall time is the clock's (WithClock): the reading the limiter was
// built with plus the time its clock has measured since. A clock that
// steps back makes time stand still for the keys it has decided until
// it catches up, as for FixedWindow: no window ends early, and the waits
// include the catching up.
//
// Memory is held for keys that counted something in a window, until
// about a window after it ends, with no background goroutine. The bounds
// of the window open now are kept, so a call does no time-zone work until
// the window ends.
//
// A CalendarWindow is safe for concurrent use. The zero value is not
// usable; create one with NewCalendarWindow.
type CalendarWindow struct {
	base       clockBase
	cal        Calendar
	limit      int64
	windows    *keyTable[openWindow]
	zones      *zoneNames // its own zone's and its keys' policies', each with the windows last open in it
	obs        observer
	policyFunc *policyFunc // nil unless built WithPolicyFunc
	debt       debtCap
}

// calendarMaxNow is the latest time a CalendarWindow's shards reach: the
// window open then ends well before int64 overflows.
const calendarMaxNow = math.MaxInt64 - 2*maxSpan

// NewCalendarWindow returns an in-process calendar window of limit per
// window of cal per key. It accepts WithClock, WithPolicyFunc, WithMaxDebt,
// WithMaxSettle, WithMaxKeyLength, WithKeysShown, WithHooks and WithName.
// Its Policy is limit per the period's nominal length (see
// CalendarPeriod.Nominal); each Decision carries the length of the window
// it was decided in.
//
// It returns an error wrapping ErrInvalidConfig for a limit <= 0, a
// Calendar whose Period is not one of the constants or whose FirstWeekday
// is not a weekday, or a nil or invalid option.
func NewCalendarWindow(limit int, cal Calendar, opts ...Option) (*CalendarWindow, error) {
	const kind = "NewCalendarWindow"
	cfg, err := applyOptions(kind, opts)
	if err != nil {
		return nil, err
	}
	if err := cal.check(kind); err != nil {
		return nil, err
	}
	policy := Policy{Limit: limit, Window: cal.Period.Nominal()}
	if _, _, err := checkLocalCalendar(kind, policy); err != nil {
		return nil, err
	}
	t, err := newPolicyFunc(cfg, "CalendarWindow", policy, checkLocalCalendar)
	if err != nil {
		return nil, err
	}
	zones, err := newZoneNames(cal, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, kind, err)
	}
	if t != nil {
		t.zones = zones
	}
	w := &CalendarWindow{
		base:       newClockBase(cfg.clock),
		cal:        cal,
		limit:      int64(limit),
		windows:    newKeyTable[openWindow](int64(cal.Period.Nominal())).outliving(windowEnd),
		zones:      zones,
		obs:        newObserver(cfg, kind, policy, rule{calendar: true}),
		policyFunc: t,
		debt:       cfg.maxDebt,
	}
	return w, nil
}

// checkLocalCalendar checks a calendar window's policy in process: its
// param is its period, which Window names by its nominal length.
func checkLocalCalendar(kind string, p Policy) (int64, int64, error) {
	return checkCalendarPolicy(kind, p, math.MaxInt64)
}

// checkRedisCalendar checks a calendar window's policy on Redis, whose
// script counts exactly up to 2^52: its param is its period.
func checkRedisCalendar(kind string, p Policy) (int64, int64, error) {
	return checkCalendarPolicy(kind, p, maxRedisLimit)
}

// checkCalendarPolicy checks a calendar window's policy of a limit up to
// most: its param is its period, which Window names by its nominal
// length.
func checkCalendarPolicy(kind string, p Policy, most int64) (int64, int64, error) {
	if err := checkLimit(kind, "limit", p.Limit, most); err != nil {
		return 0, 0, err
	}
	period := periodOfNominal(p.Window)
	if period == 0 {
		return 0, 0, fmt.Errorf("%w: %s: window %v is not a calendar period; want 1m0s (minute), 1h0m0s (hour), 24h0m0s (day), 168h0m0s (week) or 720h0m0s (month)", ErrInvalidConfig, kind, p.Window)
	}
	return int64(p.Limit), int64(period), nil
}

// Allow counts n against key's count in the window open now if that keeps
// it within the limit. See Limiter for the contract. ctx goes to the
// PolicyFunc, if any (WithPolicyFunc); the decision never blocks.
func (w *CalendarWindow) Allow(ctx context.Context, key string, n int) (Result, error) {
	res, _, _, err := w.decide(ctx, key, n)
	return res, err
}

// Decide decides as Allow does and returns the whole Decision (see
// Decider): its one policy is named "default", of the key's limit (the
// limiter's, or the key's for a limiter built WithPolicyFunc) and the
// length of the window the call was decided in (23h or 25h for a day
// across a daylight-saving change, 29 days for a leap February), so that
// the policy and ResetAfter a client is told are those of the window
// open now.
func (w *CalendarWindow) Decide(ctx context.Context, key string, n int) (Decision, error) {
	res, policies, next, err := w.decide(ctx, key, n)
	if err == errCalendarNotBuilt {
		return Decision{}, err
	}
	return withNext(oneDecision(res, policies, w.obs.rules), next), err
}

// Policies returns the one policy of key's calls, named "default": the
// key's limit (the limiter's, or the key's for a limiter built
// WithPolicyFunc) and the length of the window open now on the limiter's
// clock, as Decide would report it now. It fails only on a nil or
// zero-value *CalendarWindow, or when the key's policy cannot be read.
func (w *CalendarWindow) Policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if w == nil || w.windows == nil {
		return nil, errCalendarNotBuilt
	}
	reading := max(w.base.elapsed(), 0)
	if w.policyFunc == nil {
		return w.span(w.cal.Period, w.zones.own, reading).policies, nil
	}
	limit, period, z, err := w.policyFuncRate(ctx, key)
	return w.policiesOf(limit, w.span(period, z, reading), z), err
}

// policiesOf returns the one policy of a call of limit decided in the
// window sp of zone z: sp's own, shared, for the limiter's limit.
func (w *CalendarWindow) policiesOf(limit int64, sp *calendarSpan, z *calendarZone) []NamedPolicy {
	if limit == w.limit {
		return sp.policies
	}
	return policyList(Policy{Limit: int(limit), Window: sp.length(), Zone: w.reported(z)}, w.obs.own)
}

// reported returns the Zone a policy of zone z reports: "" for the
// limiter's own zone, the name a key's policy gave otherwise.
func (w *CalendarWindow) reported(z *calendarZone) string {
	if z == w.zones.own {
		return ""
	}
	return z.given
}

// zoneOf returns the zone of p, a policy of the limiter's (its own, or a
// key's): the limiter's own for a p without Zone, or one that cannot be
// read or named (which a key's policy cannot have).
func (w *CalendarWindow) zoneOf(p Policy) *calendarZone {
	if z, err := w.zones.zone(p.Zone); err == nil {
		return z
	}
	return w.zones.own
}

// tableKey returns the key of key's window in the table for a call of
// period in zone z: key, or, built WithPolicyFunc, the seg of the period
// and zone then key, so that a key counts apart in each period and zone
// its policy gives it, as on Redis.
func (w *CalendarWindow) tableKey(key string, period CalendarPeriod, z *calendarZone) string {
	if w.policyFunc == nil {
		return key
	}
	return z.segs[period] + key
}

// errCalendarNotBuilt is the error of a call on a nil or zero-value
// *CalendarWindow.
var errCalendarNotBuilt = notBuilt("CalendarWindow")

// span returns the window of period in zone z open at the reading now,
// from the cache when it holds it.
func (w *CalendarWindow) span(period CalendarPeriod, z *calendarZone, now int64) *calendarSpan {
	slot := &z.cur[period]
	if sp := slot.Load(); sp != nil && now >= sp.start && now < sp.end {
		return sp
	}
	return w.newSpan(slot, period, z, now)
}

// newSpan computes the window of period in zone z open at the reading
// now, and keeps it in slot unless slot holds a later one.
func (w *CalendarWindow) newSpan(slot *atomic.Pointer[calendarSpan], period CalendarPeriod, z *calendarZone, now int64) *calendarSpan {
	start, end := z.calendar(period).window(w.base.start.Add(time.Duration(now)))
	sp := &calendarSpan{start: int64(start.Sub(w.base.start)), end: int64(end.Sub(w.base.start))}
	sp.policies = policyList(Policy{Limit: int(w.limit), Window: sp.length(), Zone: w.reported(z)}, w.obs.own)
	if old := slot.Load(); old == nil || old.start <= sp.start {
		slot.Store(sp)
	}
	return sp
}

// decide is Allow, which also returns the policies of the call's
// Decision and, for a window that counts nothing, the time until it ends
// (0 otherwise). It reports the call to the hooks, if any.
func (w *CalendarWindow) decide(ctx context.Context, key string, n int) (Result, []NamedPolicy, time.Duration, error) {
	if w == nil || w.windows == nil {
		return Result{}, nil, 0, errCalendarNotBuilt
	}
	limit, period, z := w.limit, w.cal.Period, w.zones.own
	err := w.obs.keys.check("CalendarWindow", key)
	if err == nil && w.policyFunc != nil {
		limit, period, z, err = w.policyFuncRate(ctx, key)
	}
	if err == nil {
		err = checkCost(n, int(limit))
	}
	if err != nil {
		policies := w.obs.own
		if w.policyFunc != nil {
			policies = policyList(Policy{Limit: int(limit), Window: period.Nominal(), Zone: w.reported(z)}, w.obs.own)
		}
		res := Result{Limit: int(limit)}
		if w.obs.hooks != nil {
			w.obs.report(key, n, oneDecision(res, policies, w.obs.rules), err, 0)
		}
		return res, policies, 0, err
	}
	reading := w.base.elapsed()
	tk := w.tableKey(key, period, z)
	sh, now := w.windows.lock(tk, reading, calendarMaxNow)
	sp := w.span(period, z, now)
	win, at := sh.lookup(tk)
	if win.end <= sp.start || win.count <= 0 {
		win = openWindow{} // counted in an earlier window, or never
	}
	allowed := int64(n) <= max(limit-win.count, 0)
	if allowed && n > 0 {
		win.end = sp.end
		win.count += int64(n)
		sh.write(tk, at, win, win.end)
	}
	sh.mu.Unlock()
	lag := lagBehind(now, reading)
	res := Result{Allowed: allowed, Limit: int(limit), Remaining: int(max(limit-win.count, 0))}
	var next time.Duration
	if win.count > 0 {
		res.ResetAfter = time.Duration(win.end - now + lag)
	} else {
		next = time.Duration(sp.end - now + lag) // an empty window: until it ends
	}
	if !allowed {
		res.RetryAfter = res.ResetAfter
	}
	policies := w.policiesOf(limit, sp, z)
	if w.obs.hooks != nil {
		w.obs.report(key, n, withNext(oneDecision(res, policies, w.obs.rules), next), nil, time.Duration(w.base.elapsed()-reading))
	}
	return res, policies, next, nil
}

// policyFuncRate returns the limit, period and zone of a call for key,
// for a CalendarWindow built WithPolicyFunc: the limiter's own on an
// error.
func (w *CalendarWindow) policyFuncRate(ctx context.Context, key string) (int64, CalendarPeriod, *calendarZone, error) {
	p, limit, period, err := w.policyFunc.resolve(ctx, key)
	z := w.zones.own
	if err == nil {
		z = w.policyFunc.zoneOf(p)
	}
	return limit, CalendarPeriod(period), z, err
}

// Refund gives n units back to key's count in the window open now, if it
// is the window that took them: when TakenAt is given, only if it is at
// or after that window's start. It is Settle(ctx, key, n, 0, opts...).
func (w *CalendarWindow) Refund(ctx context.Context, key string, n int, opts ...AdjustOption) (Result, error) {
	return w.adjust(ctx, AdjustRefund, key, n, 0, opts)
}

// Settle replaces taken, the units an allowed call counted for key, by
// cost. A smaller cost takes the difference off the key's count in the
// window open now, if the units were taken in it (TakenAt at or after its
// start, or TakenAt not given); a count that falls to 0 is forgotten. A
// larger cost counts the rest at once in the window open now, past the
// limit if need be (as far as WithMaxDebt allows). See Adjuster for the
// contract; ctx is passed to the PolicyFunc, if any.
func (w *CalendarWindow) Settle(ctx context.Context, key string, taken, cost int, opts ...AdjustOption) (Result, error) {
	return w.adjust(ctx, AdjustSettle, key, taken, cost, opts)
}

// adjust applies a Refund or Settle (op) of taken and cost to key, and
// reports it to the adjust hooks, if any.
func (w *CalendarWindow) adjust(ctx context.Context, op AdjustOp, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if w == nil || w.obs.adjust == nil {
		return w.settle(ctx, key, taken, cost, opts)
	}
	reading := w.base.elapsed()
	res, err := w.settle(ctx, key, taken, cost, opts)
	w.obs.reportAdjust(op, key, taken, cost, opts, res, err, time.Duration(w.base.elapsed()-reading))
	return res, err
}

// settle is Settle without the hooks.
func (w *CalendarWindow) settle(ctx context.Context, key string, taken, cost int, opts []AdjustOption) (Result, error) {
	if w == nil || w.windows == nil {
		return Result{}, errCalendarNotBuilt
	}
	limit, period, z := w.limit, w.cal.Period, w.zones.own
	err := w.obs.keys.check("CalendarWindow", key)
	if err == nil && w.policyFunc != nil {
		limit, period, z, err = w.policyFuncRate(ctx, key)
	}
	if err != nil {
		return Result{Limit: int(limit)}, err
	}
	a, err := settleArgs("CalendarWindow", taken, cost, w.policyFunc.takenBound(int(limit)), int(limit), w.obs.maxSettle, opts)
	if err != nil {
		return Result{Limit: int(limit)}, err
	}
	reading := w.base.elapsed()
	tk := w.tableKey(key, period, z)
	sh, now := w.windows.lock(tk, reading, calendarMaxNow)
	res := w.settleAt(limit, period, z, sh, tk, int64(cost-taken), a, now, lagBehind(now, reading))
	sh.mu.Unlock()
	return res, nil
}

// settleAt counts d more units for key, the table's (see tableKey), (takes
// -d off for a negative d) in sh, locked, at limit in windows of period in
// zone z, at its time now read from a clock lag behind it, and returns the
// key's Result.
func (w *CalendarWindow) settleAt(limit int64, period CalendarPeriod, z *calendarZone, sh *tableShard[openWindow], key string, d int64, a adjustment, now, lag int64) Result {
	sp := w.span(period, z, now)
	win, at := sh.lookup(key)
	if win.end <= sp.start || win.count <= 0 {
		win = openWindow{}
	}
	switch {
	case d > 0:
		win.end = sp.end
		// A debt stops growing at the debtCap's count; a count above it
		// already stays.
		if most := w.debt.count(limit); win.count < most {
			win.count += min(d, most-win.count)
		}
		sh.write(key, at, win, win.end)
	case d < 0 && win.count > 0 && (!a.hasTaken || int64(a.takenAt.Sub(w.base.start)) >= sp.start):
		if win.count += d; win.count > 0 {
			sh.write(key, at, win, win.end)
		} else {
			win = openWindow{}
			w.windows.remove(sh, key, at)
		}
	}
	return windowRate{limit: limit}.result(true, win, now, lag)
}

// take decides n at limit in windows of period in zone z for a key whose
// stored window is win, at the shard's time now, without writing: it
// returns the key's window open now (the zero openWindow if it counted
// nothing in it), the window after counting n, and whether n is allowed.
func (w *CalendarWindow) take(limit int64, period CalendarPeriod, z *calendarZone, win openWindow, now int64, n int) (cur, next openWindow, allowed bool) {
	sp := w.span(period, z, now)
	if win.end <= sp.start || win.count <= 0 {
		win = openWindow{} // counted in an earlier window, or never
	}
	allowed = int64(n) <= max(limit-win.count, 0)
	next = win
	if allowed && n > 0 {
		next.end = sp.end
		next.count += int64(n)
	}
	return win, next, allowed
}

// Reset forgets key's count: it is back to its full limit. Built
// WithPolicyFunc, it forgets the count of the period and zone of the key's
// policy now (a key counts apart in each, see WithPolicyFunc), which ctx
// goes to the PolicyFunc to read. It fails on a nil or zero-value
// *CalendarWindow, with an error wrapping ErrInvalidConfig, on a key
// longer than WithMaxKeyLength allows (ErrInvalidKey), and when the key's
// policy cannot be read.
func (w *CalendarWindow) Reset(ctx context.Context, key string) error {
	if w == nil || w.windows == nil {
		return errCalendarNotBuilt
	}
	reading := w.base.elapsed()
	tk := key
	err := w.obs.keys.check("CalendarWindow", key)
	if err == nil && w.policyFunc != nil {
		var period CalendarPeriod
		var z *calendarZone
		if _, period, z, err = w.policyFuncRate(ctx, key); err == nil {
			tk = w.tableKey(key, period, z)
		}
	}
	if err == nil {
		w.windows.drop(tk, reading, calendarMaxNow)
	}
	if w.obs.adjust != nil {
		w.obs.reportAdjust(AdjustReset, key, 0, 0, nil, Result{}, err, time.Duration(w.base.elapsed()-reading))
	}
	return err
}

// Policy returns the limit and the nominal length of the calendar's period
// (see CalendarPeriod.Nominal); the zero Policy for a nil
// *CalendarWindow.
func (w *CalendarWindow) Policy() Policy {
	if w == nil {
		return Policy{}
	}
	return Policy{Limit: int(w.limit), Window: w.cal.Period.Nominal()}
}

// Calendar returns the calendar the windows are cut by, its Location
// never nil; the zero Calendar for a nil *CalendarWindow.
func (w *CalendarWindow) Calendar() Calendar {
	if w == nil {
		return Calendar{}
	}
	c := w.cal
	c.Location = c.location()
	return c
}
