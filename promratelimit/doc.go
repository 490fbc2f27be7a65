// Package promratelimit exports what ratelimit's limiters and decorators
// report to their ratelimit.Hooks as Prometheus metrics, and what a
// middleware's observer tells of each request, on a prometheus.Registerer
// the caller chooses.
//
// It is a module of its own, so the ratelimit module does not depend on
// Prometheus. Create a Hooks on a registry, give it to any limiter with
// ratelimit.WithHooks (and a name with ratelimit.WithName), and to a Guard,
// DenyCache or Shadow through its config's Hooks field:
//
//	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
//	hooks, err := promratelimit.NewHooks(reg)
//	limiter, err := ratelimit.NewGCRA(100, time.Minute, ratelimit.WithHooks(hooks), ratelimit.WithName("api"))
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// # Metrics
//
//	metric                               type       labels                      meaning
//	ratelimit_decisions_total            counter    limiter, source, outcome    every decision reported
//	ratelimit_decision_units_total       counter    limiter, outcome            the units the decisions asked for (their cost)
//	ratelimit_decision_duration_seconds  histogram  limiter, source             the time each decision took (DurationBuckets)
//	ratelimit_retry_after_seconds        histogram  limiter                     each denial's RetryAfter (RetryAfterBuckets)
//	ratelimit_errors_total               counter    limiter, op, error_type     the calls that returned an error, decisions and adjustments
//	ratelimit_adjustments_total          counter    limiter, op, outcome        every Refund, Settle, Reset, Release and Extend
//	ratelimit_adjustment_units_total     counter    limiter, op, units          the units of the adjustments that succeeded
//	ratelimit_breakers                   gauge      breaker, state              the circuit breakers open or half-open
//	ratelimit_breaker_transitions_total  counter    breaker, to                 the breakers' state changes
//	ratelimit_leases_held                gauge      limiter                     the leases acquired and not yet given back by a Release (see below)
//	ratelimit_requests_total             counter    route, policy, outcome      the requests a middleware decided on (Observe)
//
// The labels and their values:
//
//   - limiter: the reporter's name (ratelimit.Event.Limiter): what WithName
//     or a decorator's config Name gave, or its type ("GCRA", "Guard",
//     ...). Names come from the program: never build one from request
//     data.
//   - source: who answered, ratelimit.Source's String: "backend",
//     "fallback", "fail_open", "fail_closed" (a Guard's failure policy,
//     the backend failing or its breaker open), "deny_cache" (a DenyCache's
//     remembered denial: Redis calls saved), "shadow" (a denial a Shadow
//     let through). The backend's latency is the duration of source
//     "backend" of a Redis limiter.
//   - outcome: "allowed", "denied", "rejected" or "error" on decisions and
//     requests. "rejected" is an error that is the request's own mistake,
//     which httplimit answers 401, 400 or 413 (grpclimit Unauthenticated,
//     InvalidArgument, or ResourceExhausted without a retry): a missing or
//     malformed credential (httplimit.ErrMissingCredential,
//     ErrMalformedCredential), a request that cannot be rate-limited as
//     sent (httplimit.ErrInvalidRequest), a bad cost
//     (ratelimit.ErrInvalidCost), a cost above the limit
//     (ratelimit.ErrCostExceedsLimit), a key the limiter refuses
//     (ratelimit.ErrInvalidKey). "error" is any other: the backend failing,
//     and the server's own mistakes (a limiter never built, a PolicyFunc
//     that failed, a KeyFunc's error of no client class), so that an alert
//     on outcome="error" does not fire on clients sending bad requests.
//     Both count in ratelimit_errors_total. A denial a Shadow let through
//     is "denied", what the enforced limit would have answered, and its
//     RetryAfter the enforced one. "ok" or "error" on adjustments.
//   - op: "decide" (Allow, Decide, Acquire) on errors, and the
//     adjustment's call, ratelimit.AdjustOp's String: "settle", "refund",
//     "reset", "release", "extend".
//   - error_type: "invalid_cost", "cost_exceeds_limit", "corrupt_state",
//     "invalid_config", "invalid_key", "lease_expired", "canceled",
//     "deadline_exceeded", "backend" (any other ratelimit.ErrBackend: Redis
//     unreachable or answering an error), or "other". An adjustment that
//     failed with "backend" or "deadline_exceeded" may or may not have
//     been applied: retry it with the same ratelimit.WithToken token.
//   - units: "taken", the units an adjustment replaced (a Refund's n, a
//     Settle's taken, the lease's units of a Release that gave them back,
//     0 for one that found the lease released or expired), and "cost",
//     those it charged instead (a Settle's cost; 0 for a Refund and a
//     Release). "taken" minus "cost" is the units given back. A Reset
//     counts none.
//   - breaker: DefaultBreaker, or the name given to Breaker. state: "open"
//     or "half_open" (closed breakers are not counted: a Hooks does not
//     know a Guard until it reports a change); to: the state changed to,
//     "closed" included. On a Redis Cluster or Ring, where a Guard keeps a
//     breaker per node, ratelimit_breakers counts the nodes.
//   - route: what the caller passed to Observe: with HTTPObserver, the
//     http.ServeMux pattern that matched or what its route function
//     returns; with GRPCObserver, the full method name; the first WithMaxRoutes distinct values (DefaultMaxRoutes),
//     the others as OtherRoute. policy: the name of the policy that bound
//     the request's Decision ("default" for a limiter of one policy, a
//     plan's name for a per-key policy that names one), NoPolicy for none.
//
// The gauge ratelimit_leases_held adds 1 for each lease a concurrency
// limiter grants, and takes 1 off on the Release that gives its units
// back (a ratelimit.AdjustRelease whose Result.Allowed is true). A second
// Release of the same lease, a Release that failed, and one that came
// after the lease expired or its key was Reset take nothing off, so a
// double release does not make it drift. But a lease that expires (its
// holder never released it, or released it too late) stays counted for
// the life of the process: the limiter, not the process, knows when a
// lease expires. A gauge that keeps rising counts leases leaked or held
// past their TTL, besides those held now.
//
// Keys (user ids, API keys, IPs) are never a label: they are unbounded and
// would make a series each, and may be secrets. The Hooks tells the
// limiters so (ratelimit.KeylessHooks), and they report no key to it. The
// series are therefore limiters × sources × outcomes, a handful per
// limiter, plus routes × policies × outcomes for the requests.
//
// A call that passes several reporters (a limiter WithHooks inside a Guard
// with the same Hooks) is counted once by each, under each's limiter label:
// filter by it, or report from one layer only.
//
// Every series of a histogram costs its buckets: DurationBuckets has 16
// and RetryAfterBuckets 12 (WithDurationBuckets and WithRetryAfterBuckets
// replace them).
//
// # Outbound calls
//
// NewOutboundObserver returns an observer for outbound.Config.Observer,
// which records what an outbound.Upstream (a client of someone else's
// API, within its limits) reports:
//
//	metric                                     type       labels                       meaning
//	ratelimit_outbound_wait_seconds            histogram  limiter                      how long each call that waited waited before it was sent (WaitBuckets)
//	ratelimit_outbound_refusals_total          counter    limiter, reason, error_type  the calls not sent
//	ratelimit_outbound_upstream_limited_total  counter    limiter, status              the answers by which the upstream refused a call for its limit
//	ratelimit_outbound_pause_seconds           histogram  limiter                      the pauses answers set, bounded by Config.MaxPause (PauseBuckets); _count counts them
//	ratelimit_outbound_learned_total           counter    limiter                      the changes of the limit the limiter applies an answer made
//	ratelimit_outbound_retries_total           counter    limiter, status              the calls sent again after the upstream refused them
//	ratelimit_outbound_store_failures_total    counter    limiter, error_type          the failures of the Upstream's Store (the calls went on by the limiter alone)
//	ratelimit_outbound_settle_failures_total   counter    limiter, error_type          the settles of a call's true cost that failed
//
// Their labels:
//
//   - limiter: WithLimiterName's name, DefaultOutboundLimiter without one.
//     An event names no upstream: give each Upstream an observer of its
//     own. Observers of different names share a registry.
//   - reason: "limited" when the call would have waited past
//     Config.MaxWait or its deadline (its error wraps outbound.ErrLimited),
//     with an empty error_type; "error" when the limiter failed or the
//     call's context ended during a wait, with error_type as above.
//   - status: the answer's status (429, or 503 with a Retry-After; on a
//     retry, the answer that refused): the first MaxStatuses distinct
//     statuses, the others, and any outside 100 to 599, as OtherStatus.
//
// The partition of a call (a host, a route, a credential) is never a
// label: partitions may be unbounded or secret. So the limit an upstream
// states is counted, not kept in a gauge: without the partition, one gauge
// would show whichever partition spoke last. With a shared Store, a pause
// or a limit one replica learns holds for the whole fleet, but only the
// replica that read the answer records it: sum over the fleet.
//
// # Queries
//
//	sum by (limiter) (rate(ratelimit_decisions_total{outcome="denied"}[5m]))   denials per second
//	sum(rate(ratelimit_decisions_total{source=~"fallback|fail_open|fail_closed"}[5m]))   calls the failure policy answered
//	sum(rate(ratelimit_decisions_total{source="deny_cache"}[5m]))             Redis calls a DenyCache saved
//	sum(rate(ratelimit_adjustment_units_total{op="settle",units="cost"}[5m])) units settled per second (such as LLM tokens)
//	sum by (route) (rate(ratelimit_requests_total{outcome="denied"}[5m]))     denials per route
//	sum by (limiter) (rate(ratelimit_outbound_upstream_limited_total[5m]))   the upstreams' 429s per second
//
// # Registration
//
// NewHooks registers on the Registerer it is given and nowhere else;
// prometheus.WrapRegistererWith adds constant labels (a region, a tier),
// prometheus.WrapRegistererWithPrefix a prefix. A second NewHooks on the
// same registry is an error (prometheus.AlreadyRegisteredError), not a
// panic: share one Hooks between limiters, and derive one per Guard with
// Breaker.
package promratelimit
