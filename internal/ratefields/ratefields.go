// Package ratefields formats the rate-limit fields that package httplimit
// sends as HTTP header fields and package grpclimit as gRPC metadata: the
// RateLimit and RateLimit-Policy fields of
// draft-ietf-httpapi-ratelimit-headers-11 (policy items with q, w and qu,
// service limit items with r, t and pk) and the legacy RateLimit-Limit,
// RateLimit-Remaining, RateLimit-Reset and Retry-After values. It also
// holds what both packages do alike to key a caller by its IP address.
//
// Each package keeps its own field names, its own options and their
// errors, and sets the values this package formats into its own carrier
// (an http.Header, a metadata.MD); the bytes sent are this package's. All
// its functions are safe for concurrent use, and its types are immutable
// values.
package ratefields
