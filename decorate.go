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
	// nodeOf names the server that serves key's call on a Redis Cluster or
	// Ring (see nodesOf); nil for a backend of one server or of another
	// package.
	nodeOf func(key string) string
	// keys are the backend's key rules (see keyRulesOf), which the
	// decorator follows in its errors and reports.
	keys keyRules
}

// decorate returns backend, decorated.
func decorate(backend Limiter) decorated {
	d := decorated{Limiter: backend, keysOf: keysOf(backend), nodeOf: nodesOf(backend), keys: keyRulesOf(backend)}
	d.decider, _ = backend.(Decider)
	d.adjust, _ = backend.(Adjuster)
	d.acquirer, _ = backend.(Acquirer)
	return d
}

// decorator is a decorator of this package (Guard, DenyCache, Shadow,
// Prefetch): a Limiter in front of its backend. Use decoratorOf, which
// tells a decorator of this package from a type of another package that
// embeds one.
type decorator interface {
	// backendOf returns the decorator's backend; nil for a nil decorator.
	backendOf() *decorated
	// limiter returns the decorator itself.
	limiter() Limiter
}

// decoratorOf returns the backend of l when l is one of this package's
// decorators itself (nil for a nil one), and whether it is.
func decoratorOf(l Limiter) (*decorated, bool) {
	d, ok := l.(decorator)
	if !ok || d.limiter() != l {
		return nil, false
	}
	return d.backendOf(), true
}

// keysOf returns the function that gives the keys a call of l on key
// touches, one per policy: a Composite's parts' keys, found through this
// package's decorators; nil for any other limiter, whose calls touch key
// alone.
func keysOf(l Limiter) func(key string) []string {
	if c, ok := l.(*Composite); ok {
		if c != nil && len(c.parts) > 0 {
			return c.partKeys
		}
		return nil
	}
	if b, ok := decoratorOf(l); ok && b != nil {
		return b.keysOf
	}
	return nil
}

// nodeRouter is a Limiter that may name the server of each key's calls: a
// Redis limiter or Composite of Redis parts (see noderoute.go). nodes
// returns the function that does, or nil when every call goes to one
// server.
type nodeRouter interface {
	nodes() func(key string) string
}

// nodesOf returns the function that names the server that serves a call of
// l on key (see redisbatch.Sender.Node), found through this package's
// decorators; nil when l's calls all go to one server, or l is of another
// package.
func nodesOf(l Limiter) func(key string) string {
	if b, ok := decoratorOf(l); ok {
		if b != nil {
			return b.nodeOf
		}
		return nil
	}
	if r, ok := l.(nodeRouter); ok && !isNil(l) {
		return r.nodes()
	}
	return nil
}

// node names the server that serves key's call; "" when not known.
func (d *decorated) node(key string) string {
	if d.nodeOf == nil {
		return ""
	}
	return d.nodeOf(key)
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

// keyRulesOf returns the key rules of l: a limiter's of this package as it
// was built, a Composite's (see Composite.keyRules), a decorator's
// backend's; for a Limiter of another package, or one not built, none:
// no bound (that limiter keeps its keys itself), keys shown as digests.
func keyRulesOf(l Limiter) keyRules {
	if o := observerOf(l); o != nil {
		return o.keys
	}
	if c, ok := l.(*Composite); ok {
		if c != nil && len(c.parts) > 0 {
			return c.keyRules
		}
		return keyRules{}
	}
	if b, ok := decoratorOf(l); ok && b != nil {
		return b.keys
	}
	return keyRules{}
}
