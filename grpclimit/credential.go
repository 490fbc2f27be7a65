package grpclimit

import (
	"context"

	"github.com/ratelimit-go/ratelimit/internal/keyclass"
	"google.golang.org/grpc/metadata"
)

// ErrMissingCredential is wrapped by a KeyFunc's error when the call
// carries no credential to key it by (KeyByBearer's call without a Bearer
// credential, KeyByMetadata's without its key): the Interceptor answers
// codes.Unauthenticated, unless the error carries a gRPC status of its own.
// A KeyFunc of your own wraps it for such calls. It is the same error as
// httplimit's ErrMissingCredential, answered 401 there (400 when the error
// names no challenge, since an HTTP 401 must carry one).
var ErrMissingCredential = keyclass.ErrMissingCredential

// ErrMalformedCredential is wrapped by a KeyFunc's error when the call
// carries a credential that cannot be read (KeyByBearer's authorization
// metadata without a well-formed token): the Interceptor answers
// codes.InvalidArgument, unless the error carries a gRPC status of its
// own. It is the same error as httplimit's ErrMalformedCredential,
// answered 400 there.
var ErrMalformedCredential = keyclass.ErrMalformedCredential

// KeyByBearer returns a KeyFunc that keys a call by the Bearer credential
// in its "authorization" metadata: "Bearer", matched case-insensitively,
// one space or more, and the token (RFC 6750's syntax, as
// grpc.credentials.oauth sends it).
//
// The key is "bearer:" and the unpadded base64url form of the first 16
// bytes of the token's SHA-256, never the token, which a Redis limiter
// would store where anyone who can list keys reads it; it equals
// httplimit.KeyByBearer's key for the same token, so that an HTTP and a
// gRPC front share a client's limit. The hash is not keyed: replicas need
// the same key for a token without sharing a secret, and a bearer token
// has far too much entropy to be found from its hash by trying candidates.
//
// A call without the metadata, or with a credential of another scheme,
// gets an error wrapping ErrMissingCredential and ErrNoKey, answered
// codes.Unauthenticated; one whose Bearer credential has no token or a
// token that is not a b64token, or that has several authorization values,
// gets one wrapping ErrMalformedCredential and ErrNoKey, answered
// codes.InvalidArgument. The KeyFunc does not check the token. It is safe
// for concurrent use.
func KeyByBearer() KeyFunc {
	errs := keyclass.NewBearerErrors("grpclimit", ErrNoKey)
	return func(ctx context.Context, _ string) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return keyclass.Bearer(md["authorization"], errs)
	}
}
