// Package httplimit is net/http middleware that rate-limits requests with any
// ratelimit.Limiter.
//
// PerIP limits each client IP address in one call, behind the proxies
// WithTrustedProxies names, with 429 and Retry-After past the limit and
// the IETF rate-limit fields on every response:
//
//	limiter, err := ratelimit.NewGCRA(10, time.Second) // 10 a second per IP
//	if err != nil { ... }
//	h, err := httplimit.PerIP(limiter, mux,
//		httplimit.WithTrustedProxies(netip.MustParsePrefix("10.0.0.0/8")))
//	if err != nil { ... }
//	http.ListenAndServe(":8080", h)
//
// For any other key, NewMiddleware takes a limiter and a KeyFunc that names
// the client of a request (KeyByBearer, KeyByHeader, KeyByContext, KeyByIP,
// or your own). Its Handler asks the limiter about every request and either
// passes it on or answers it. A request without the credential its KeyFunc
// reads is answered 401 Unauthorized (400 when its error names no
// challenge to send, as KeyByContext's does not), one with a malformed
// credential 400 Bad Request (see Failures). With a plan per key, WithPlanName names each
// key's policy after its plan in the fields ("free", "pro"). WithObserver
// sees every decided request with its ratelimit.Decision, for metrics with
// a route or tenant label. Limiter errors are logged through log/slog by
// default (WithLogger), at most one line per 10 seconds.
//
// # Responses
//
// Every response the limiter decided on carries the rate-limit header fields:
// the structured fields of the IETF draft draft-ietf-httpapi-ratelimit-headers
// as of its version -11 (sections 3 and 4), and the legacy RateLimit-Limit,
// RateLimit-Remaining and RateLimit-Reset of its versions up to -06,
//
//	RateLimit-Policy: "default";q=10;w=5
//	RateLimit: "default";r=3;t=1
//
// where q is the limit, w the seconds the limiter takes to go from empty
// to full, r the whole units remaining, and t the policy's effective
// window (section 4.1.2): the seconds within which the client can use no
// more than r, ratelimit.Decision's NextUnit rounded up. For a token bucket
// or GCRA that is the time until its next unit comes back (so a bucket of
// 10 refilling 2 a second sends t=1, not the 5 s it takes to fill); for a
// fixed or calendar window, the time until the window ends (the window
// open now, for an empty one); for a sliding log, the time until its
// oldest entry leaves; for a sliding counter, the time until one unit more
// than r can have been taken, the units left taken at once. t is left out
// where the Decision does not tell it: for a policy of requests in flight,
// which a release may free at any moment, and for a limiter of another
// package. On a denial, t is the Retry-After: the seconds until
// the request can succeed, so that Retry-After is never earlier than the
// end of the effective window (section 6). A policy of requests in flight
// has qu="concurrent-requests" in place of w (see Limits on requests in
// flight); WithQuotaUnit names the unit of cost-weighted policies (qu,
// section 3.1.2), and WithPartitionKey adds a partition key to each item
// (pk, section 4.1.3). The legacy fields keep the meaning of the drafts
// that defined them: RateLimit-Limit and RateLimit-Remaining are q and r,
// and RateLimit-Reset the seconds until the key is back to its full limit
// (the Decision's ResetAfter), or the Retry-After on a denial.
//
// Everything comes from the request's ratelimit.Decision
// (the limiter's Decide): q and RateLimit-Limit are the Limit of the policy
// that bound the decision, w its Window, and RateLimit-Policy lists every
// policy that applied, so a Guard, DenyCache or Shadow names the same
// policies as the limiter it wraps, also while a Guard's backend is down
// (under FailOver, when the fallback's policies go by the backend's
// names). A limiter of another package, which tells only a Result, is
// sent as one policy of the Result's Limit, named "default" and without w
// or t (see WithPolicyName and WithPolicyWindow). A limit that is not
// known (0) is never sent. WithHeaderStyle chooses the legacy fields, the
// IETF ones or both (the default).
//
// A denied request is answered 429 Too Many Requests with Retry-After in
// whole seconds (at least 1) and a short body: an RFC 9457 problem document
// of the draft's type https://iana.org/assignments/http-problem-types#quota-exceeded
// (QuotaExceededType, registered for 429) for clients that take JSON,
// plain text otherwise. The wrapped handler is not called.
// WithDeniedHandler replaces that answer.
//
// # Several policies
//
// A limiter of several limits at once, such as a ratelimit.Composite of 10
// requests a second and 1000 an hour (or a Guard, DenyCache or Shadow
// around one), has a Decision that lists them all, says which one bound
// the decision (on an allowed request, the one with the smallest share of
// its limit left; on a denial, the one whose wait is the longest), and
// holds each one's Result. Every response lists all the policies in
// RateLimit-Policy, in order, under the names the limiter gives them. An
// allowed request's RateLimit lists the service limit of every policy, the
// one that bound first and then the others in order, each with its own r
// and its own t:
//
//	RateLimit-Policy: "per-second";q=10;w=1, "per-hour";q=1000;w=3600
//	RateLimit: "per-hour";r=3;t=4, "per-second";r=9;t=1
//
// so that a client sees each quota's state: the draft defines the service
// limit per policy (section 4.1), and a per-second bucket's t is its own,
// not the hours until an hourly quota beside it is full. A denial lists
// the policy that denied alone, whose t is the Retry-After: the other
// policies did not refuse the request, and their t (an hour's end, say)
// would outlast the Retry-After the draft asks them not to outlast
// (section 6). A Decision that holds the bound policy's Result only (a
// Guard's answer made without its backend, say) lists that one.
// RateLimit-Limit and RateLimit-Remaining are the bound policy's, and
// RateLimit-Reset the longest wait of all the policies (until every one is
// full again, or until every one would allow the request), so that it
// agrees with Retry-After. A denial's problem document names the bound
// policy in violated-policies. Each list of policies is formatted when
// first seen, and the latest four are kept (a limiter built WithPolicyFunc
// has one per plan). WithPolicyName and WithPolicyWindow describe a
// limiter's one policy, and are errors with a limiter of several. Every
// policy of a limiter of several must have a limit > 0 and a name of
// printable ASCII: NewMiddleware reads the limiter's policies once (for
// the key "") and refuses it when one does not, and a request whose
// Decision lists such a policy is answered as a limiter error that is not
// a backend failure (see Failures).
//
// # Stacked middlewares
//
// When several Middlewares apply to one request (a plan per tenant around
// a token budget, say, or a per-IP limit in a Shadow around both), the
// response carries one coherent set of fields. An inner Middleware puts its
// own RateLimit item first and then the outer ones' items of other names,
// lists its policies in RateLimit-Policy and then the outer ones' of other
// names, and sets the legacy fields, which so describe the first RateLimit
// item; it sets the fields of both styles when the outer one set fields of
// a style it does not send itself. On a 413 the inner Middleware only adds
// its policies to RateLimit-Policy, and leaves the outer one's legacy
// fields, which still describe the first RateLimit item. RateLimit-Shadow
// lists every shadowed policy that would have denied, the innermost
// first. A policy whose name is listed already is not listed again: two
// Middlewares on the default name "default" show one of them only, so give
// the policies of stacked Middlewares distinct names (WithPolicyName).
//
// A request that an inner Middleware refuses (429, 413 or 503) never
// reaches its handler: every outer Middleware built WithRefund or
// WithSettle gives back the units the request took from its limiter,
// whatever its refund rule. The inner Middleware finds the outer ones
// through the http.ResponseWriter it was given: the outer one's, or a
// writer around it with an Unwrap method (as http.ResponseController
// requires); a writer in between without one hides them, and a request the
// handler makes of its own with a writer of its own is not theirs. An
// outer Middleware without either option keeps the units.
//
// # Adjusting after the handler
//
// The units a request takes (1, or WithCost's, at least 1: a request whose
// handler runs is never free of the limit, so one of cost 0 takes 1 to
// run, see CostFunc) are decided before its handler runs. Two options
// correct them once it has returned, on a limiter that is a
// ratelimit.Adjuster (every limiter of package ratelimit, Composite, Guard,
// DenyCache and Shadow are):
//
//   - WithRefund gives the units back when a rule says the response should
//     not count, given the request and the response's status: not counting
//     5xx answers, say, or, on a login endpoint keyed by account, counting
//     failed attempts only (give back on success).
//   - WithSettle lets the handler report the request's true cost with
//     SetCost (rows read, tokens generated); the middleware then settles
//     the units taken at that cost, giving the difference back or taking
//     the rest, into debt if need be (at most one limit by default, see
//     ratelimit.WithMaxDebt), so that later requests wait it out; a cost
//     above WithMaxSettle's bound (ten limits by default) is settled at
//     the bound, and the WithOnError hook hears of it.
//   - WithDecisionContext puts each passed-on request's Decision in its
//     context for the handler (DecisionOf): its Source says whether the
//     backend or a Guard's fallback answered, so a handler that adjusts
//     by itself never settles a fallback's decision at the backend.
//
// A refund wins over a reported cost. Every request that ran is adjusted
// for itself, once: the adjustment carries a token the Middleware makes
// for that request alone (ratelimit.WithToken), never one a client sends,
// so no header (an Idempotency-Key, say) can merge the adjustments of two
// requests that each ran, and an adjustment that fails with
// ratelimit.ErrBackend is tried once more with its token, which on Redis
// applies it once whether or not the first try had. The adjustment is
// made before ServeHTTP returns, under the request's context without its cancellation
// and bounded by DefaultAdjustTimeout (WithAdjustTimeout), with
// ratelimit.TakenAt the time read just after the request was decided (on
// the clock of WithClock, for an in-process limiter on a clock of its own);
// its errors go to the WithOnError hook, wrapping ErrAdjustment. Denied,
// skipped and failed-open requests (a limiter error under the middleware's
// own failure handling) took nothing and are never adjusted, nor are
// requests a Shadow let through against a denial (the Decision's
// WouldDeny), nor requests a decorator answered without its backend (the
// Decision's Source is not ratelimit.FromBackend: a Guard's FailOpen or
// FailOver answer took nothing from the backend). The fields of the
// response were set before the handler ran, so they do not show the
// adjustment; the next response does.
//
// # Limits on requests in flight
//
// A limit on work in flight (at most 5 requests of a key at once: a
// ratelimit.Concurrency or RedisConcurrency, or a Composite with such a
// part) needs WithLeases, and NewMiddleware refuses such a limiter
// without it. Each request is then decided by the limiter's Acquire, and the
// ratelimit.Lease that holds an allowed request's units is held for its
// handler's whole life: released once the handler has returned (a
// streamed response, after its last write) or panicked (the panic then
// goes on), under the request's context without its cancellation and
// bounded by 5 s, and extended every third of its TTL while the handler
// runs, by a timer that starts no goroutine until it fires. A failed
// extension or release goes to the WithOnError hook, wrapping ErrLease,
// and cancels nothing. The handler finds its lease with LeaseOf. A denial
// is a 429 whose Retry-After is the time until enough of the key's leases
// expire, were none released (a release can free a slot much sooner), and
// the fields name the draft's quota unit for requests in flight, without
// w; an allowed request's item has no t, as a release may free a slot at
// any moment:
//
//	RateLimit-Policy: "default";q=5;qu="concurrent-requests"
//	RateLimit: "default";r=0;t=12
//
// Over a rate limiter, whose leases hold nothing, WithLeases changes
// nothing.
//
// # Rolling out a limit in shadow mode
//
// A ratelimit.Shadow decides and spends every request as if its limit were
// enforced, and lets through those it would deny while it shadows; its
// SetEnforce switches to enforcing at run time. Given one, the middleware
// never answers 429 while it shadows: a request it would have denied is
// passed on with the fields of an allowed request (the limiter's limit,
// remaining units and reset time), without Retry-After, and with
// WithShadowHeader one more field that says it would have been denied, the
// RateLimit value the denial would have carried:
//
//	RateLimit-Shadow: "default";r=0;t=1
//
// Such a request took nothing, so WithRefund and WithSettle never adjust
// it, and SetCost reports false in its handler. The WithDeniedHandler is
// not called for it, and WithOnError sees the limiter's errors as before:
// a Shadow changes verdicts, not errors. To count or log the requests that
// would have been denied, give the Shadow a ratelimit.Hooks: their Events
// come with Source ratelimit.FromShadow, WouldDeny, and the denial in
// Enforced. Once SetEnforce(true) is called, the next request is decided
// as by the bare limiter, 429 included.
//
// The middleware learns which requests would have been denied from the
// Decision's WouldDeny, which a Guard or DenyCache around the Shadow
// passes on. Still, put the Shadow outermost (a Guard or DenyCache goes
// inside it), so that every denial of the stack is shadowed, a Guard's
// fail-closed ones included. WithShadowHeader applies to any limiter;
// with one that never shadows, it adds nothing.
//
// # Failures
//
// A limiter error goes to the WithOnError hook, if any, or else to the log
// (slog.Default(), or WithLogger's: at slog.LevelWarn, with the error, the
// method and the route, never the key; at most one line per 10 seconds,
// the next one counting those suppressed), and is then answered by its
// class (see package ratelimit):
//
//   - A failure of the limiter's backend (ratelimit.ErrBackend: Redis down,
//     a timeout, a server error, a reply it cannot read), or any error of
//     a limiter of another package, fails open: the request passes without
//     rate-limit fields. WithFailClosed answers 503 Service Unavailable,
//     with Retry-After, instead, and a problem document of the draft's
//     type https://iana.org/assignments/http-problem-types#temporary-reduced-capacity
//     (TemporaryReducedCapacityType, registered for 503, section 5.2):
//     the server serves no request it cannot limit.
//   - Any other limiter error leaves the request's limit unknown: a
//     PolicyFunc that failed (ratelimit.ErrPolicy), a policy or keys the
//     limiter refuses (ratelimit.ErrInvalidConfig, ratelimit.ErrKeysApart),
//     a key whose stored state is not the limiter's
//     (ratelimit.ErrCorruptState). It is answered 503 with Retry-After
//     (WithFailClosed's, or 1 s) and a problem document of type
//     about:blank, so that a broken plan lookup does not lift the plan's
//     limit. WithPolicyErrorsPass lets such requests pass
//     without fields instead, unless WithFailClosed is given too: then
//     every limiter error is answered 503.
//
// A ratelimit.Guard answers its backend's failures by its own failure
// policy, with a nil error, so behind a Guard they do not reach this
// choice (but for a request whose context ended first): pick the failure
// policy in the Guard. A cost greater than the limit
// (ratelimit.ErrCostExceedsLimit) is not a failure: it can never succeed,
// and is answered 413 Content Too Large, with a problem document of type
// about:blank that names the policy (the draft registers its
// quota-exceeded for 429 only). An error from the KeyFunc or
// CostFunc, which leaves the limiter unasked, and a key the limiter
// refuses as too long (ratelimit.ErrInvalidKey, see
// ratelimit.WithMaxKeyLength) are answered by their class unless
// WithKeyErrorHandler says otherwise: 401 Unauthorized for a request
// without its credential (ErrMissingCredential, such as KeyByBearer's
// request without a Bearer credential, with the WWW-Authenticate
// challenge the error names; KeyByContext's without its value names
// none, and is answered 400), 400
// Bad Request for the client's other mistakes (ErrMalformedCredential,
// ErrInvalidRequest, such as KeyByHeader's request without its header,
// ratelimit.ErrInvalidCost, such as a negative cost, or
// ratelimit.ErrInvalidKey), 500 Internal Server Error for any other (the
// server's); such a request is never passed on. grpclimit answers the
// same classes codes.Unauthenticated, codes.InvalidArgument and
// codes.Internal.
//
// # Concurrency
//
// A Middleware and the handlers it returns are safe for concurrent use and
// start no goroutines (under WithLeases, a lease's extension runs in the
// goroutine that time.AfterFunc starts when its timer fires); their only
// mutable state is a cache of the fields formatted for the last four
// lists of policies seen and, under WithRefund or WithSettle, the counter
// of the adjustments' tokens. Without WithRefund, WithSettle and WithLeases,
// the handler gets the request and http.ResponseWriter it was given;
// WithRefund wraps the writer to learn the status (the wrapper has an
// Unwrap method for http.ResponseController), WithSettle gives the
// request a context that carries its cost, and WithLeases one that
// carries its lease.
package httplimit
