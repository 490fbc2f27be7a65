package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"
)

// A failure policy per part: a Guard in front of a Composite may answer the
// backend's failures by a policy of each part's own (GuardConfig.PartFailure),
// such as a monthly quota that fails closed beside a per-second limit that
// fails over to a Fleet fallback.

// guardParts is what a Guard keeps when its parts fail by policies of their
// own: each part's policy, in the backend's order, and the fallback of the
// parts that fail over, a Composite of the Guard's Fallback's parts of
// those names (the Fallback itself when every part fails over). It is
// immutable.
type guardParts struct {
	names    []string
	policies []FailurePolicy
	// fallback decides the parts that fail over; the zero value when none
	// does. fallbackPart[j] is the backend's index of its part j.
	fallback     decorated
	fallbackPart []int
}

// compositeIn returns the Composite l is, or decorates through this
// package's decorators; nil when there is none.
func compositeIn(l Limiter) *Composite {
	if c, ok := l.(*Composite); ok {
		if c != nil && len(c.parts) > 0 {
			return c
		}
		return nil
	}
	if b, ok := decoratorOf(l); ok && b != nil {
		return compositeIn(b.Limiter)
	}
	return nil
}

// partPolicies returns the failure policy of each part of the Composite
// backend cfg configures, by cfg.PartFailure and cfg.OnFailure, and the
// parts' names; nil, nil when cfg.PartFailure is empty. It returns an error
// wrapping ErrInvalidConfig for a PartFailure without a Composite backend,
// a name that is not one of its parts, or an unknown policy.
func partPolicies(kind string, backend Limiter, cfg GuardConfig) ([]string, []FailurePolicy, error) {
	if len(cfg.PartFailure) == 0 {
		return nil, nil, nil
	}
	c := compositeIn(backend)
	if c == nil {
		return nil, nil, fmt.Errorf("%w: %s: PartFailure names parts of a Composite, and the backend, a %T, is none", ErrInvalidConfig, kind, backend)
	}
	names := make([]string, len(c.parts))
	for i, p := range c.parts {
		names[i] = p.Name
	}
	given := make([]string, 0, len(cfg.PartFailure))
	for name := range cfg.PartFailure {
		given = append(given, name)
	}
	sort.Strings(given) // the first unknown name is always the same one
	for _, name := range given {
		if !slices.Contains(names, name) {
			return nil, nil, fmt.Errorf("%w: %s: PartFailure names %q, which is not a part of the backend's Composite (its parts: %q)", ErrInvalidConfig, kind, name, names)
		}
		if p := cfg.PartFailure[name]; p < FailOpen || p > FailOver {
			return nil, nil, fmt.Errorf("%w: %s: PartFailure: unknown failure policy %d for part %q", ErrInvalidConfig, kind, p, name)
		}
	}
	policies := make([]FailurePolicy, len(names))
	for i, name := range names {
		policies[i] = cfg.OnFailure
		if p, ok := cfg.PartFailure[name]; ok {
			policies[i] = p
		}
	}
	return names, policies, nil
}

// newGuardParts returns the guardParts of a backend whose parts, named
// names, fail by policies, with fallback the Guard's Fallback (nil when no
// part fails over): nil when every part has one policy, which the Guard
// then answers as a whole. Unless every part fails over, the fallback must
// be a Composite with a part of each name that fails over; the parts that
// fail over are decided by a Composite of those.
func newGuardParts(kind string, names []string, policies []FailurePolicy, fallback Limiter) (*guardParts, error) {
	if !slices.ContainsFunc(policies, func(p FailurePolicy) bool { return p != policies[0] }) {
		return nil, nil
	}
	gp := &guardParts{names: names, policies: policies}
	var over []int
	for i, p := range policies {
		if p == FailOver {
			over = append(over, i)
		}
	}
	if len(over) == 0 {
		return gp, nil
	}
	fc, ok := fallback.(*Composite)
	if !ok || fc == nil || len(fc.parts) == 0 {
		return nil, fmt.Errorf("%w: %s: parts %q fail over, and not every part does: the Fallback must be a Composite with parts of those names (Fleet.Fallback of the backend builds one), not a %T", ErrInvalidConfig, kind, pick(names, over), fallback)
	}
	var parts []Part
	for _, i := range over {
		j := slices.IndexFunc(fc.parts, func(p Part) bool { return p.Name == names[i] })
		if j < 0 {
			return nil, fmt.Errorf("%w: %s: part %q fails over, and the Fallback has no part of that name", ErrInvalidConfig, kind, names[i])
		}
		parts = append(parts, fc.parts[j])
		gp.fallbackPart = append(gp.fallbackPart, i)
	}
	sub, err := NewComposite(parts...)
	if err != nil {
		return nil, fmt.Errorf("%s: the Fallback's parts that fail over: %w", kind, err)
	}
	gp.fallback = decorate(sub)
	return gp, nil
}

// pick returns names at the indexes at.
func pick(names []string, at []int) []string {
	picked := make([]string, len(at))
	for k, i := range at {
		picked[k] = names[i]
	}
	return picked
}

// byParts answers, part by part, a call the backend could not: policies
// are the backend's for key, in its parts' order. When a part that fails
// closed has its say (n > 0), the call is denied by it, and nothing is
// asked of the fallback; otherwise the parts that fail over are decided by
// their fallback (a denial there denies the call), and those that fail
// open allow it. The Decision lists every part: Parts holds each part's
// Result (the fallback's for a part that failed over, shown under the
// backend's policy and Limit; the Limit alone, and RetryAfter for a denial
// by a part that fails closed, for the others), PolicyIndex the part that bound
// the answer, and Source who gave it: FromFailClosed for a part that
// fails closed, FromFallback for the fallback.
func (g *Guard) byParts(ctx context.Context, key string, n int, leased bool, policies []NamedPolicy, retryAfter time.Duration, d Decision) (Lease, Decision, error) {
	gp := g.parts
	if len(policies) != len(gp.policies) {
		// The backend's policies are not its parts' (a Decider of another
		// kind in between): answer as a whole, by OnFailure.
		return g.wholeByPolicy(ctx, key, n, leased, policies, retryAfter, d)
	}
	results := make([]Result, len(policies))
	for i, p := range policies {
		results[i] = Result{Limit: p.Limit}
	}
	d.Parts = results
	closed := n > 0 && slices.Contains(gp.policies, FailClosed)
	if closed {
		for i, p := range gp.policies {
			if p == FailClosed {
				results[i].RetryAfter, results[i].ResetAfter = retryAfter, retryAfter
			}
		}
		return Lease{}, g.partsAnswer(d, FromFailClosed), nil
	}
	if gp.fallback.built() {
		g.seed(ctx, key)
		var lease Lease
		var fd Decision
		var err error
		if leased {
			lease, fd, err = gp.fallback.acquire(ctx, key, n)
		} else {
			fd, err = gp.fallback.decide(ctx, key, n)
		}
		if errors.Is(err, ErrCostExceedsLimit) {
			// The backend could take n, once it is back.
			for _, i := range gp.fallbackPart {
				results[i].RetryAfter, results[i].ResetAfter = retryAfter, retryAfter
			}
			return Lease{}, g.partsAnswer(d, FromFallback), nil
		}
		if err != nil {
			return lease, d, err
		}
		allowed := fd.Allowed
		d.partNext = make([]time.Duration, len(policies))
		for j, i := range gp.fallbackPart {
			r, k := fd.Result, fd.PolicyIndex
			if j < len(fd.Parts) {
				r, k = fd.Parts[j], j
			}
			d.partNext[i], _ = fd.NextUnit(k) // the fallback's, which the Result is
			if limit := policies[i].Limit; limit > 0 {
				// Shown under the backend's policy, whose Limit it has
				// (with less left than the fallback has, one unit more is
				// there now: no next unit).
				r.Limit = limit
				if r.Remaining > limit {
					r.Remaining, d.partNext[i] = limit, 0
				}
			}
			results[i] = r
		}
		for i, p := range gp.policies {
			if p == FailOpen {
				results[i].Allowed = allowed
			}
		}
		return lease, g.partsAnswer(d, FromFallback), nil
	}
	for i := range results {
		results[i].Allowed = true // every part fails open, or a peek
	}
	return Lease{}, g.partsAnswer(d, policySource[gp.policies[0]]), nil
}

// partsAnswer completes d, whose Parts are set, as a Composite's answer is
// made (see Composite): PolicyIndex is the part that bound it, Result that
// part's with the longest RetryAfter and ResetAfter of all, Source source.
func (g *Guard) partsAnswer(d Decision, source Source) Decision {
	d.PolicyIndex = bound(d.Parts)
	if source == FromFallback && d.Parts[d.PolicyIndex].RetryAfter == 0 {
		// An allowed answer is bound by a part whose numbers are known: a
		// part that failed over, not one that failed open, which knows
		// nothing of the key.
		b := -1
		for _, i := range g.parts.fallbackPart {
			if b < 0 || lessLeft(&d.Parts[i], &d.Parts[b]) {
				b = i
			}
		}
		d.PolicyIndex = b
	}
	d.Policy = d.Policies[d.PolicyIndex]
	d.Result = combine(d.Parts, d.PolicyIndex)
	d.Source = source
	d.Enforced = d.Result
	return d
}
