package ratelimit

import (
	"context"
	"fmt"
)

// decorated is a decorator's backend (Guard, DenyCache, Shadow) with the
// interfaces it implements found once, when the decorator is built, so
// that a call forwards without type assertions. The zero value has no
// backend. It is immutable.
type decorated struct {
	Limiter
	multi    MultiPolicy   // the backend, when it is one
	sourced  SourceLimiter // the backend, when it is one
	adjust   Adjuster      // the backend, when it is one
	policy   Policy        // the backend's (PolicyOf); zero if it reports none
	policies []NamedPolicy // PoliciesOf the backend
	// keyPolicies is the backend's PolicyFuncOf: nil when its policy is the
	// same for every key.
	keyPolicies PolicyFunc
}

// decorate returns backend, decorated.
func decorate(backend Limiter) decorated {
	d := decorated{Limiter: backend, policies: PoliciesOf(backend)}
	d.multi, _ = backend.(MultiPolicy)
	d.sourced, _ = backend.(SourceLimiter)
	d.adjust, _ = backend.(Adjuster)
	d.policy, _ = PolicyOf(backend)
	d.keyPolicies = PolicyFuncOf(backend)
	return d
}

// policyFor returns the backend's policy for a call on key with ctx (not
// nil): its one Policy, or the key's when it chooses its policy per key
// (and its Policy when that fails).
func (d *decorated) policyFor(ctx context.Context, key string) Policy {
	if d.keyPolicies == nil {
		return d.policy
	}
	if p, err := d.keyPolicies(ctx, key); err == nil {
		return p
	}
	return d.policy
}

// built reports whether d has a backend.
func (d *decorated) built() bool { return d.Limiter != nil }

// copyPolicies returns the backend's policies in a slice of the caller's.
func (d *decorated) copyPolicies() []NamedPolicy {
	return append([]NamedPolicy(nil), d.policies...)
}

// allowSource decides n for key through the backend, with the index of the
// policy that bound the decision (0 for a backend of one policy) and who
// answered: the backend's own account when it is a SourceLimiter, and
// FromBackend otherwise.
func (d *decorated) allowSource(ctx context.Context, key string, n int) (Result, int, Source, error) {
	switch {
	case d.sourced != nil:
		return d.sourced.AllowSource(ctx, key, n)
	case d.multi != nil:
		res, bound, err := d.multi.AllowBound(ctx, key, n)
		return res, bound, FromBackend, err
	}
	res, err := d.Allow(ctx, key, n)
	return res, 0, FromBackend, err
}

// adjuster returns the backend as an Adjuster, or an error, naming the
// decorator kind, saying it is not one.
func (d *decorated) adjuster(kind string) (Adjuster, error) {
	if d.adjust == nil {
		return nil, fmt.Errorf("ratelimit: %s: the backend, a %T, cannot refund, settle or reset", kind, d.Limiter)
	}
	return d.adjust, nil
}
