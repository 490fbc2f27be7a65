package ratelimit

import (
	"fmt"
	"slices"
	"sort"
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
