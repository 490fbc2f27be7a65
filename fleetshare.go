package ratelimit

import (
	"context"
	"fmt"
	"math/bits"
	"time"
)

// Share returns one replica's share of p, a policy the whole fleet shares,
// at the fleet's Live replicas: a Limit of p.Limit/Live rounded down (at
// least 1), and a Window that keeps the rate at exactly p's rate / Live
// (p.Window × share × Live / p.Limit, rounded up to the nanosecond, and
// at most about 73 years, the longest span an in-process limiter's clock
// holds: beyond it, a smaller rate rather than a policy the fallback would
// refuse).
//
// So, for capacity and rate alike, the shares of the live replicas add up
// to no more than p: the capacity is rounded down so that the bursts of
// every replica together never exceed p.Limit, and the window is
// shortened by as much, so that the fleet's sustained rate is p's rate,
// not less (a Limit of 4 over 3 replicas is 1 per Window × 3/4 each,
// rather than 1 per Window, which would lose a quarter of the rate). The
// rounding thus costs the fleet units, never gives it any: the shares'
// Limits add up to p.Limit less p.Limit mod Live (less than one unit per
// replica: 9 of 10 over 3 replicas) that no replica may take in a burst,
// and the Window's rounding up makes each share's rate slower by at most
// a nanosecond per Window. With fewer units than replicas, each keeps 1
// at p's rate / Live (its Window then longer than p's): the fleet's
// bursts may then reach Live units. With one replica, or a p whose Limit
// or Window is not positive, it returns p.
//
// For a fixed window the shares' windows are shorter, by the rounding of
// the limit, than the shared one. It is safe for concurrent use, and 1
// replica for a nil *Fleet.
func (f *Fleet) Share(p Policy) Policy {
	return sharePolicy(p, f.Live())
}

// ShareFunc returns a PolicyFunc giving each key's share (see Share) of its
// policy for the whole fleet: the policy pf gives the key, or def when pf
// is nil or gives the zero Policy. An error of pf is returned as it is.
// Each call reads Live, so that the share follows the fleet; a limiter
// built WithPolicyFunc(ShareFunc(...)) keeps what each key has used when
// the share changes (see WithPolicyFunc), but for a sliding counter, which
// counts apart in each Window and so starts a key afresh when the share's
// Window changes with Live. Use it for a fallback that Fallback does not
// build; def is the fallback's constructor policy as the fleet shares it,
// and the fallback is built with def's numbers. Its shares are rates' (see
// Share), whose Window is scaled with the share: it is not for a
// Concurrency, whose share Fallback builds with its lease TTL kept.
func (f *Fleet) ShareFunc(def Policy, pf PolicyFunc) PolicyFunc {
	return f.shareFunc(def, pf, sharePolicy)
}

// shareFunc returns the PolicyFunc giving each key share(p, Live()) of its
// policy p: the one pf gives the key, or def when pf is nil or gives the
// zero Policy. An error of pf is returned as it is.
func (f *Fleet) shareFunc(def Policy, pf PolicyFunc, share func(Policy, int) Policy) PolicyFunc {
	return func(ctx context.Context, key string) (Policy, error) {
		p := def
		if pf != nil {
			q, err := pf(ctx, key)
			if err != nil {
				return Policy{}, err
			}
			if q != (Policy{}) {
				p = q
			}
		}
		return share(p, f.Live()), nil
	}
}

// shareInFlight returns one share of p, a policy of units in flight, among
// live replicas: a Limit of p.Limit/live rounded down, at least 1, and the
// same Window, the leases' TTL, which a share of units in flight has no
// reason to stretch (a lease holds its units until it is released, not at
// a rate). With one replica, or a Limit that is not positive, it returns
// p.
func shareInFlight(p Policy, live int) Policy {
	if live <= 1 || p.Limit <= 0 {
		return p
	}
	share := p // and its Zone, a calendar window's
	share.Limit = max(p.Limit/live, 1)
	return share
}

// sharePolicy returns one share of p among live replicas. See Fleet.Share.
func sharePolicy(p Policy, live int) Policy {
	if live <= 1 || p.Limit <= 0 || p.Window <= 0 {
		return p
	}
	share := max(p.Limit/live, 1)
	// Window × share × live / Limit, rounded up, in 128 bits; share × live
	// is at most max(Limit, live).
	// A window beyond what an in-process limiter's clock holds (maxSpan)
	// is that bound: a smaller rate share, never a refused policy.
	hi, lo := bits.Mul64(uint64(p.Window), uint64(share)*uint64(live))
	if hi >= uint64(p.Limit) {
		return Policy{Limit: share, Window: maxSpan}
	}
	q, r := bits.Div64(hi, lo, uint64(p.Limit))
	if r != 0 {
		q++
	}
	if q > maxSpan {
		return Policy{Limit: share, Window: maxSpan}
	}
	return Policy{Limit: share, Window: time.Duration(q)}
}

// Fallback returns the fallback of a Guard in front of backend, for
// OnFailure: FailOver: the in-process limiter that decides as backend
// does, on this replica's share (see Share) of backend's policy of each
// key, so that the fleet stays near the shared limit while Redis is away:
//   - a RedisTokenBucket gives a TokenBucket, a RedisGCRA a GCRA, a
//     RedisFixedWindow a FixedWindow, a RedisSlidingLog a SlidingLog and a
//     RedisSlidingCounter a SlidingCounter, each built WithPolicyFunc(ShareFunc(
//     backend's policy, backend's PolicyFunc if it was built with one));
//   - a RedisCalendarWindow gives a CalendarWindow of the same calendar
//     whose limit for each key is the key's limit on the backend ÷ Live,
//     rounded down, at least 1, in the same windows of the wall clock
//     (which no shorter window gives back: the fleet's fallbacks together
//     have limit mod Live units fewer per window than the backend, less
//     than one per replica: 99 of a monthly 100 over 3 replicas);
//   - a RedisConcurrency gives a Concurrency whose limit for each key is
//     the key's limit on the backend ÷ Live, rounded down, at least 1,
//     with the same lease TTL (not scaled as a rate's Window is: a lease
//     holds its units until it is released or its TTL passes), so limit
//     mod Live units fewer in flight, as for a calendar window;
//   - a Composite of Redis limiters gives a Composite of such in-process
//     limiters, one per part, with the same Names, Keys and PerCall (a
//     RedisConcurrency part gives its Concurrency part).
//
// Each call reads Live, so the share follows the fleet as it grows or
// shrinks, and keeps what each key has used (see WithPolicyFunc; a
// SlidingCounter's key starts afresh when its share's Window changes);
// while Redis is away Live, and so the share, stays as the latest heartbeat
// left it. The Guard that fails over to it brings each key down, at its
// first failed-over call, to its share of what Redis last told this replica
// was left, rounded down (see Guard, Fallbacks start from the backend's
// state), so that a quota Redis had spent is not refilled by every
// replica's share. opts go to each in-process limiter: WithClock,
// WithHooks, WithName, WithMaxDebt, WithMaxSettle, WithMaxKeyLength and
// WithKeysShown apply (the bounds on debt, on one Settle and on a key's
// length, and whether keys are shown, are the backend's unless they say
// otherwise; a concurrency mirror has no debt and no Settle, so those two
// are refused for a RedisConcurrency backend and left out of a Composite's
// concurrency part); WithPolicyFunc is refused, since the share is the
// policy. Parts of a Composite on one Redis limiter share one in-process
// mirror, as they share that limiter's keys. It returns an error wrapping
// ErrInvalidConfig for a backend of another type, a nil or zero-value one,
// or an option that does not apply.
//
// The leases a concurrency mirror grants are the fallback's: the backend
// never counts them, and they hold their units on the fallback until they
// are released or their TTL passes, also after Redis is back. A Guard that
// fails over to it thus lets a key have in flight, for up to one TTL after
// the backend came back (longer for leases that are extended), the
// backend's limit plus each replica's share still held, as the Guard
// documents.
func (f *Fleet) Fallback(backend Limiter, opts ...Option) (Limiter, error) {
	const kind = "Fleet.Fallback"
	if f == nil || f.client == nil {
		return nil, notBuilt("Fleet")
	}
	cfg, err := applyOptions(kind, opts)
	if err != nil {
		return nil, err
	}
	if cfg.policyFunc != nil {
		return nil, fmt.Errorf("%w: %s: WithPolicyFunc does not apply; the fallback's policy is the fleet's share of the backend's", ErrInvalidConfig, kind)
	}
	c, ok := backend.(*Composite)
	if !ok {
		l, err := f.mirror(kind, backend, opts)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	if c == nil || len(c.parts) == 0 {
		return nil, fmt.Errorf("%s: %w", kind, notBuilt("Composite"))
	}
	if c.remote == nil {
		return nil, fmt.Errorf("%w: %s: the Composite's parts are in process already; a fallback mirrors Redis limiters", ErrInvalidConfig, kind)
	}
	parts := make([]Part, len(c.parts))
	// Parts on one Redis limiter share one mirror, as they share one
	// limiter's keys on Redis.
	mirrors := make(map[Limiter]Limiter, len(c.parts))
	for i, p := range c.parts {
		l, ok := mirrors[p.Limiter]
		if !ok {
			partOpts := opts
			if e, ok := engineOf(p.Limiter); ok && e.kindOf().inFlight() {
				partOpts = withoutSettleBounds(opts) // a concurrency part has no debt nor Settle
			}
			if l, err = f.mirror(kind, p.Limiter, partOpts); err != nil {
				return nil, fmt.Errorf("%s: part %q: %w", kind, p.Name, err)
			}
			mirrors[p.Limiter] = l
		}
		parts[i] = Part{Name: p.Name, Limiter: l, Key: p.Key, PerCall: p.PerCall}
	}
	return NewComposite(parts...)
}

// withoutSettleBounds returns opts without those that set WithMaxDebt or
// WithMaxSettle, which only set a config: applying one to a scratch config
// tells.
func withoutSettleBounds(opts []Option) []Option {
	var kept []Option
	for _, opt := range opts {
		var cfg config
		if opt != nil && opt.applyLocal(&cfg) == nil && (cfg.maxDebtSet || cfg.maxSettleSet) {
			continue
		}
		kept = append(kept, opt)
	}
	return kept
}

// mirror returns the in-process limiter of backend's algorithm, one of the
// Redis limiters of this package, deciding by this replica's share of
// backend's policy of each key: its kind's twin, with backend's key rules
// and, but for units in flight (which have neither debt nor Settle), its
// bounds on debt and on a Settle, unless opts give others. A rate's share
// scales its Window (see Share); a calendar's windows are the wall
// clock's, and a Concurrency's leases last as long as backend's, so their
// share is of the limit alone.
func (f *Fleet) mirror(kind string, backend Limiter, opts []Option) (Limiter, error) {
	e, ok := engineOf(backend)
	re, remote := e.(remoteEngine)
	if !ok || !remote {
		return nil, fmt.Errorf("%w: %s: a %T has no in-process mirror; give a RedisTokenBucket, RedisGCRA, RedisFixedWindow, RedisSlidingLog, RedisSlidingCounter, RedisCalendarWindow, RedisConcurrency or a Composite of them", ErrInvalidConfig, kind, backend)
	}
	r := re.remote()
	if r == nil || r.client == nil {
		return nil, fmt.Errorf("%w: %s: a nil or zero-value %T", ErrInvalidConfig, kind, backend)
	}
	k := e.kindOf()
	def := r.obs.policy
	var pf PolicyFunc
	if r.policyFunc != nil {
		pf = r.policyFunc.f
	}
	if k.inFlight() {
		opts = append(keyOptions(r.obs.keys), opts...)
	} else {
		opts = append(append(keyOptions(r.obs.keys), WithMaxDebt(int(r.debt)), WithMaxSettle(int(r.obs.maxSettle))), opts...)
	}
	opts = append(opts, WithPolicyFunc(f.shareFunc(def, pf, k.share)))
	return k.twin(def, backend, opts)
}
