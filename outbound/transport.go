package outbound

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/ratelimit-go/ratelimit"
)

// MaxRetries is the most a Transport's Retries may be.
const MaxRetries = 10

// Transport is an http.RoundTripper that sends each request through an
// Upstream: it waits until the limiter allows the request's cost in its
// partition and the partition is not paused (or fails at once, see
// Config.MaxWait), sends it with Base, and learns from the answer. It
// composes with any other RoundTripper: put it inside a retrying
// transport to have each attempt limited, or outside a tracing one.
//
//	client := &http.Client{Transport: &outbound.Transport{Upstream: up}}
//
// A request that is not sent returns an error wrapping ErrLimited (see
// Upstream.Admit), closing the request's body as a RoundTripper must. A
// 429 is returned as the upstream sent it, after its lesson is kept;
// with Retries, a request that can be sent again is, after the pause the
// answer asks for (see Retries).
//
// Its fields must not change once it is in use; it is then safe for
// concurrent use. A Transport whose Upstream is nil fails every request
// with an error wrapping ratelimit.ErrInvalidConfig.
type Transport struct {
	// Upstream admits the requests and learns from their answers.
	Upstream *Upstream
	// Base sends the requests. nil: http.DefaultTransport.
	Base http.RoundTripper
	// Partition returns a request's partition, the limiter's key: the
	// upstream's host, the credential it is sent with, its route. It
	// must not be a secret, since Events show it: hash a credential
	// first. An error fails the request, unsent, with an error wrapping
	// it and ratelimit.ErrCaller. nil: ByHost.
	Partition func(*http.Request) (string, error)
	// Cost returns the units a request takes, such as an LLM call's
	// estimated tokens, at least 1 (a cost below fails the request,
	// unsent, with an error wrapping ratelimit.ErrInvalidCost); an error
	// fails the request, unsent, with an error wrapping it and
	// ratelimit.ErrCaller. nil: 1. A limiter that counts
	// tokens must learn limits stated in tokens, not in requests: set
	// Config.Unit.
	Cost func(*http.Request) (int, error)
	// Settle, when not nil, reads the true cost of a request from its
	// answer, and reports false when the answer does not tell it: the
	// units taken are then settled at that cost (see Upstream.Settle).
	// If it reads the body, it must put back one that reads the same.
	// A settle that fails is reported to the Config's Observer
	// (SettleFailed), and the response returned all the same.
	Settle func(*http.Response) (cost int, ok bool)
	// Retries is how many times a request the upstream refused (a 429,
	// or a 503 with a Retry-After) is sent again, after the pause the
	// answer set, and only when the wait fits Config.MaxWait and the
	// request's deadline. Only a request that can be replayed is: of an
	// idempotent method (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or with
	// an Idempotency-Key (or X-Idempotency-Key) field, and with no body or
	// one that GetBody gives again. Each attempt waits at most
	// Config.MaxWait, so a request with Retries may wait up to
	// (Retries+1) × MaxWait in all, within its deadline. The next attempt
	// is admitted before the refusal is let go: when it cannot be (the
	// limiter, a longer pause, the deadline), or the refusal's body is
	// over 64 KiB, the refusal is returned as the upstream sent it.
	// 0: none; at most MaxRetries.
	Retries int
	// RetryAnyMethod lets Retries resend a request of any method (a POST
	// without an Idempotency-Key), still only with a body GetBody gives
	// again: for an upstream known to act on none of the calls it
	// refuses.
	RetryAnyMethod bool
}

// ByHost is the default partition of a Transport: the request's URL's
// host, with its port if it has one.
func ByHost(r *http.Request) (string, error) {
	if r.URL == nil || r.URL.Host == "" {
		return "", errors.New("outbound: the request's URL has no host")
	}
	return r.URL.Host, nil
}

// ByCredential returns a partition function for Transport.Partition
// that gives each credential its own budget at each host: the request's
// host, a space, and the digest of its field (ratelimit.KeyDigest: never
// the credential itself, which Events would show), such as
// "api.example.com sha256:1f2e3d4c5b6a7980" for ByCredential
// ("Authorization"). A request without the field, or with it empty, fails
// unsent with an error wrapping ratelimit.ErrCaller.
func ByCredential(field string) func(*http.Request) (string, error) {
	field = http.CanonicalHeaderKey(field)
	return func(r *http.Request) (string, error) {
		host, err := ByHost(r)
		if err != nil {
			return "", err
		}
		v := r.Header.Get(field)
		if v == "" {
			return "", fmt.Errorf("outbound: the request has no %s field to partition by", field)
		}
		return host + " " + ratelimit.KeyDigest(v), nil
	}
}

// RoundTrip sends req within the Upstream's limits, as the type's
// documentation says.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	u := t.Upstream
	if u == nil || u.limiter == nil {
		return nil, closeBody(req, errNilUpstream)
	}
	if t.Retries < 0 || t.Retries > MaxRetries {
		return nil, closeBody(req, fmt.Errorf("%w: outbound: Transport.Retries is %d; it must be in [0, %d]", ratelimit.ErrInvalidConfig, t.Retries, MaxRetries))
	}
	partition, cost, err := t.callOf(req)
	if err != nil {
		return nil, closeBody(req, err)
	}
	ctx := req.Context()
	p, err := u.admit(ctx, partition, cost, 0)
	if err != nil {
		return nil, closeBody(req, err)
	}
	for attempt := 1; ; attempt++ {
		resp, err := t.base().RoundTrip(req)
		if err != nil {
			return nil, err
		}
		l := u.Observe(ctx, p, Answer{Status: resp.StatusCode, Header: resp.Header})
		if t.Settle != nil {
			if c, ok := t.Settle(resp); ok {
				_ = u.Settle(ctx, p, c) // reported to the Observer
			}
		}
		if !l.Limited || attempt > t.Retries || !u.fits(ctx, l.Pause) {
			return resp, nil
		}
		next, ok := t.replay(req)
		if !ok || !buffer(resp) {
			return resp, nil
		}
		// The next attempt is admitted before the refusal is let go: one
		// that is not (the limiter, a longer pause another replica set,
		// ctx's end) returns the refusal as the upstream sent it.
		np, err := u.admit(ctx, partition, cost, l.Pause)
		if err != nil {
			closeBody(next, nil)
			return resp, nil
		}
		_ = resp.Body.Close()
		u.report(Event{Kind: Retried, Partition: partition, Status: resp.StatusCode, Attempt: attempt + 1})
		req, p = next, np
	}
}

// maxBuffered is the largest body of a refusal a Transport keeps while it
// waits to send the request again: a larger one is returned at once.
const maxBuffered = 64 << 10

// buffer reads resp's body into memory and closes it, so that the
// connection is free while the request waits to be sent again, and
// reports whether it could: false for a body larger than maxBuffered or
// one that fails to read, which is then left readable as it was.
func buffer(resp *http.Response) bool {
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBuffered+1))
	if err != nil || len(b) > maxBuffered {
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
		return false
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return true
}

// readCloser reads from one reader and closes another.
type readCloser struct {
	io.Reader
	io.Closer
}

// callOf returns req's partition and cost.
func (t *Transport) callOf(req *http.Request) (string, int, error) {
	part := ByHost
	if t.Partition != nil {
		part = t.Partition
	}
	partition, err := part(req)
	if err != nil {
		return "", 0, fmt.Errorf("outbound: the request's partition: %w: %w", ratelimit.ErrCaller, err)
	}
	cost := 1
	if t.Cost != nil {
		if cost, err = t.Cost(req); err != nil {
			return "", 0, fmt.Errorf("outbound: the request's cost: %w: %w", ratelimit.ErrCaller, err)
		}
	}
	return partition, cost, nil
}

// base returns the RoundTripper that sends the requests.
func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// replay returns a copy of req to send again, and false when req cannot be
// replayed (see Retries).
func (t *Transport) replay(req *http.Request) (*http.Request, bool) {
	if !t.RetryAnyMethod && !idempotent(req) {
		return nil, false
	}
	next := req.Clone(req.Context())
	if req.Body == nil || req.Body == http.NoBody {
		return next, true
	}
	if req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	next.Body = body
	return next, true
}

// idempotent reports whether req may be sent twice with the effect of
// once: by its method (RFC 9110, section 9.2.2), or by an Idempotency-Key
// or X-Idempotency-Key field, present even without a value, as net/http
// reads them when it replays a request.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	_, ok := req.Header["X-Idempotency-Key"]
	return ok
}

// fits reports whether a wait of d from now fits MaxWait and ctx's
// deadline, as a call that has not waited yet is held to.
func (u *Upstream) fits(ctx context.Context, d time.Duration) bool {
	_, err := u.room(ctx, 0, d)
	return err == nil
}

// closeBody closes req's body, as a RoundTripper must even when it fails,
// and returns err.
func closeBody(req *http.Request, err error) error {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return err
}
