package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// A plan sets the requests and the tokens a minute of every API key on it.
// The fleet keeps the plans in one ratelimit.PolicyTable in Redis, under
// the keys planKey(plan, requestsPart) and planKey(plan, tokensPart), so
// that a change made on one replica holds on all of them.
const (
	freePlan = "free"
	proPlan  = "pro"

	requestsPart = "requests" // calls, whatever their size
	tokensPart   = "tokens"   // prompt and completion tokens

	// proKeyPrefix marks the API keys on the pro plan; every other key is
	// on the free plan (see planOf).
	proKeyPrefix = "sk-pro-"

	// maxPlanLimit bounds what the admin endpoint accepts for either limit.
	maxPlanLimit = 1_000_000

	planWindow = time.Minute // both limits of a plan are per minute
)

// plans lists the plans by name, in the order GET /admin/plans shows them.
var plans = []string{freePlan, proPlan}

// planLimits are the two limits of a plan, per minute: the body of PUT
// /admin/plans/{plan} and an entry of GET /admin/plans.
type planLimits struct {
	Requests int `json:"requests"`
	Tokens   int `json:"tokens"`
}

// defaultPlans returns the plans the fleet starts with, when Redis holds
// none: what a real gateway would read from its accounts database.
func defaultPlans() map[string]planLimits {
	return map[string]planLimits{
		freePlan: {Requests: 5, Tokens: 2000},
		proPlan:  {Requests: 60, Tokens: 40000},
	}
}

// check returns an error that says what is wrong with l, if anything.
func (l planLimits) check() error {
	if l.Requests < 1 || l.Requests > maxPlanLimit || l.Tokens < 1 || l.Tokens > maxPlanLimit {
		return fmt.Errorf("requests and tokens must each be 1 to %d a minute, not %d and %d", maxPlanLimit, l.Requests, l.Tokens)
	}
	return nil
}

// planKey is the key of the table that holds the policy of part (requests
// or tokens) of plan, as in "free/requests".
func planKey(plan, part string) string { return plan + "/" + part }

// planOf returns the plan of an API key. It stands for a look-up in the
// accounts database: here the keys that begin with "sk-pro-" are on the pro
// plan, and all the others on the free one.
func planOf(apiKey string) string {
	if strings.HasPrefix(apiKey, proKeyPrefix) {
		return proPlan
	}
	return freePlan
}

// planPolicies returns the table entries of plans: two policies a plan.
func planPolicies(byPlan map[string]planLimits) map[string]ratelimit.Policy {
	policies := make(map[string]ratelimit.Policy, 2*len(byPlan))
	for plan, l := range byPlan {
		policies[planKey(plan, requestsPart)] = ratelimit.Policy{Limit: l.Requests, Window: planWindow}
		policies[planKey(plan, tokensPart)] = ratelimit.Policy{Limit: l.Tokens, Window: planWindow}
	}
	return policies
}

// tablePlans returns the plans as the replica's copy of table holds them,
// and whether it holds every one of them.
func tablePlans(table *ratelimit.PolicyTable) (map[string]planLimits, bool) {
	byPlan := make(map[string]planLimits, len(plans))
	for _, plan := range plans {
		requests, okR := table.Lookup(planKey(plan, requestsPart))
		tokens, okT := table.Lookup(planKey(plan, tokensPart))
		if !okR || !okT {
			return byPlan, false
		}
		byPlan[plan] = planLimits{Requests: requests.Limit, Tokens: tokens.Limit}
	}
	return byPlan, true
}

// setPlan writes the limits of plan to the table in Redis, for every
// replica: two writes, requests then tokens, each seen by the fleet within
// a round trip of it.
func setPlan(ctx context.Context, table *ratelimit.PolicyTable, plan string, l planLimits) error {
	if err := table.Set(ctx, planKey(plan, requestsPart), ratelimit.Policy{Limit: l.Requests, Window: planWindow}); err != nil {
		return err
	}
	return table.Set(ctx, planKey(plan, tokensPart), ratelimit.Policy{Limit: l.Tokens, Window: planWindow})
}

// seedPlans writes the plans to the table if Redis holds none: at start,
// and when the table went missing (a restart of Redis without persistence,
// a FLUSHALL). The replica's own copy is then the best source it has, so a
// change made before the loss is kept; the defaults stand in for a copy it
// never had. Every replica may call it: the first one's write wins.
func seedPlans(ctx context.Context, table *ratelimit.PolicyTable) error {
	byPlan, ok := tablePlans(table)
	if !ok {
		byPlan = defaultPlans()
	}
	_, err := table.Seed(ctx, ratelimit.PolicyTableEntries{Policies: planPolicies(byPlan)})
	return err
}

// partPolicy returns the PolicyFunc of one part of the Composite (requests
// or tokens): the policy the table holds for that part of the plan of the
// request in ctx, or, for a call without one (the middleware's reading of
// the limiter's policies, say), the zero Policy, which leaves the limiter's
// own, the default free plan's.
func partPolicy(table *ratelimit.PolicyTable, part string) ratelimit.PolicyFunc {
	return func(ctx context.Context, _ string) (ratelimit.Policy, error) {
		call, err := callOf(ctx)
		if err != nil {
			return ratelimit.Policy{}, nil
		}
		p, _ := table.Lookup(planKey(call.plan, part))
		return p, nil
	}
}
