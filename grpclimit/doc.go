// Package grpclimit is gRPC server middleware that rate-limits calls with
// any ratelimit.Limiter, as package httplimit does for net/http, and gRPC
// client middleware that keeps a client's calls within an upstream's
// limits, as package outbound does for net/http (see Client side).
//
// NewInterceptor takes a limiter and a KeyFunc that names the caller of a
// call from its context and method (KeyByPeer, KeyByBearer,
// KeyByMetadata, or your own). Its Unary and Stream methods return the server interceptors, which
// ask the limiter about every call and either pass it to the handler or
// answer it; a stream is decided once, when it opens. WithObserver sees
// every decided call with its method and ratelimit.Decision, for metrics
// with a method or tenant label; limiter errors are logged through
// log/slog by default (WithLogger), at most one line per 10 seconds.
//
//	limiter, _ := ratelimit.NewRedisTokenBucket(client, ratelimit.PerSecond(2), 10)
//	in, _ := grpclimit.NewInterceptor(limiter, grpclimit.KeyByMetadata("x-api-key"),
//		grpclimit.WithSkip(grpclimit.SkipHealthAndReflection))
//	srv := grpc.NewServer(
//		grpc.ChainUnaryInterceptor(in.Unary()),
//		grpc.ChainStreamInterceptor(in.Stream()))
//
// # Response metadata
//
// Every call the limiter decided carries, in its response header metadata,
// the fields httplimit sends as HTTP header fields, under the same names in
// lower case and with the same values:
//
//	ratelimit-limit: 10
//	ratelimit-remaining: 3
//	ratelimit-reset: 2
//	ratelimit-policy: "default";q=10;w=5
//	ratelimit: "default";r=3;t=1
//
// where q is the limit, w the seconds the limiter takes to go from empty
// to full, r the whole units remaining, and t the policy's effective
// window as the draft draft-ietf-httpapi-ratelimit-headers-11 defines it
// (section 4.1.2): the seconds within which the client can use no more
// than r, ratelimit.Decision's NextUnit rounded up (a token bucket's or
// GCRA's next unit, a fixed or calendar window's end, a sliding log's
// oldest entry leaving, a sliding counter's next unit with the units left
// taken at once), left out where the Decision does not tell it (a policy
// of calls in flight, a limiter of another package). On a denial, t is the retry-after. ratelimit-reset keeps the
// meaning of the draft's versions up to -06: the seconds until the key is
// back to its full limit on an allowed call, or the retry-after on a
// denial. All are rounded up. A denial adds retry-after, in whole
// seconds, at least 1. WithHeaderStyle chooses the legacy fields, the IETF
// ones or both (the default); WithQuotaUnit names the unit of
// cost-weighted policies (qu, section 3.1.2), and WithPartitionKey adds a
// partition key to each item (pk, section 4.1.3).
//
// Every field comes from the one value the limiter returns for the call,
// its ratelimit.Decision (the limiter's Decide): ratelimit-policy lists the
// Decision's Policies, in order, and ratelimit-limit and
// ratelimit-remaining are those of the policy that bound it
// (Decision.Policy) with the Result's numbers. So a Guard, DenyCache or
// Shadow gives the same fields as the limiter it wraps, a limiter built
// WithPolicyFunc shows each key's own policy, and a limiter of several
// limits at once (a ratelimit.Composite, or a decorator around one) lists
// every policy; on an allowed call, ratelimit lists every policy's service
// limit, the one that bound first, each with its own r and t, and on a
// denial the policy that denied alone, whose t is the retry-after (the
// others' windows, an hour's end say, would outlast it), as httplimit
// does:
//
//	ratelimit-policy: "per-second";q=10;w=1, "per-hour";q=1000;w=3600
//	ratelimit: "per-hour";r=3;t=4, "per-second";r=9;t=1
//
// A Limiter of another package, which is not a ratelimit.Decider, has one
// policy, "default", whose q is each Result's Limit, with no w and no t.
//
// A ratelimit.Prefetch (alone or inside a Guard, DenyCache or Shadow) tells
// its backend's policy too; a call it spends from a block tells, in
// ratelimit-remaining and r, the units left in this replica's block (a
// lower bound of what the shared key holds), in ratelimit-reset, the
// block's ResetAfter, and in t, one unit's time (or a fixed window's end)
// (see ratelimit.Prefetch's Decisions and ratelimit.Decision's NextUnit).
//
// # Answers
//
// A denied call is answered codes.ResourceExhausted, with two status
// details: an errdetails.RetryInfo whose RetryDelay is the limiter's
// RetryAfter, exactly (retry-after is that delay rounded up to whole
// seconds), and an errdetails.QuotaFailure whose violation names the
// policy that bound the decision (QuotaId, and Subject "policy:NAME"). Its
// handler is not called.
//
// A call whose cost is above the limit (ratelimit.ErrCostExceedsLimit),
// which httplimit answers 413 Content Too Large, can never succeed: it is
// answered codes.ResourceExhausted, as gRPC answers a message larger than
// the largest it accepts, with a QuotaFailure and no RetryInfo (no wait
// helps), and only ratelimit-limit and ratelimit-policy in the metadata.
// Clients tell the two apart by the RetryInfo.
//
// An error from the KeyFunc or CostFunc leaves the limiter unasked and
// answers the call by its class, without the error's text: with the
// error's own gRPC status when it carries one; codes.Unauthenticated for a
// call without its credential (ErrMissingCredential: KeyByBearer's call
// without a Bearer credential, KeyByMetadata's without its key);
// codes.InvalidArgument for the caller's other mistakes (a malformed
// credential, ErrMalformedCredential, or a cost that is not valid: a
// negative cost, or an error wrapping ratelimit.ErrInvalidCost);
// codes.Internal for any other, the server's (KeyByPeer's call without an
// IP address, say). These are the classes httplimit answers 401 (400 for a
// missing credential whose error names no challenge), 400 and 500, through
// the same errors; httplimit's KeyByHeader, unlike KeyByMetadata, answers a
// missing header 400, since a header is not always a credential. A key the limiter refuses as longer than it takes
// (ratelimit.ErrInvalidKey, see ratelimit.WithMaxKeyLength) answers
// codes.InvalidArgument: the call is never let through unlimited. A call
// of cost 0 takes 1 unit all the same (see CostFunc): a call whose handler
// runs is never free of the limit.
//
// # Failures and shadow mode
//
// A failure of the limiter's backend (ratelimit.ErrBackend) fails open:
// the call passes without rate-limit metadata and the error goes to the
// WithOnError hook, if any, or else to the log (slog.Default(), or
// WithLogger's: at slog.LevelWarn, with the error and the method, never
// the key; at most one line per 10 seconds, the next one counting those
// suppressed). WithFailClosed
// answers codes.Unavailable instead, with a RetryInfo and retry-after. A
// ratelimit.Guard answers its backend's failures by its own failure
// policy, with a nil error, so behind a Guard only the errors it passes
// through reach this choice: pick the failure policy in the Guard.
//
// A limiter error that is not a failure of its backend is not a backend
// that is down: the call's limit is unknown (ratelimit.ErrPolicy, a
// ratelimit.PolicyFunc that failed, say a plan lookup; another error of
// class ratelimit.ErrCaller; or ratelimit.ErrCorruptState), and letting
// the call through would silently lift its limit. So such a call is
// answered codes.Unavailable with a RetryInfo and retry-after
// (WithFailClosed's delay, or 1 s) whether WithFailClosed is given or not,
// after the WithOnError hook. WithPolicyErrorsPass lets such calls through
// without metadata instead.
//
// To watch what a limit would do before enforcing it, wrap the limiter in
// a shadow limiter (ratelimit.NewShadow), which decides and spends as if
// enforced and lets its denials through: the call gets the fields of an
// allowed call (its Decision's Result), and the interceptor needs nothing
// of its own for it.
//
// # Limits on calls in flight
//
// A limit on work in flight (at most 5 calls or open streams of a key at
// once: a ratelimit.Concurrency or RedisConcurrency, or a Composite with
// such a part) needs WithLeases, and NewInterceptor refuses such a limiter
// without it. Unary and Stream then decide each call by
// the limiter's Acquire, and the ratelimit.Lease that holds an allowed call's
// units is held for its handler's whole life (a stream's, until it ends):
// released once the handler has returned or panicked (the panic then goes
// on), under the call's context without its cancellation and bounded by
// 5 s, and extended every third of its TTL while the handler runs, by a
// timer that starts no goroutine until it fires. A failed extension or
// release goes to the WithOnError hook, wrapping ErrLease, and cancels
// nothing. The handler finds its lease with LeaseOf. A denial is answered
// codes.ResourceExhausted as above, with a RetryInfo of the time until
// enough of the key's leases expire, were none released (a release can
// free a slot much sooner), and the policy in flight names the draft's
// quota unit, without w:
//
//	ratelimit-policy: "default";q=5;qu="concurrent-requests"
//	ratelimit: "default";r=0;t=12
//
// Limit cannot hold a lease, and answers codes.Internal with such a
// limiter. Over a rate limiter, whose leases hold nothing, WithLeases
// changes nothing.
//
// # go-grpc-middleware
//
// go-grpc-middleware v2's interceptors/ratelimit package takes a Limiter,
// interface{ Limit(ctx context.Context) error }, and an Interceptor is one:
//
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(in)))
//
// Limit decides as Unary does and sets the same metadata, but those
// interceptors answer every error with a codes.ResourceExhausted status of
// their own that quotes its message: the client gets no RetryInfo or
// QuotaFailure, and key errors and fail-closed answers become
// ResourceExhausted too. The retry-after metadata still gets through. Use
// Unary and Stream when clients should see the details.
//
// # Client side
//
// UnaryClientInterceptor and StreamClientInterceptor send each call
// through an outbound.Upstream: the call waits for the Upstream's limiter
// and for any pause its partition is under (the ClientConn's Target() by
// default, WithClientPartition otherwise), or fails at once, unsent, with
// a codes.ResourceExhausted status whose error wraps outbound.ErrLimited
// when it would wait past the Upstream's MaxWait or its deadline. Its
// answer then teaches the Upstream: its code as an HTTP status
// (HTTPStatus: ResourceExhausted is 429, Unavailable 503) and its header
// and trailer metadata, read as HTTP fields, so that the fields the server
// interceptors above write (retry-after, ratelimit, ratelimit-policy)
// pause the partition or lower its limit, for every replica that shares
// the Upstream's Store.
//
//	limiter, _ := ratelimit.NewRedisGCRA(rdb, 10, time.Second, // the upstream's documented 10/s
//		ratelimit.WithPolicyFunc(outbound.LearnedPolicy))
//	up, _ := outbound.New(limiter, outbound.Config{Store: store})
//	conn, _ := grpc.NewClient(target,
//		grpc.WithUnaryInterceptor(grpclimit.UnaryClientInterceptor(up)),
//		grpc.WithStreamInterceptor(grpclimit.StreamClientInterceptor(up)))
//
// A stream is admitted once, when it opens; its header is learned from
// when its first message arrives, and its end when the caller reads it.
// The client interceptors never retry: gRPC's retry policy (in the service
// config) retries inside the call, and its attempts after the first are
// neither admitted nor counted.
//
// # Concurrency
//
// An Interceptor and the interceptors it returns are safe for concurrent
// use and start no goroutines (under WithLeases, a lease's extension runs
// in the goroutine that time.AfterFunc starts when its timer fires).
// Their only state is a cache of the
// formatted values of the last four lists of policies they saw, which
// changes what is allocated, never what is sent.
package grpclimit
