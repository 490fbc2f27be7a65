package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/adapt"
	"github.com/ratelimit-go/ratelimit/internal/errlog"
	"github.com/ratelimit-go/ratelimit/internal/keyclass"
	"github.com/ratelimit-go/ratelimit/internal/leasehold"
	"github.com/ratelimit-go/ratelimit/internal/nilcheck"
	"github.com/ratelimit-go/ratelimit/internal/ratefields"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Interceptor rate-limits the calls of a gRPC server with one Limiter,
// keyed by a KeyFunc: Unary and Stream return its server interceptors, and
// Limit makes it the Limiter of go-grpc-middleware's ratelimit
// interceptors.
//
// An Interceptor is immutable and safe for concurrent use. The zero value
// is not usable (its interceptors answer codes.Internal); create one with
// NewInterceptor.
type Interceptor struct {
	limiter          ratelimit.Limiter
	key              KeyFunc
	cost             CostFunc
	skip             SkipFunc
	onError          func(context.Context, string, error) // WithOnError's, or logError
	observer         Observer
	planName         func(string) (string, bool) // WithPlanName's, or nil
	log              *errlog.Logger              // the default log of errors; nil under WithOnError
	failClosed       bool
	policyErrorsPass bool
	closedRetry      time.Duration
	fields           *fields
	partition        *partitioner // WithPartitionKey's, or nil

	// leases says each call's units are taken with the limiter's Acquire and
	// held for its handler's life (WithLeases); inFlight, that the
	// limiter limits calls in flight; after starts the timer that extends
	// a held lease (time.AfterFunc; tests replace it).
	leases   bool
	inFlight bool
	after    func(time.Duration, func()) leasehold.Timer
}

// NewInterceptor returns an Interceptor that asks l about every call,
// under the key that key gives it.
//
// Each call is decided by the limiter's Decide, and its metadata and answer
// come from the Decision alone: ratelimit-policy lists every policy of the
// Decision (a Composite's parts, in order; a limiter built WithPolicyFunc,
// the key's policy for the call), and the other fields are those of the
// policy that bound it (Decision.Policy), with the Result's numbers. Guard,
// DenyCache and Shadow tell their backend's policies, so the metadata
// through them equals the bare limiter's. A Limiter that is not a
// ratelimit.Decider has one policy, "default", whose limit is each
// Result's, with no w.
//
// A limiter of calls in flight (a policy whose InFlight is set, such as a
// ratelimit.Concurrency's, read once for the key "" when the Interceptor
// is built) needs WithLeases, under which each call is decided by
// the limiter's Acquire and holds its units while its handler runs.
//
// It returns an error wrapping ratelimit.ErrInvalidConfig for a nil l
// (including an interface holding a nil pointer), a nil key, a nil Option,
// an option given a value it cannot use, or an l of calls in flight
// without WithLeases.
func NewInterceptor(l ratelimit.Limiter, key KeyFunc, opts ...Option) (*Interceptor, error) {
	if nilcheck.IsNil(l) {
		return nil, fmt.Errorf("%w: grpclimit: nil limiter", ratelimit.ErrInvalidConfig)
	}
	if key == nil {
		return nil, fmt.Errorf("%w: grpclimit: nil KeyFunc", ratelimit.ErrInvalidConfig)
	}
	s := settings{closedRetry: defaultClosedRetry}
	for i, opt := range opts {
		if opt == nil {
			return nil, fmt.Errorf("%w: grpclimit: option %d is nil", ratelimit.ErrInvalidConfig, i)
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	in := &Interceptor{
		limiter:          l,
		key:              key,
		cost:             s.cost,
		skip:             s.skip,
		onError:          s.onError,
		observer:         s.observer,
		planName:         s.planName,
		failClosed:       s.failClosed,
		policyErrorsPass: s.policyErrorsPass,
		closedRetry:      s.closedRetry,
		fields:           &fields{style: s.style, unit: s.quotaUnit},
		partition:        s.partition,
		leases:           s.leases,
		after:            leasehold.AfterFunc,
	}
	if in.onError == nil {
		in.log = newLog(s.logger)
		in.onError = in.logError
	}
	if d, ok := l.(ratelimit.Decider); ok {
		// Policies may come with an error (a PolicyFunc's): a concurrency
		// limiter still reports its policy in flight.
		policies, _ := d.Policies(context.Background(), "")
		if s.planName != nil && len(policies) > 1 {
			return nil, fmt.Errorf("%w: grpclimit: WithPlanName names a limiter's one policy; this limiter (%T) has %d, named by itself", ratelimit.ErrInvalidConfig, l, len(policies))
		}
		if j := leasehold.InFlightIndex(policies); j >= 0 {
			if !s.leases {
				return nil, fmt.Errorf("%w: grpclimit: the limiter (%T) limits calls in flight (policy %q): build the Interceptor WithLeases, so that each call holds its units only while its handler runs; without it, every call would hold them for the policy's whole lease TTL", ratelimit.ErrInvalidConfig, l, policies[j].Name)
			}
			in.inFlight = true
		}
	}
	return in, nil
}

// Unary returns the unary server interceptor: the call is decided before
// its handler runs, the rate-limit metadata is set with grpc.SetHeader, and
// a call that is denied or answered by a failure policy never reaches the
// handler. Under WithLeases, the lease that holds an allowed call's units
// is held until the handler returns or panics.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		md, lease, err := i.decide(ctx, info.FullMethod, true)
		if md != nil {
			_ = grpc.SetHeader(ctx, md) // fails only outside a gRPC server
		}
		if err != nil {
			return nil, err
		}
		if !lease.Held() {
			return handler(ctx, req)
		}
		h := i.hold(ctx, info.FullMethod, lease)
		// Deferred, so that a panic releases the lease and then goes on.
		defer h.End()
		return handler(h, req)
	}
}

// Stream returns the stream server interceptor. A stream is decided once,
// when it opens, at the cost of one call (or the CostFunc's): the messages
// it then carries are not counted. The rate-limit metadata is set on the
// stream's header (ServerStream.SetHeader), which the handler's first
// message or SendHeader sends; a denied stream's handler never runs.
// Under WithLeases, the lease that holds an allowed stream's units is held
// for the stream's whole life: until its handler returns or panics.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, lease, err := i.decide(ss.Context(), info.FullMethod, true)
		if md != nil {
			_ = ss.SetHeader(md) // fails only once the header is sent, which it cannot be yet
		}
		if err != nil {
			return err
		}
		if !lease.Held() {
			return handler(srv, ss)
		}
		h := i.hold(ss.Context(), info.FullMethod, lease)
		defer h.End()
		return handler(srv, &leasedStream{ServerStream: ss, ctx: h})
	}
}

// Limit decides the call of ctx as Unary does, for go-grpc-middleware v2's
// ratelimit.UnaryServerInterceptor and StreamServerInterceptor, whose
// Limiter interface it implements: the method comes from grpc.Method(ctx),
// the rate-limit metadata is set with grpc.SetHeader(ctx), and the error is
// the status Unary would answer, or nil to let the call through. It
// cannot hold a lease for a call it returns before: with a limiter of
// calls in flight (built WithLeases), it answers every call
// codes.Internal without asking the limiter; use Unary and Stream. Those
// interceptors answer any error with a codes.ResourceExhausted status of
// their own that quotes its message, so the client gets neither the status
// details (RetryInfo, QuotaFailure) nor the codes of key errors and
// fail-closed answers; the metadata, retry-after included, reaches it. Use
// Unary and Stream when clients should see them. On the client side there
// is no method and no header to set: Limit is for servers.
func (i *Interceptor) Limit(ctx context.Context) error {
	if i != nil && i.inFlight {
		return status.Error(codes.Internal, "grpclimit: Limit cannot hold a call's lease for a limit of calls in flight; use the Unary and Stream interceptors")
	}
	method, _ := grpc.Method(ctx)
	md, _, err := i.decide(ctx, method, false)
	if md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
	return err
}

// decide decides the call of method and returns the metadata to set on its
// response (nil for none), the lease that holds its units (under
// WithLeases when acquire is true; one that holds nothing otherwise) and
// the error to answer it with (nil to let it through):
//
//   - skipped (WithSkip): no metadata, let through;
//   - KeyFunc or CostFunc error, or a negative cost: the error's own status,
//     or by its class (see keyStatus): codes.Unauthenticated,
//     codes.InvalidArgument or codes.Internal;
//   - a key the limiter refuses as too long (ratelimit.ErrInvalidKey):
//     codes.InvalidArgument, never let through;
//   - allowed: the fields, let through (with the lease that holds its
//     units, under WithLeases);
//   - denied: the fields and retry-after, codes.ResourceExhausted with
//     RetryInfo and QuotaFailure;
//   - cost above the limit: ratelimit-limit and ratelimit-policy,
//     codes.ResourceExhausted with QuotaFailure and no RetryInfo;
//   - a failure of the limiter's backend (ratelimit.ErrBackend, or an
//     error of a limiter of another package): the WithOnError hook, then
//     let through without metadata, or codes.Unavailable with RetryInfo
//     and retry-after under WithFailClosed;
//   - an error of a ratelimit.Shadow that does not enforce (its Decision's
//     Source is FromShadow): the WithOnError hook, then let through
//     without metadata, or codes.Unavailable under WithFailClosed;
//   - any other limiter error (the call's limit is unknown: a failing
//     PolicyFunc, ratelimit.ErrPolicy; a policy or keys the limiter
//     refuses; a key whose state is not the limiter's; a Decision whose
//     policies cannot be sent): the WithOnError hook, then
//     codes.Unavailable with RetryInfo and retry-after, or, under
//     WithPolicyErrorsPass without WithFailClosed, let through without
//     metadata.
//
// Everything it sends comes from the call's ratelimit.Decision.
func (i *Interceptor) decide(ctx context.Context, method string, acquire bool) (metadata.MD, ratelimit.Lease, error) {
	var none ratelimit.Lease
	if i == nil || i.limiter == nil || i.key == nil || i.fields == nil {
		return nil, none, status.Error(codes.Internal, "grpclimit: Interceptor not made by NewInterceptor")
	}
	if i.skip != nil && i.skip(ctx, method) {
		return nil, none, nil
	}
	var d ratelimit.Decision
	key, err := i.key(ctx, method)
	if err != nil {
		i.observe(ctx, method, &d, err)
		return nil, none, keyStatus(err)
	}
	cost := 1
	if i.cost != nil {
		if cost, err = i.cost(ctx, method); err == nil && cost < 0 {
			err = fmt.Errorf("grpclimit: CostFunc returned %d: %w", cost, ratelimit.ErrInvalidCost)
		}
		if err != nil {
			i.observe(ctx, method, &d, err)
			return nil, none, keyStatus(err)
		}
	}

	// A call whose handler runs is never free of the limit: one of cost 0
	// takes 1 (see CostFunc).
	n := max(cost, 1)
	var lease ratelimit.Lease
	if acquire && i.leases {
		lease, d, err = adapt.Acquire(ctx, i.limiter, key, n)
	} else {
		d, err = adapt.Decide(ctx, i.limiter, key, n)
	}
	if lease.Held() && (err != nil || !d.Allowed || d.WouldDeny) {
		// Not a lease this call may hold: only an allowed call's units
		// are held, and no Acquirer of package ratelimit grants any
		// other.
		i.release(ctx, method, lease)
		lease = none
	}
	if errors.Is(err, ratelimit.ErrInvalidKey) {
		// The call's key, not the limiter, is at fault: nothing was
		// taken, and the call must not pass unlimited.
		i.observe(ctx, method, &ratelimit.Decision{}, err)
		return nil, none, status.Error(codes.InvalidArgument, "grpclimit: the call's rate-limit key is longer than the limiter takes")
	}
	if err != nil && !errors.Is(err, ratelimit.ErrCostExceedsLimit) {
		i.observe(ctx, method, &d, err)
		md, err := i.failed(ctx, method, err, d.Source == ratelimit.FromShadow)
		return md, none, err
	}
	i.name(&d, key)
	vals, bound, perr := i.fields.policy(&d)
	if perr != nil {
		if err != nil {
			perr = fmt.Errorf("%w, and: %w", perr, err)
		}
		i.release(ctx, method, lease)
		i.observe(ctx, method, &d, perr)
		md, err := i.failed(ctx, method, perr, false)
		return md, none, err
	}
	p := &vals[bound]
	pk := i.partition.param(key)
	i.observe(ctx, method, &d, err)
	switch {
	case err != nil: // ErrCostExceedsLimit
		return i.fields.limitOnly(p), none, tooLarge(p, n)
	case d.Allowed:
		return i.fields.metadata(vals, bound, &d, false, pk), lease, nil
	default:
		return i.fields.metadata(vals, bound, &d, true, pk), none, denied(p, d.Result)
	}
}

// failed handles a limiter error: the WithOnError hook, then the call let
// through without metadata, or answered codes.Unavailable: under
// WithFailClosed, and for an error that is not a failure of the backend
// (see backendFailure) unless WithPolicyErrorsPass.
//
// shadowed says the error is that of a ratelimit.Shadow that does not
// enforce (its Decision's Source is FromShadow): it denies no one, unless
// WithFailClosed asks for every limiter error to.
func (i *Interceptor) failed(ctx context.Context, method string, err error, shadowed bool) (metadata.MD, error) {
	if i.onError != nil {
		i.onError(ctx, method, err)
	}
	msg := "grpclimit: rate limiting is unavailable; retry after the RetryInfo delay"
	switch {
	case i.failClosed:
	case !shadowed && !backendFailure(err) && !i.policyErrorsPass:
		msg = "grpclimit: the call's rate limit could not be determined; retry after the RetryInfo delay"
	default:
		return nil, nil
	}
	st := withDetails(status.New(codes.Unavailable, msg),
		&errdetails.RetryInfo{RetryDelay: durationpb.New(i.closedRetry)})
	return retryAfterOnly(ratefields.CeilSeconds(i.closedRetry)), st.Err()
}

// keyStatus returns the answer to a call whose key or cost could not be
// found, by the error's class: err's own gRPC status when it carries one;
// codes.Unauthenticated for a call without its credential (an error
// wrapping ErrMissingCredential); codes.InvalidArgument for the caller's
// other mistakes (ErrMalformedCredential, ratelimit.ErrInvalidCost, a
// negative cost's included); or else codes.Internal, the server's. The
// message never shows err (which may say more about the server than a
// client should know).
func keyStatus(err error) error {
	if st, ok := status.FromError(err); ok {
		return st.Err()
	}
	switch keyclass.Of(err) {
	case keyclass.Unauthenticated:
		return status.Error(codes.Unauthenticated, "grpclimit: the call carries no credential to key its rate limit by")
	case keyclass.Invalid:
		switch {
		case errors.Is(err, ratelimit.ErrInvalidCost):
			return status.Error(codes.InvalidArgument, "grpclimit: the call's cost is not valid")
		case errors.Is(err, ErrMalformedCredential):
			return status.Error(codes.InvalidArgument, "grpclimit: the call's credential is malformed")
		}
		return status.Error(codes.InvalidArgument, "grpclimit: the call's rate-limit key is not valid")
	}
	return status.Error(codes.Internal, "grpclimit: the call's rate-limit key or cost could not be found")
}

// denied returns the answer to a call res denied under policy p:
// codes.ResourceExhausted with RetryInfo (res's RetryAfter, exactly) and a
// QuotaFailure naming p.
func denied(p *ratefields.Policy, res ratelimit.Result) error {
	msg := fmt.Sprintf("grpclimit: rate limit exceeded (policy %q); retry after %v", p.Name, res.RetryAfter)
	desc := "the call exceeds the rate limit policy " + list1(p)
	if p.InFlight {
		msg = fmt.Sprintf("grpclimit: as many calls as the limit allows are in flight (policy %q); retry after %v, or sooner once one ends", p.Name, res.RetryAfter)
		desc = "the calls in flight are at the limit of the policy " + list1(p)
	}
	return withDetails(status.New(codes.ResourceExhausted, msg),
		&errdetails.RetryInfo{RetryDelay: durationpb.New(res.RetryAfter)},
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "policy:" + p.Name,
			QuotaId:     p.Name,
			Description: desc,
		}}},
	).Err()
}

// tooLarge returns the answer to a call whose cost exceeds policy p's
// limit, which can never succeed: codes.ResourceExhausted, as gRPC answers
// a message larger than the largest it accepts, with a QuotaFailure and no
// RetryInfo, since no wait will help.
func tooLarge(p *ratefields.Policy, cost int) error {
	msg := fmt.Sprintf("grpclimit: the call's cost %d exceeds the limit %d of policy %q and can never succeed", cost, p.Limit, p.Name)
	return withDetails(status.New(codes.ResourceExhausted, msg),
		&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
			Subject:     "policy:" + p.Name,
			QuotaId:     p.Name,
			Description: fmt.Sprintf("the call's cost %d exceeds the limit of the policy %s", cost, list1(p)),
		}}},
	).Err()
}

// list1 returns p's own item of ratelimit-policy, `"default";q=10;w=5`,
// or its quoted name when its limit is unknown.
func list1(p *ratefields.Policy) string {
	if p.Limit <= 0 {
		return ratefields.Quote(p.Name)
	}
	return p.Item
}

// withDetails returns st with details, or st alone should they fail to
// marshal (they cannot: they are well-formed messages).
func withDetails(st *status.Status, details ...protoadapt.MessageV1) *status.Status {
	if d, err := st.WithDetails(details...); err == nil {
		return d
	}
	return st
}

// backendFailure reports whether err, a limiter's error, is a failure of
// its backend: of class ratelimit.ErrBackend, or of no class of package
// ratelimit (a limiter of another package). The caller's class wins over
// the backend's (a PolicyFunc's error that wraps ErrBackend is the
// caller's).
func backendFailure(err error) bool {
	return !errors.Is(err, ratelimit.ErrCaller) && !errors.Is(err, ratelimit.ErrCorruptState)
}
