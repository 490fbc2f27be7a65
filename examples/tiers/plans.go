package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// planFile is the JSON form of the plans and the customers' plans, as in
// plans.json.
type planFile struct {
	// DefaultPlan names the plan whose limit is the limiter's own, the
	// one its constructor is given.
	DefaultPlan string `json:"default_plan"`
	// Plans are the plans by name.
	Plans map[string]planSpec `json:"plans"`
	// Customers maps each API key to the name of its plan.
	Customers map[string]string `json:"customers"`
}

// planSpec is one plan in the file: Limit requests per Window, a Go
// duration such as "1m".
type planSpec struct {
	Limit  int    `json:"limit"`
	Window string `json:"window"`
}

// Errors of store.setPlan.
var (
	errUnknownPlan     = errors.New("unknown plan")
	errUnknownCustomer = errors.New("unknown customer")
)

// store holds the plans, which are fixed when it is loaded, and the plan of
// each customer, which setPlan changes while the service runs. It is safe
// for concurrent use: readers load an immutable map with one atomic load and
// never wait; a change copies the map and swaps it in.
type store struct {
	plans       map[string]ratelimit.Policy // immutable
	names       []string                    // the plans' names, sorted, for messages
	defaultPlan string

	mu        sync.Mutex                        // serialises the writers of customers
	customers atomic.Pointer[map[string]string] // API key → plan name; never modified once stored
}

// parsePlans reads a plan file. Every plan must have a limit and window
// that the limiters accept, the default plan and every customer's plan must
// exist, and an API key must be 1 to maxAPIKey bytes without spaces.
func parsePlans(data []byte) (*store, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f planFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("plans: %w", err)
	}
	if len(f.Plans) == 0 {
		return nil, errors.New("plans: no plans")
	}
	s := &store{plans: make(map[string]ratelimit.Policy, len(f.Plans)), defaultPlan: f.DefaultPlan}
	for name, spec := range f.Plans {
		if name == "" {
			return nil, errors.New("plans: a plan has an empty name")
		}
		window, err := time.ParseDuration(spec.Window)
		if err != nil {
			return nil, fmt.Errorf("plans: plan %q: window: %w", name, err)
		}
		// A limiter refuses a policy its constructor would refuse: try it
		// now rather than on a customer's request.
		if _, err := ratelimit.NewGCRA(spec.Limit, window); err != nil {
			return nil, fmt.Errorf("plans: plan %q: %w", name, err)
		}
		s.plans[name] = ratelimit.Policy{Limit: spec.Limit, Window: window}
	}
	s.names = slices.Sorted(maps.Keys(s.plans))
	if _, ok := s.plans[f.DefaultPlan]; !ok {
		return nil, fmt.Errorf("plans: default_plan %q is not one of the plans (%s)", f.DefaultPlan, s.planList())
	}
	customers := make(map[string]string, len(f.Customers))
	for key, plan := range f.Customers {
		if err := checkAPIKey(key); err != nil {
			return nil, fmt.Errorf("plans: customer %q: %w", key, err)
		}
		if _, ok := s.plans[plan]; !ok {
			return nil, fmt.Errorf("plans: customer %q: %w %q (the plans are %s)", key, errUnknownPlan, plan, s.planList())
		}
		customers[key] = plan
	}
	s.customers.Store(&customers)
	return s, nil
}

// checkAPIKey returns an error for an API key that is empty, longer than
// maxAPIKey bytes, or holds a space or control character.
func checkAPIKey(key string) error {
	if key == "" || len(key) > maxAPIKey {
		return fmt.Errorf("an API key must be 1 to %d bytes", maxAPIKey)
	}
	if strings.ContainsFunc(key, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return errors.New("an API key must not hold spaces or control characters")
	}
	return nil
}

// planList returns the plans' names for a message: "enterprise, free, pro".
func (s *store) planList() string { return strings.Join(s.names, ", ") }

// defaultPolicy returns the default plan's policy: the limiter's own.
func (s *store) defaultPolicy() ratelimit.Policy { return s.plans[s.defaultPlan] }

// planOf returns the plan of the customer whose API key is key, and false
// when there is no such customer.
func (s *store) planOf(key string) (string, bool) {
	plan, ok := (*s.customers.Load())[key]
	return plan, ok
}

// policy is the limiter's ratelimit.PolicyFunc: the policy of the plan of
// the customer whose API key is key. It answers the zero Policy, which
// means the limiter's own (the default plan's), for a key that is no
// customer's; the service refuses those before they reach the limiter.
func (s *store) policy(_ context.Context, key string) (ratelimit.Policy, error) {
	plan, ok := s.planOf(key)
	if !ok {
		return ratelimit.Policy{}, nil
	}
	return s.plans[plan], nil
}

// setPlan puts the customer whose API key is key on plan, from its next
// request on, and returns its previous plan. It returns an error wrapping
// errUnknownPlan or errUnknownCustomer, and changes nothing, when there is
// no such plan or customer.
func (s *store) setPlan(key, plan string) (previous string, err error) {
	if _, ok := s.plans[plan]; !ok {
		return "", fmt.Errorf("%w %q: the plans are %s", errUnknownPlan, plan, s.planList())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := *s.customers.Load()
	previous, ok := old[key]
	if !ok {
		return "", fmt.Errorf("%w: no customer has the API key %q", errUnknownCustomer, key)
	}
	customers := maps.Clone(old)
	customers[key] = plan
	s.customers.Store(&customers)
	return previous, nil
}

// describe returns the plans for a log line: "enterprise 1000/1m0s, ...".
func (s *store) describe() string {
	parts := make([]string, len(s.names))
	for i, name := range s.names {
		p := s.plans[name]
		parts[i] = fmt.Sprintf("%s %d/%v", name, p.Limit, p.Window)
	}
	return strings.Join(parts, ", ")
}
