// Package leasehold holds a ratelimit.Lease for as long as the work it was
// acquired for runs (an HTTP request, a gRPC call or stream), for the
// middleware of httplimit and the interceptor of grpclimit: a Hold extends
// the lease every third of its TTL on a timer while the work runs, stops
// extending when it ends and then releases the lease, each Extend and
// Release under the work's context without its cancellation and bounded
// by Timeout, and reports each failure, wrapping its Owner's error, to the
// package that holds it.
package leasehold
