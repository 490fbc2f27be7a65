package ratelimit

import (
	"context"
	"fmt"
)

// decorated is a decorator's backend (Guard, DenyCache, Shadow), or a
// Guard's fallback, with what the decorator needs of it found once, when
// the decorator is built. The zero value has no backend. It is immutable.
type decorated struct {
	Limiter
	decider  Decider  // the backend, when it is one
	adjust   Adjuster // the backend, when it is one
	acquirer Acquirer // the backend, when it is one
	// keysOf returns the keys a call on key touches, one per policy: those
	// of a Composite's parts (found through decorators); nil when a call
	// touches key alone.
	keysOf func(key string) []string
	// keys are the backend's key rules (see keyRulesOf), which the
	// decorator follows in its errors and reports.
	keys keyRules
}

// decorate returns backend, decorated.
func decorate(backend Limiter) decorated {
	d := decorated{Limiter: backend, keysOf: keysOf(backend), keys: keyRulesOf(backend)}
	d.decider, _ = backend.(Decider)
	d.adjust, _ = backend.(Adjuster)
	d.acquirer, _ = backend.(Acquirer)
	return d
}

// keysOf returns the function that gives the keys a call of l on key
// touches, one per policy: a Composite's parts' keys, found through this
// package's decorators; nil for any other limiter, whose calls touch key
// alone.
func keysOf(l Limiter) func(key string) []string {
	switch v := l.(type) {
	case *Composite:
		if v != nil && len(v.parts) > 0 {
			return v.partKeys
		}
	case *Guard:
		if v != nil {
			return v.backend.keysOf
		}
	case *DenyCache:
		if v != nil {
			return v.backend.keysOf
		}
	case *Shadow:
		if v != nil {
			return v.backend.keysOf
		}
	case *Leasing:
		if v != nil {
			return v.backend.keysOf
		}
	}
	return nil
}

// built reports whether d has a backend.
func (d *decorated) built() bool { return d.Limiter != nil }

// decide decides n for key through the backend: its own Decision when it
// is a Decider, and one built from its Allow otherwise (see Decide).
func (d *decorated) decide(ctx context.Context, key string, n int) (Decision, error) {
	if d.decider != nil {
		return d.decider.Decide(ctx, key, n)
	}
	res, err := d.Allow(ctx, key, n)
	return foreignDecision(res), err
}

// acquire takes n units for key through the backend: its Acquire when it
// is an Acquirer, and otherwise its decision (see decide) with a Lease
// that holds nothing.
func (d *decorated) acquire(ctx context.Context, key string, n int) (Lease, Decision, error) {
	if d.acquirer != nil {
		return d.acquirer.Acquire(ctx, key, n)
	}
	dec, err := d.decide(ctx, key, n)
	return Lease{}, dec, err
}

// policies returns the backend's policies for key (see Decider): none when
// it is not a Decider.
func (d *decorated) policies(ctx context.Context, key string) ([]NamedPolicy, error) {
	if d.decider != nil {
		return d.decider.Policies(ctx, key)
	}
	return nil, nil
}

// adjuster returns the backend as an Adjuster, or an error, naming the
// decorator kind, saying it is not one.
func (d *decorated) adjuster(kind string) (Adjuster, error) {
	if d.adjust == nil {
		return nil, callerErr(fmt.Errorf("ratelimit: %s: the backend, a %T, cannot refund, settle or reset", kind, d.Limiter))
	}
	return d.adjust, nil
}

// forwardLease releases (op AdjustRelease) or extends (op AdjustExtend)
// lease through the limiter that granted it, for a decorator, which does
// not report it: a lease's life (its grant, Release and Extend) is
// reported by that limiter alone, as its hooks are the only ones that hear
// of every release, lease.Release included. It returns the renewed lease
// of an extend, and lease itself otherwise.
func forwardLease(ctx context.Context, op AdjustOp, lease Lease) (Lease, error) {
	if op == AdjustRelease {
		return lease, lease.Release(ctx)
	}
	return lease.Extend(ctx)
}
