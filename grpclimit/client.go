package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/ratelimit-go/ratelimit"
	"github.com/ratelimit-go/ratelimit/internal/keyclass"
	"github.com/ratelimit-go/ratelimit/outbound"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// UnaryClientInterceptor returns a unary client interceptor that sends each
// call through up: it waits until up admits the call in its partition (the
// ClientConn's Target(), or WithClientPartition's) at its cost (1, or
// WithClientCost's), invokes it, and gives its answer to up.Observe, so
// that a ResourceExhausted with retry-after pauses the partition and the
// ratelimit-policy metadata of a server built with this package lowers the
// limit, for every client that shares up's Store.
//
// The answer up observes is the call's code as an HTTP status (see
// HTTPStatus) and its header and trailer metadata merged, keyed in
// canonical form (retry-after is read as Retry-After), which the
// interceptor collects with grpc.Header and grpc.Trailer call options
// added after the caller's own (which are still filled).
//
// A call up does not admit is not sent: one that would wait past up's
// Config.MaxWait or its context's deadline fails at once with a
// codes.ResourceExhausted status whose error wraps outbound.ErrLimited
// (and context.DeadlineExceeded for the deadline), so that both
// status.Code and errors.Is read it; a context that ends during the wait
// gives codes.Canceled or codes.DeadlineExceeded, wrapping the context's
// error; a limiter that fails gives codes.Unavailable (codes.InvalidArgument
// for a cost below 1, codes.ResourceExhausted for a cost above the
// limit, codes.Internal for a limiter or Upstream that was never built),
// wrapping its error.
//
// It never retries: gRPC retries by the retry policy of the service
// config, inside the call. The interceptor admits the call once, so the
// attempts gRPC makes after the first are not counted, and only the last
// attempt's answer is observed; keep that policy's attempts few, or let
// the refused call fail and retry it through the interceptor.
//
// A nil up makes every call fail, unsent, with a codes.Internal status
// wrapping ratelimit.ErrInvalidConfig, as does a bad ClientOption. The
// interceptor is safe for concurrent use.
func UnaryClientInterceptor(up *outbound.Upstream, opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := newClient(up, opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		p, err := c.admit(ctx, cc, method, req)
		if err != nil {
			return err
		}
		var header, trailer metadata.MD
		// A full slice expression, so that the caller's slice is never
		// appended to in place.
		callOpts = append(callOpts[:len(callOpts):len(callOpts)], grpc.Header(&header), grpc.Trailer(&trailer))
		err = invoker(ctx, method, req, reply, cc, callOpts...)
		c.up.Observe(ctx, p, answerOf(status.Code(err), header, trailer))
		if c.settle != nil {
			if err != nil {
				reply = nil
			}
			if cost, ok := c.settle(method, reply, header, trailer); ok {
				// Reported to the Upstream's Observer on failure.
				_ = c.up.Settle(context.WithoutCancel(ctx), p, cost)
			}
		}
		return err
	}
}

// StreamClientInterceptor returns a stream client interceptor that sends
// each stream through up, as UnaryClientInterceptor does a unary call:
// the stream's start is admitted once, at WithClientCost's cost (whose req
// is nil), whatever the messages it then carries. A stream that is not
// admitted is not opened, and fails as a refused unary call does.
//
// up observes the stream's answer twice at most:
//
//   - its header metadata, as a 200, when the first message of a stream
//     whose server streams arrives (or when the caller asks for the
//     header), so that a long stream's limits are learned at its start;
//   - its end, when the caller sees it: RecvMsg returns io.EOF (OK) or an
//     error, or returns the one message of a stream whose server does not
//     stream; its code, as HTTPStatus says, with its header and trailer
//     metadata merged. A stream that could not be opened is observed by
//     its error's code alone.
//
// A stream whose end the caller never reads (abandoned without draining
// RecvMsg) is observed by its header only. It never retries, as
// UnaryClientInterceptor does not, and WithClientSettle does not apply to
// streams.
func StreamClientInterceptor(up *outbound.Upstream, opts ...ClientOption) grpc.StreamClientInterceptor {
	c := newClient(up, opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		p, err := c.admit(ctx, cc, method, nil)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			c.up.Observe(ctx, p, answerOf(status.Code(err), nil, nil))
			return nil, err
		}
		return &observedStream{ClientStream: cs, c: c, ctx: ctx, permit: p, serverStreams: desc.ServerStreams}, nil
	}
}

// client is what the client interceptors share: the Upstream, the
// options, and the error that fails every call when they are not usable.
type client struct {
	up *outbound.Upstream
	clientSettings
	err error
}

// newClient returns the client of up and opts.
func newClient(up *outbound.Upstream, opts []ClientOption) *client {
	c := &client{up: up}
	if up == nil {
		c.err = fmt.Errorf("%w: grpclimit: nil outbound.Upstream", ratelimit.ErrInvalidConfig)
		return c
	}
	for i, opt := range opts {
		if opt == nil {
			c.err = fmt.Errorf("%w: grpclimit: client option %d is nil", ratelimit.ErrInvalidConfig, i)
			return c
		}
		if err := opt(&c.clientSettings); err != nil {
			c.err = err
			return c
		}
	}
	return c
}

// admit returns the Permit of the call of method, or the status error it
// fails with, unsent.
func (c *client) admit(ctx context.Context, cc *grpc.ClientConn, method string, req any) (outbound.Permit, error) {
	if c.err != nil {
		return outbound.Permit{}, statusError(c.err)
	}
	var partition string
	if c.partition != nil {
		var err error
		if partition, err = c.partition(ctx, method); err != nil {
			return outbound.Permit{}, funcError(fmt.Errorf("grpclimit: the call's partition: %w", err))
		}
	} else if cc != nil {
		partition = cc.Target()
	}
	cost := 1
	if c.cost != nil {
		var err error
		if cost, err = c.cost(ctx, method, req); err != nil {
			return outbound.Permit{}, funcError(fmt.Errorf("grpclimit: the call's cost: %w", err))
		}
	}
	p, err := c.up.Admit(ctx, partition, cost)
	if err != nil {
		return outbound.Permit{}, statusError(err)
	}
	return p, nil
}

// clientError is the error of a call the client interceptors did not
// send: a gRPC status (its GRPCStatus, which status.FromError and
// status.Code read) that wraps the cause (which errors.Is reads).
type clientError struct {
	st  *status.Status
	err error
}

// Error returns the status's text, as a status error's: "rpc error: code
// = ResourceExhausted desc = ...".
func (e *clientError) Error() string { return e.st.String() }

// GRPCStatus returns the error's status.
func (e *clientError) GRPCStatus() *status.Status { return e.st }

// Unwrap returns the cause.
func (e *clientError) Unwrap() error { return e.err }

// statusError returns err as the status error of a call not sent: of the
// code refusedCode gives it, wrapping err, its message err's.
func statusError(err error) error {
	return &clientError{st: status.New(refusedCode(err), err.Error()), err: err}
}

// funcError returns err, the error of a partition or cost function, as
// the status error of a call not sent: of the code of the status err
// carries, or else by its class, as the server interceptors answer the
// same errors (keyclass.Of): Unauthenticated for a missing credential,
// InvalidArgument for a malformed one or a bad cost
// (ratelimit.ErrInvalidCost), Internal for the rest.
func funcError(err error) error {
	code := codes.Internal
	var st interface{ GRPCStatus() *status.Status }
	if errors.As(err, &st) && st.GRPCStatus() != nil {
		code = st.GRPCStatus().Code()
	} else {
		switch keyclass.Of(err) {
		case keyclass.Unauthenticated:
			code = codes.Unauthenticated
		case keyclass.Invalid:
			code = codes.InvalidArgument
		}
	}
	return &clientError{st: status.New(code, err.Error()), err: err}
}

// refusedCode returns the code of a call not sent for err: ResourceExhausted
// for the Upstream's limit (outbound.ErrLimited, checked first: it may
// wrap context.DeadlineExceeded) or a cost above the limiter's; the
// context's code for a context that ended; the code of a status err
// carries (a partition or cost function's); InvalidArgument for a bad
// cost; Internal for a configuration that cannot work and the other
// mistakes of the caller or corrupt state; Unavailable for a failure of
// the limiter's backend.
func refusedCode(err error) codes.Code {
	switch {
	case errors.Is(err, outbound.ErrLimited), errors.Is(err, ratelimit.ErrCostExceedsLimit):
		return codes.ResourceExhausted
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, ratelimit.ErrInvalidCost):
		return codes.InvalidArgument
	case errors.Is(err, ratelimit.ErrCaller), errors.Is(err, ratelimit.ErrCorruptState):
		return codes.Internal
	}
	return codes.Unavailable
}

// observedStream is a ClientStream whose header and end its Upstream
// observes (see StreamClientInterceptor).
type observedStream struct {
	grpc.ClientStream
	c             *client
	ctx           context.Context
	permit        outbound.Permit
	serverStreams bool
	header        atomic.Bool // the header was observed
	ended         atomic.Bool // the end was observed
}

// Header returns the stream's header metadata, and observes it.
func (s *observedStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	if err == nil {
		s.observeHeader(md)
	}
	return md, err
}

// RecvMsg receives a message, and observes the header on the first of a
// stream whose server streams, or the stream's end.
func (s *observedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	switch {
	case err != nil:
		s.end(err)
	case !s.serverStreams:
		// The one message of a stream whose server does not stream:
		// gRPC has read its status, OK.
		s.end(nil)
	case !s.header.Load():
		// The header came before the message, so this does not block.
		if md, herr := s.ClientStream.Header(); herr == nil {
			s.observeHeader(md)
		}
	}
	return err
}

// observeHeader observes md, the stream's header, once.
func (s *observedStream) observeHeader(md metadata.MD) {
	if s.header.CompareAndSwap(false, true) {
		s.c.up.Observe(s.ctx, s.permit, answerOf(codes.OK, md, nil))
	}
}

// end observes the stream's end, with err (io.EOF or nil for OK), once:
// its code, and its header and trailer merged. A header already observed
// is read again, since it may carry a retry-after only a code other than
// OK gives meaning to.
func (s *observedStream) end(err error) {
	if !s.ended.CompareAndSwap(false, true) {
		return
	}
	code := codes.OK
	if err != nil && !errors.Is(err, io.EOF) {
		code = status.Code(err)
	}
	// The stream has ended: Header does not block.
	header, _ := s.ClientStream.Header()
	s.header.Store(true)
	s.c.up.Observe(s.ctx, s.permit, answerOf(code, header, s.ClientStream.Trailer()))
}
