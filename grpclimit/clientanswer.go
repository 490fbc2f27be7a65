package grpclimit

import (
	"net/http"

	"github.com/ratelimit-go/ratelimit/outbound"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// httpStatus is the HTTP status of each gRPC code, indexed by the code.
var httpStatus = [...]int{
	codes.OK:                 http.StatusOK,
	codes.Canceled:           499, // Client Closed Request: no constant in net/http
	codes.Unknown:            http.StatusInternalServerError,
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.FailedPrecondition: http.StatusBadRequest,
	codes.Aborted:            http.StatusConflict,
	codes.OutOfRange:         http.StatusBadRequest,
	codes.Unimplemented:      http.StatusNotImplemented,
	codes.Internal:           http.StatusInternalServerError,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DataLoss:           http.StatusInternalServerError,
	codes.Unauthenticated:    http.StatusUnauthorized,
}

// HTTPStatus returns the HTTP status code an outbound.Answer gives a call
// that ended with code c, so that outbound's parsers read a gRPC call as
// the HTTP answer it stands for: 200 for OK, 429 for ResourceExhausted
// (the upstream's limit), 503 for Unavailable, and the usual mapping for
// the others (InvalidArgument 400, Unauthenticated 401, PermissionDenied
// 403, NotFound 404, AlreadyExists and Aborted 409, Canceled 499,
// Unimplemented 501, DeadlineExceeded 504, and so on). A code gRPC does not
// define is 500.
func HTTPStatus(c codes.Code) int {
	if uint64(c) < uint64(len(httpStatus)) {
		return httpStatus[c]
	}
	return http.StatusInternalServerError
}

// answerOf returns the outbound.Answer of a call that ended
// with code c, whose response carried header and trailer: their metadata merged,
// keyed in canonical form ("retry-after" is "Retry-After"), header's values
// first, so that outbound's parsers read the fields the server
// interceptors of this package write. Its Now is zero: Observe reads it
// as the Upstream's clock's now.
func answerOf(c codes.Code, header, trailer metadata.MD) outbound.Answer {
	a := outbound.Answer{Status: HTTPStatus(c)}
	if n := len(header) + len(trailer); n > 0 {
		a.Header = make(http.Header, n)
		addFields(a.Header, header)
		addFields(a.Header, trailer)
	}
	return a
}

// addFields adds md's values to h, under their keys in canonical form.
func addFields(h http.Header, md metadata.MD) {
	for k, vs := range md {
		ck := http.CanonicalHeaderKey(k)
		h[ck] = append(h[ck], vs...)
	}
}
