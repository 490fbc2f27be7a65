package ratefields

import (
	"strconv"
	"strings"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// Policy is what the fields say of one policy of a decision, formatted
// once for every decision that lists the same policies.
type Policy struct {
	// Name is the policy's name, unquoted.
	Name string
	// Limit is the policy's limit, or 0 while it is unknown: then neither
	// RateLimit-Limit nor RateLimit-Policy is sent.
	Limit int
	// Q is the RateLimit-Limit value: Limit in decimal, "10".
	Q string
	// Item is the policy's own member of RateLimit-Policy,
	// `"default";q=10;w=5`.
	Item string
	// List is the RateLimit-Policy value of the decisions this policy
	// binds: Item, or the items of every policy of the list, in order,
	// separated by ", ".
	List string
	// BeforeR is the start of the policy's service limit item in
	// RateLimit, up to its r: `"default";r=`.
	BeforeR string
	// InFlight says the policy limits calls in flight
	// (ratelimit.NamedPolicy's InFlight).
	InFlight bool
}

// NewPolicy returns the values of p sent alone, as the only policy of its
// decisions: List is its Item. unit is the quota unit of the policies
// that count units (see UnitOf), or "". A Limit <= 0 is taken as 0,
// unknown. p's name must have passed ValidName.
func NewPolicy(p ratelimit.NamedPolicy, unit string) Policy {
	limit := max(p.Limit, 0)
	item := Item(p.Name, limit, p.Window, p.InFlight, UnitOf(p, unit))
	return newPolicy(p, limit, item, item)
}

// NewPolicies returns the values of policies, sent together as the
// policies of one decision, in order: each List is every Item, joined.
// unit is as NewPolicy's. Every name must have passed ValidName; with
// several policies, every Limit should be > 0.
func NewPolicies(policies []ratelimit.NamedPolicy, unit string) []Policy {
	items := make([]string, len(policies))
	for i, p := range policies {
		items[i] = Item(p.Name, max(p.Limit, 0), p.Window, p.InFlight, UnitOf(p, unit))
	}
	list := strings.Join(items, ", ")
	ps := make([]Policy, len(policies))
	for i, p := range policies {
		ps[i] = newPolicy(p, max(p.Limit, 0), items[i], list)
	}
	return ps
}

// newPolicy returns the values of p, of limit limit, whose own item is
// item and whose RateLimit-Policy value is list.
func newPolicy(p ratelimit.NamedPolicy, limit int, item, list string) Policy {
	return Policy{
		Name:     p.Name,
		Limit:    limit,
		Q:        strconv.Itoa(limit),
		Item:     item,
		List:     list,
		BeforeR:  Quote(p.Name) + ";r=",
		InFlight: p.InFlight,
	}
}

// InFlightUnit is the qu parameter of a policy that limits calls in
// flight (ratelimit.NamedPolicy's InFlight): the quota unit
// "concurrent-requests" of draft-ietf-httpapi-ratelimit-headers-11
// (section 3.1.2). Rate policies count the draft's default unit,
// "requests", and are sent without qu unless a quota unit names theirs.
const InFlightUnit = `;qu="concurrent-requests"`

// Item returns one policy as a member of RateLimit-Policy:
// `"per-hour";q=1000;w=3600`, with w the window in whole seconds, rounded
// up, and without w when window <= 0; with `;qu="unit"` when unit is not
// empty. A policy of calls in flight names its quota unit (InFlightUnit)
// and has no w, whatever its window (its leases' TTL): the draft's w is
// the time window of a quota that is spent over time, and a limit on
// calls in flight has none, so `"default";q=5;qu="concurrent-requests"`.
// name must have passed ValidName.
func Item(name string, limit int, window time.Duration, inFlight bool, unit string) string {
	item := Quote(name) + ";q=" + strconv.Itoa(limit)
	switch {
	case inFlight:
		return item + InFlightUnit
	case window > 0:
		item += ";w=" + strconv.FormatInt(CeilSeconds(window), 10)
	}
	if unit != "" {
		item += `;qu="` + unit + `"`
	}
	return item
}

// UnitOf returns the quota unit of p for its qu parameter: unit (a
// WithQuotaUnit's) for a policy that counts units, "" for one that counts
// calls (PerCall) or calls in flight.
func UnitOf(p ratelimit.NamedPolicy, unit string) string {
	if p.PerCall || p.InFlight {
		return ""
	}
	return unit
}
