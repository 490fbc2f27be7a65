package grpclimit

import (
	"context"
	"fmt"

	"github.com/ratelimit-go/ratelimit"
	"google.golang.org/grpc/metadata"
)

// ClientOption configures the client interceptors (UnaryClientInterceptor
// and StreamClientInterceptor). It is a type of its own, not an Option:
// the server's options (a KeyFunc's, a header style, leases) mean nothing
// to a client, and a client's mean nothing to a server, so that neither
// can be given the other's. An option given a value it cannot use, and a
// nil ClientOption, make every call of the interceptor fail, unsent, with
// a codes.Internal status whose error wraps ratelimit.ErrInvalidConfig:
// the interceptor constructors return no error, as gRPC's own do not.
type ClientOption func(*clientSettings) error

// ClientPartitionFunc returns a call's partition, the Upstream's limiter's
// key: the upstream's address, the credential the call is sent with, its
// service. It must not be a secret, since outbound's Events show it: hash
// a credential first. It must be safe for concurrent use.
type ClientPartitionFunc func(ctx context.Context, fullMethod string) (string, error)

// ClientCostFunc returns the units a call takes of the Upstream's limit,
// such as an LLM call's estimated tokens. req is the unary call's request,
// and nil for a stream. It must be safe for concurrent use.
type ClientCostFunc func(ctx context.Context, fullMethod string, req any) (int, error)

// ClientSettleFunc reads a unary call's true cost from its answer, and
// reports false when the answer does not tell it. reply is the call's
// reply, nil when the call failed; header and trailer are the response's
// metadata. It must be safe for concurrent use, and must not modify its
// arguments.
type ClientSettleFunc func(fullMethod string, reply any, header, trailer metadata.MD) (cost int, ok bool)

// clientSettings collects what the client options set.
type clientSettings struct {
	partition ClientPartitionFunc // nil: the ClientConn's Target()
	cost      ClientCostFunc      // nil: 1
	settle    ClientSettleFunc    // nil: none
}

// WithClientPartition makes f give each call's partition. By default a
// call's partition is its ClientConn's Target(), the address it was dialed
// with: one budget per upstream. An error from f fails the call, unsent,
// with the error's own gRPC status when it carries one, or else by its
// class, as the server interceptors answer a key function's error:
// codes.Unauthenticated for one wrapping ErrMissingCredential,
// codes.InvalidArgument for ErrMalformedCredential or
// ratelimit.ErrInvalidCost, codes.Internal for the rest. A nil f is an
// error.
func WithClientPartition(f ClientPartitionFunc) ClientOption {
	return func(s *clientSettings) error {
		if f == nil {
			return fmt.Errorf("%w: grpclimit: WithClientPartition: nil func", ratelimit.ErrInvalidConfig)
		}
		s.partition = f
		return nil
	}
}

// WithClientCost makes each call take f's units of the limit instead of
// 1. An error from f fails the call, unsent, as WithClientPartition's does;
// a cost below 1 fails it with codes.InvalidArgument (a cost of 0 would
// send the call without taking from the budget). A nil f is an error.
func WithClientCost(f ClientCostFunc) ClientOption {
	return func(s *clientSettings) error {
		if f == nil {
			return fmt.Errorf("%w: grpclimit: WithClientCost: nil func", ratelimit.ErrInvalidConfig)
		}
		s.cost = f
		return nil
	}
}

// WithClientSettle makes the unary interceptor settle each call at the
// cost f reads from its answer, when f reports true (see
// outbound.Upstream.Settle): the units the call took are replaced by its
// true cost. The limiter must be a ratelimit.Adjuster. A settle that
// fails is reported to the Upstream's Observer (outbound.SettleFailed),
// and the call's own error or reply returned all the same. Streams are not settled. A nil f is an error.
func WithClientSettle(f ClientSettleFunc) ClientOption {
	return func(s *clientSettings) error {
		if f == nil {
			return fmt.Errorf("%w: grpclimit: WithClientSettle: nil func", ratelimit.ErrInvalidConfig)
		}
		s.settle = f
		return nil
	}
}
