// Package httplimit is net/http middleware that rate-limits requests with any
// ratelimit.Limiter.
//
// NewMiddleware takes a limiter and a KeyFunc that names the client of a
// request (KeyByHeader, KeyByContext, KeyByIP, or your own). Its Handler asks
// the limiter about every request and either passes it on or answers it.
//
// # Responses
//
// Every response the limiter decided on carries the rate-limit header fields:
// the legacy RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset, and the
// structured fields of the IETF draft draft-ietf-httpapi-ratelimit-headers-11,
//
//	RateLimit-Policy: "default";q=10;w=5
//	RateLimit: "default";r=3;t=2
//
// where q is the limit, r the whole units remaining, w the seconds the
// limiter takes to go from empty to full, and t the seconds until the key is
// back to its full limit on an allowed request, or until the request can
// succeed on a denial (so that it agrees with Retry-After), all rounded up.
// RateLimit-Reset is t too. The limit and w come from the limiter's
// ratelimit.Policy, read once when the middleware is built, so a Guard or
// DenyCache gives the same fields as the limiter it wraps. WithHeaderStyle
// chooses the legacy fields, the IETF ones or both (the default).
//
// A denied request is answered 429 Too Many Requests with Retry-After in
// whole seconds (at least 1) and a short body: an RFC 9457 problem document
// of the draft's type https://iana.org/assignments/http-problem-types#quota-exceeded
// for clients that take JSON, plain text otherwise. The wrapped handler is
// not called. WithDeniedHandler replaces that answer.
//
// # Failures
//
// A limiter error fails open: the request passes without rate-limit fields
// and the error goes to the WithOnError hook, if any; nothing is logged.
// WithFailClosed answers 503 Service Unavailable instead. A ratelimit.Guard
// answers its backend's failures by its own failure policy, with a nil
// error, so behind a Guard only the errors it passes through (such as one
// wrapping ratelimit.ErrCorruptState) reach this choice: pick the failure
// policy in the Guard. A cost greater than
// the limit (ratelimit.ErrCostExceedsLimit) is not a failure: it can never
// succeed, and is answered 413 Content Too Large. An error from the KeyFunc
// or CostFunc is answered 500 Internal Server Error unless
// WithKeyErrorHandler says otherwise.
//
// # Concurrency
//
// A Middleware and the handlers it returns are safe for concurrent use, hold
// no mutable state of their own and start no goroutines.
package httplimit
